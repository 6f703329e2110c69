/**
 * The security headers every response gets, read from what Vercel deploys: the routes in
 * `.vercel/output/config.json` that `npm run build` (Vercel's own builder) writes, not from
 * vercel.json. The build runs first when the output is missing or older than its sources.
 * Each path is routed as Vercel's router does for headers: every route whose `src` matches
 * and that carries `headers` adds them, in order, while `continue` is set.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, test } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));
const output = join(root, ".vercel", "output", "config.json");

function newestSource(): number {
  let newest = 0;
  const walk = (path: string) => {
    const info = statSync(path);
    if (info.isDirectory()) for (const entry of readdirSync(path)) walk(join(path, entry));
    else newest = Math.max(newest, info.mtimeMs);
  };
  for (const path of ["vercel.json", "package.json", "api", "lib", "public"])
    walk(join(root, path));
  return newest;
}

function builtMtime(): number {
  try {
    return statSync(output).mtimeMs;
  } catch {
    return 0;
  }
}

type Route = { src?: string; headers?: Record<string, string>; continue?: boolean };
let routes: Route[] = [];

beforeAll(() => {
  if (builtMtime() < newestSource()) {
    const r = spawnSync("npm", ["run", "build"], { cwd: root, stdio: "inherit" });
    if (r.status !== 0) throw new Error(`npm run build failed (exit ${r.status})`);
  }
  routes = (JSON.parse(readFileSync(output, "utf8")) as { routes: Route[] }).routes;
}, 600_000);

/** The headers the deployment adds to a response for `path` (lower-cased names). */
function headersFor(path: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const route of routes) {
    if (!route.src || !route.headers) continue;
    if (!new RegExp(route.src).test(path)) continue;
    for (const [k, v] of Object.entries(route.headers)) out[k.toLowerCase()] = v;
    if (!route.continue) break;
  }
  return out;
}

function directives(csp: string): Map<string, string[]> {
  return new Map(
    csp
      .split(";")
      .map((d) => d.trim().split(/\s+/))
      .filter((parts) => parts[0])
      .map(([name = "", ...values]) => [name.toLowerCase(), values]),
  );
}

const PATHS = [
  "/",
  "/index.html",
  "/app.js",
  "/styles.css",
  "/no-such-page",
  "/api/jobs",
  "/api/jobs/0d6f0a4e-8a3b-4f0e-9d51-1b2c3d4e5f60",
  "/api/health",
  "/api/public-config",
  "/api/worker",
];

describe("security headers on every route of the built deployment", () => {
  test.each(PATHS)("%s cannot be framed, sniffed or leak its URL", (path) => {
    const h = headersFor(path);
    expect(h["x-content-type-options"]).toBe("nosniff");
    expect(h["referrer-policy"]).toBe("no-referrer");
    expect(h["x-frame-options"]).toBe("DENY");
    const csp = directives(h["content-security-policy"] ?? "");
    expect(csp.get("frame-ancestors")).toEqual(["'none'"]);
    expect(csp.get("object-src")).toEqual(["'none'"]);
    expect(csp.get("base-uri")).toEqual(["'none'"]);
    expect(csp.get("script-src")).toEqual(["'self'"]);
  });

  test.each(PATHS)(
    "%s may connect only to the app and Supabase (never any https: origin)",
    (path) => {
      const csp = directives(headersFor(path)["content-security-policy"] ?? "");
      expect(csp.get("connect-src")).toEqual(["'self'", "https://*.supabase.co"]);
    },
  );

  test("API answers stay uncacheable", () => {
    expect(headersFor("/api/jobs")["cache-control"]).toBe("no-store");
  });
});
