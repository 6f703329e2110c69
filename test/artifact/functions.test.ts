/**
 * What ships is what Vercel's builder made: every function in `.vercel/output/functions`
 * loads in a fresh process of the Node version its `.vc-config.json` names, through plain
 * Node (no tsx, no bundler of ours), and answers a request through its default export's
 * `fetch`, as Vercel's Node launcher calls it. The global setup builds the output first.
 */
import { spawnSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, test } from "vitest";
import { OUTPUT_DIR } from "../../dev/build.ts";
import { root } from "../../dev/postgres/migrate.ts";
import { mintUserToken } from "../../dev/token.ts";
import { loadConfig } from "../../lib/config.ts";

const NODE = join(root, "node_modules", "node", "bin", "node");
const LOADER = join(root, "dev", "vercel-output.ts");

function functionDirs(dir = join(OUTPUT_DIR, "functions")): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (!e.isDirectory()) return [];
    return e.name.endsWith(".func")
      ? [relative(join(OUTPUT_DIR, "functions"), path)]
      : functionDirs(path);
  });
}

/** A configuration whose services are all unreachable: loading must not need them. */
const UNREACHABLE_ENV = {
  SUPABASE_URL: "http://127.0.0.1:9",
  SUPABASE_SERVICE_ROLE_KEY: "service-role-key-for-a-load-test",
  SUPABASE_JWT_SECRET: "a-jwt-secret-of-at-least-thirty-two-characters",
  QSTASH_URL: "http://127.0.0.1:9",
  QSTASH_TOKEN: "qstash-token-for-a-load-test",
  QSTASH_CURRENT_SIGNING_KEY: "sig_current_for_a_load_test",
  QSTASH_NEXT_SIGNING_KEY: "sig_next_for_a_load_test",
  UPSTASH_REDIS_REST_URL: "http://127.0.0.1:9",
  UPSTASH_REDIS_REST_TOKEN: "redis-token-for-a-load-test",
  OPENAI_API_KEY: "sk-for-a-load-test",
  APP_URL: "https://quota-jobs.example",
  CRON_SECRET: "a-cron-secret-for-a-load-test",
};

interface Answer {
  status: number;
  allow: string | null;
  contentType: string | null;
  body: string;
}

/** Loads one function in a fresh Node process and sends it each request; what it answered. */
function invokeFresh(funcDir: string, requests: { method: string; path: string }[]): Answer[] {
  const script = `
    import { loadFunction } from ${JSON.stringify(LOADER)};
    const fn = await loadFunction(${JSON.stringify(OUTPUT_DIR)}, ${JSON.stringify(funcDir)});
    const out = [];
    for (const r of ${JSON.stringify(requests)}) {
      const res = await fn.handler(new Request("https://quota-jobs.example" + r.path, { method: r.method }));
      out.push({ status: res.status, allow: res.headers.get("allow"), contentType: res.headers.get("content-type"), body: await res.text() });
    }
    process.stdout.write(JSON.stringify(out));
    process.exit(0);
  `;
  const run = spawnSync(NODE, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", ...UNREACHABLE_ENV },
    timeout: 30_000,
  });
  if (run.status !== 0) throw new Error(`${funcDir}: exit ${run.status}: ${run.stderr.trim()}`);
  return JSON.parse(run.stdout) as Answer[];
}

/**
 * The packages whose code ran in a fresh process that imported a function's handler (and sent
 * it `request`, if given): V8's precise coverage of the handler and the files beside it that it
 * loaded, each line's count mapped through the bundle's source map to the package it came from.
 * A function the module merely declares does not count; a module's top level that ran does.
 */
