/**
 * The page's copy of auth-js (public/vendor/auth-js.js) is exactly what
 * `npm run bundle:auth-js` makes from the installed @supabase/auth-js: an upgrade that forgot
 * to rebundle, or a hand edit of the committed file, fails here.
 */
import { readFileSync } from "node:fs";
import { expect, test } from "vitest";
import { BUNDLE, bundleAuthJs } from "../../dev/auth/bundle-auth-js.ts";
import { bundleRealtimeJs, REALTIME_BUNDLE } from "../../dev/realtime/bundle-realtime-js.ts";

test("the committed auth-js bundle is what the bundler makes from the locked version", async () => {
  const committed = readFileSync(BUNDLE, "utf8");
  expect(committed === (await bundleAuthJs()), "run npm run bundle:auth-js").toBe(true);
  const version = JSON.parse(
    readFileSync(
      new URL("../../node_modules/@supabase/auth-js/package.json", import.meta.url),
      "utf8",
    ),
  ).version;
  const locked = JSON.parse(
    readFileSync(new URL("../../package-lock.json", import.meta.url), "utf8"),
  ).packages["node_modules/@supabase/auth-js"].version;
  expect(version).toBe(locked);
});

test("the committed realtime-js bundle is what the bundler makes from the locked version", async () => {
  const committed = readFileSync(REALTIME_BUNDLE, "utf8");
  expect(committed === (await bundleRealtimeJs()), "run npm run bundle:realtime-js").toBe(true);
  const locked = JSON.parse(
    readFileSync(new URL("../../package-lock.json", import.meta.url), "utf8"),
  ).packages["node_modules/@supabase/realtime-js"].version;
  const version = JSON.parse(
    readFileSync(
      new URL("../../node_modules/@supabase/realtime-js/package.json", import.meta.url),
      "utf8",
    ),
  ).version;
  expect(version).toBe(locked);
});
