import { expect, test } from "vitest";
import { connectPolicy } from "../../public/csp.js";

test("the page narrows connect-src to the app and the configured Supabase origin only", () => {
  expect(connectPolicy("https://abcdefghijklmnop.supabase.co")).toBe(
    "connect-src 'self' https://abcdefghijklmnop.supabase.co",
  );
  // The origin only: a path or a trailing slash never widens or breaks it.
  expect(connectPolicy("https://auth.example.com/some/path/")).toBe(
    "connect-src 'self' https://auth.example.com",
  );
});

test("without a usable https Supabase URL the page may reach only the app", () => {
  for (const url of [null, undefined, "", "not a url", "http://127.0.0.1:54321", "javascript:x"]) {
    expect(connectPolicy(url)).toBe("connect-src 'self'");
  }
});