function evaluatedIn(
  funcDir: string,
  request?: { method: string; path: string; headers: Record<string, string>; body: string },
): { ran: string[]; status: number | null } {
  const func = join(OUTPUT_DIR, "functions", funcDir);
  const { handler } = JSON.parse(readFileSync(join(func, ".vc-config.json"), "utf8")) as {
    handler: string;
  };
  const script = `
    import { Session } from "node:inspector/promises";
    import { existsSync, readFileSync } from "node:fs";
    import { SourceMap } from "node:module";
    import { fileURLToPath, pathToFileURL } from "node:url";
    const url = pathToFileURL(${JSON.stringify(join(func, handler))}).href;
    const session = new Session();
    session.connect();
    await session.post("Profiler.enable");
    await session.post("Profiler.startPreciseCoverage", { callCount: true, detailed: true });
    const m = await import(url);
    const r = ${JSON.stringify(request ?? null)};
    const status = r
      ? (await m.default.fetch(new Request("https://quota-jobs.example" + r.path, r))).status
      : null;
    const { result } = await session.post("Profiler.takePreciseCoverage");
    const folder = pathToFileURL(${JSON.stringify(func)}).href + "/";
    const ran = new Set();
    for (const s of result) {
      if (!s.url.startsWith(folder) || !existsSync(fileURLToPath(s.url) + ".map")) continue;
      const source = readFileSync(fileURLToPath(s.url), "utf8");
      const map = new SourceMap(JSON.parse(readFileSync(fileURLToPath(s.url) + ".map", "utf8")));
      // V8 reports nested ranges; the innermost one holds a position's count.
      const counts = new Int32Array(source.length);
      const ranges = s.functions.flatMap((f) => f.ranges);
      ranges.sort((a, b) => b.endOffset - b.startOffset - (a.endOffset - a.startOffset));
      for (const r of ranges) counts.fill(r.count, r.startOffset, r.endOffset);
      let offset = 0;
      source.split("\\n").forEach((text, line) => {
        const col = text.search(/\\S/);
        if (col >= 0 && counts[offset + col] > 0) {
          const from = map.findEntry(line, col)?.originalSource ?? "";
          const pkg = /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(from)?.[1];
          if (pkg) ran.add(pkg);
        }
        offset += text.length + 1;
      });
    }
    process.stdout.write(JSON.stringify({ ran: [...ran].sort(), status }));
    process.exit(0);
  `;
  const run = spawnSync(NODE, ["--input-type=module", "-e", script], {
    cwd: func,
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "", ...UNREACHABLE_ENV },
    timeout: 30_000,
  });
  if (run.status !== 0) throw new Error(`${funcDir}: exit ${run.status}: ${run.stderr.trim()}`);
  return JSON.parse(run.stdout) as { ran: string[]; status: number | null };
}

const dirs = functionDirs();
const runtimes = dirs.map(
  (d) =>
    (
      JSON.parse(readFileSync(join(OUTPUT_DIR, "functions", d, ".vc-config.json"), "utf8")) as {
        runtime: string;
      }
    ).runtime,
);

