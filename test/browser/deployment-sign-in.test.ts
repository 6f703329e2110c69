/**
 * The page as a deployment serves it: no dev routes, Supabase Auth by email and password.
 * The app is the real local one; only what a deployment has and the stack does not is stood
 * in for at the network edge of the browser: `/__dev/info` answers 404 (as on Vercel), and
 * Supabase Auth's token endpoint answers as GoTrue does, with a token the app really verifies.
 */
import { randomUUID } from "node:crypto";
import type { Route } from "playwright-core";
import { expect, test } from "vitest";
import { shownText, until, useBrowserStack } from "../support/browser.ts";

const h = useBrowserStack();
const supabaseUrl = "https://demo-project.supabase.co";

test("GET /api/public-config gives the page the Supabase URL and publishable key, no secret", async () => {
  const stack = h.stack();
  const res = await fetch(`${stack.urls.app}/api/public-config`);
  expect(res.status).toBe(200);
  const body = await res.json();
  expect(body).toEqual({
    supabaseUrl: stack.env.SUPABASE_URL,
    supabasePublishableKey: stack.env.SUPABASE_PUBLISHABLE_KEY,
  });
  const text = JSON.stringify(body);
  for (const name of [
    "SUPABASE_SECRET_KEY",
    "SUPABASE_SERVICE_ROLE_KEY",
    "SUPABASE_JWT_SECRET",
    "CRON_SECRET",
  ]) {
    const secret = stack.env[name];
    if (secret) expect(text).not.toContain(secret);
  }
});

test("in a deployment, a user signs in with email and password through Supabase Auth, and out again", async () => {
  const stack = h.stack();
  const anonKey = stack.env.SUPABASE_PUBLISHABLE_KEY ?? "sb_publishable_missing";
  const userId = randomUUID();
  const seen: { grant: string | null; apikey: string | undefined }[] = [];
  const { page, context } = await h.open();
  await context.route("**/__dev/**", (route) =>
    route.fulfill({ status: 404, contentType: "text/plain", body: "The page could not be found" }),
  );
  await context.route("**/api/public-config", (route) =>
    route.fulfill({ json: { supabaseUrl, supabasePublishableKey: anonKey } }),
  );
  await context.route(`${supabaseUrl}/auth/v1/**`, async (route: Route) => {
    const request = route.request();
    const grant = new URL(request.url()).searchParams.get("grant_type");
    seen.push({ grant, apikey: request.headers().apikey });
    if (request.method() === "OPTIONS") return route.fulfill({ status: 204, headers: cors });
    if (grant !== "password") return route.fulfill({ status: 204, headers: cors });
    const body = request.postDataJSON() as { email: string; password: string };
    if (body.password !== "correct horse battery") {
      return route.fulfill({
        status: 400,
        headers: cors,
        json: { code: 400, error_code: "invalid_credentials", msg: "Invalid login credentials" },
      });
    }
    // Signed by the local project's Auth (ES256), as Supabase Auth signs it.
    const accessToken = await stack.auth.mint({ userId });
    return route.fulfill({
      headers: cors,
      json: {
        access_token: accessToken,
        token_type: "bearer",
        expires_in: 3600,
        expires_at: Math.floor(Date.now() / 1000) + 3600,
        refresh_token: "refresh-token-1",
        user: { id: userId, aud: "authenticated", email: body.email },
      },
    });
  });
  await page.reload();

  await page.getByRole("button", { name: "Sign in", exact: true }).waitFor();
  expect(await page.locator("#dev-form").isHidden()).toBe(true);
  await page.getByLabel("Email").fill("ada@example.com");
  await page.getByLabel("Password").fill("wrong password");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  const error = page.locator("#sign-in-error");
  expect(await shownText(error, "the sign-in error")).toBe(
    "That email and password do not match an account.",
  );
  await h.screenshot(page, "00-sign-in-deployment");

  await page.getByLabel("Password").fill("correct horse battery");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await until("the usage line", async () =>
    (await page.locator("#usage").textContent())?.startsWith("Free plan: 0 of 1"),
  );
  expect(await page.locator("#who").textContent()).toBe("Signed in as ada@example.com");
  expect(seen.filter((s) => s.grant === "password")).toEqual([
    { grant: "password", apikey: anonKey },
    { grant: "password", apikey: anonKey },
  ]);
  // the page keeps no password anywhere
  const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage, ...localStorage }));
  expect(stored).not.toContain("correct horse battery");

  await page.getByRole("button", { name: "Sign out" }).click();
  await page.getByRole("button", { name: "Sign in", exact: true }).waitFor();
  expect(await page.locator("#sign-in-notice").textContent()).toBe("You are signed out.");
  expect(await page.evaluate(() => sessionStorage.getItem("quota-jobs.session"))).toBeNull();
});

const cors = {
  "access-control-allow-origin": "*",
  "access-control-allow-headers": "apikey, authorization, content-type, x-client-info",
  "access-control-allow-methods": "POST, GET, OPTIONS",
};