describe("the built functions (.vercel/output)", () => {
  test("one function per api/ route file, each on the Node major the tests run on", () => {
    expect(dirs.sort()).toEqual([
      "api/cron/models.func",
      "api/cron/sweep.func",
      "api/dlq.func",
      "api/health.func",
      "api/jobs/[id].func",
      "api/jobs/index.func",
      "api/me/export.func",
      "api/me/index.func",
      "api/ops/metrics.func",
      "api/organizations/[id].func",
      "api/organizations/index.func",
      "api/public-config.func",
      "api/usage.func",
      "api/worker.func",
    ]);
    const node = spawnSync(NODE, ["--version"], { encoding: "utf8" }).stdout.trim();
    const major = node.slice(1).split(".")[0];
    expect(new Set(runtimes)).toEqual(new Set([`nodejs${major}.x`]));
    const engines = (
      JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
        engines: { node: string };
      }
    ).engines.node;
    expect(engines).toBe(`${major}.x`);
  });

  test.each(dirs)(
    "%s loads in a fresh process and answers a wrong method with 405 and Allow",
    (dir) => {
      const [answer] = invokeFresh(dir, [
        { method: "PUT", path: `/${dir.replace(/\.func$/, "")}` },
      ]);
      expect(answer?.status).toBe(405);
      expect(answer?.allow).toMatch(/^(GET|POST|PATCH|DELETE)(, (GET|POST|PATCH|DELETE))*$/);
      expect(JSON.parse(answer?.body ?? "")).toMatchObject({
        error: { code: "method_not_allowed" },
      });
    },
  );

  test("health, configured but with every service unreachable, answers 503 in JSON (never a crash)", () => {
    const [answer] = invokeFresh("api/health.func", [{ method: "GET", path: "/api/health" }]);
    expect(answer?.status).toBe(503);
    expect(answer?.contentType).toMatch(/^application\/json/);
  });

  test("vercel.json reached the build: the worker's time limit is the one the config assumes, the cron calls a built function", () => {
    const vc = (dir: string) =>
      JSON.parse(readFileSync(join(OUTPUT_DIR, "functions", dir, ".vc-config.json"), "utf8")) as {
        maxDuration?: number;
      };
    const config = loadConfig(UNREACHABLE_ENV);
    expect(vc("api/worker.func").maxDuration).toBe(config.workerMaxDurationSeconds);
    const output = JSON.parse(readFileSync(join(OUTPUT_DIR, "config.json"), "utf8")) as {
      crons: { path: string }[];
    };
    expect(output.crons.map((c) => c.path)).toEqual(["/api/cron/sweep", "/api/cron/models"]);
    for (const cron of output.crons) expect(dirs).toContain(`${cron.path.slice(1)}.func`);
  });

  test("the enqueue function's import evaluates neither the QStash SDK nor the rate limiter and its Redis client: they load on the first request past the auth check", () => {
    const { ran } = evaluatedIn("api/jobs/index.func");
    // What the first lines of a request need ran (so the coverage sees the bundle's packages)...
    expect(ran).toEqual(expect.arrayContaining(["@supabase/postgrest-js", "jose", "zod"]));
    // ...and none of what only a request past the auth check needs.
    expect(ran.filter((p) => p.startsWith("@upstash/"))).toEqual([]);
    // An extraction's schema check (Ajv) runs on the first extraction, never at a cold start.
    expect(ran.filter((p) => p.startsWith("ajv"))).toEqual([]);
  });

  test("the enqueue function checks an extraction's schema with Ajv from its own files (a chunk beside the handler), then answers 503 with every service unreachable", async () => {
    const token = await mintUserToken({
      secret: UNREACHABLE_ENV.SUPABASE_JWT_SECRET,
      userId: randomUUID(),
      issuer: `${UNREACHABLE_ENV.SUPABASE_URL}/auth/v1`,
    });
    const schema = {
      type: "object",
      properties: { name: { type: "string" } },
      required: ["name"],
      additionalProperties: false,
    };
    const { ran, status } = evaluatedIn("api/jobs/index.func", {
      method: "POST",
      path: "/api/jobs",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ kind: "extract", input: { text: "Ada Lovelace", schema } }),
    });
    expect(status).toBe(503);
    expect(ran).toEqual(expect.arrayContaining(["ajv"]));
  });

  test("the enqueue function, past the auth check with every service unreachable, loads the rate limiter from its own files and answers 503 (never a crash)", async () => {
    const token = await mintUserToken({
      secret: UNREACHABLE_ENV.SUPABASE_JWT_SECRET,
      userId: randomUUID(),
      issuer: `${UNREACHABLE_ENV.SUPABASE_URL}/auth/v1`,
    });
    const { ran, status } = evaluatedIn("api/jobs/index.func", {
      method: "POST",
      path: "/api/jobs",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "A prompt for a load test" }),
    });
    // The limiter fails open without Redis; the database's refusal is the 503.
    expect(status).toBe(503);
    expect(ran).toEqual(expect.arrayContaining(["@upstash/ratelimit", "@upstash/redis"]));
  });

  test.each(dirs)(
    "%s carries the OpenAI SDK only if it is the worker or the daily catalogue watch (a cold start without it)",
    (dir) => {
      const func = join(OUTPUT_DIR, "functions", dir);
      const shipped = readdirSync(join(func, "node_modules"));
      expect(shipped).toContain("zod");
      expect(shipped.includes("openai")).toBe(
        dir === "api/worker.func" || dir === "api/cron/models.func",
      );
      expect(readdirSync(join(func, "lib")).includes("model.js")).toBe(dir === "api/worker.func");
    },
  );
});
