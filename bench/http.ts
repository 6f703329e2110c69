/**
 * Section 3: HTTP. Enqueue and status through the bench stack's app server (api/ handlers on
 * node:http in the stack process, every dependency a local stand-in) under a small in-process
 * load generator: N concurrent loops of fetch on loopback, bounded by a request count and a
 * time limit. Then the handler's own cost: each handler called in THIS process (the stand-ins
 * run in the other one), `process.cpuUsage()` around each call = CPU the handler spent, the
 * rest of its wall time = waiting on IO (database, Redis, QStash, model).
 */

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { type BenchApp, createBenchApp } from "./support/app.ts";
import { createUsers } from "./support/pg.ts";
import { startBenchStack } from "./support/stack.ts";
import { log, median, pool, quantile, round, table, writeResult } from "./support/util.ts";

interface Load {
  route: string;
  concurrency: number;
  requests: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
}

async function load(
  route: string,
  concurrency: number,
  maxRequests: number,
  maxMs: number,
  make: (i: number) => [string, RequestInit],
  onBody?: (body: unknown, i: number) => void,
): Promise<Load> {
  const lat: number[] = [];
  let non2xx = 0;
  const deadline = performance.now() + maxMs;
  let sent = 0;
  const ms = await pool(concurrency, maxRequests, async (i) => {
    if (performance.now() > deadline) return;
    sent++;
    const [url, init] = make(i);
    const t = performance.now();
    const res = await fetch(url, init);
    const body = await res.json().catch(() => null);
    lat.push(performance.now() - t);
    if (res.status >= 300) non2xx++;
    else onBody?.(body, i);
  });
  return {
    route,
    concurrency,
    requests: sent,
    seconds: round(ms / 1000, 2),
    rps: round((sent * 1000) / ms, 0),
    p50Ms: round(quantile(lat, 0.5), 2),
    p99Ms: round(quantile(lat, 0.99), 2),
    non2xx,
  };
}

interface Cost {
  handler: string;
  calls: number;
  cpuMs: number;
  wallMs: number;
  ioWaitMs: number;
  cpuShare: number;
}

async function cost(
  name: string,
  calls: number,
  call: (i: number) => Promise<Response>,
): Promise<Cost> {
  const cpu: number[] = [];
  const wall: number[] = [];
  const io: number[] = [];
  for (let i = 0; i < calls + 20; i++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const res = await call(i);
    await res.arrayBuffer();
    const w = performance.now() - t0;
    const c = process.cpuUsage(c0);
    if (res.status >= 300) throw new Error(`${name} answered ${res.status}`);
    if (i < 20) continue; // warm-up: JIT, connection pools, the JWKS/keys caches
    const cms = (c.user + c.system) / 1000;
    cpu.push(cms);
    wall.push(w);
    io.push(Math.max(0, w - cms));
  }
  return {
    handler: name,
    calls,
    cpuMs: round(median(cpu), 3),
    wallMs: round(median(wall), 3),
    ioWaitMs: round(median(io), 3),
    cpuShare: round(median(cpu) / median(wall), 2),
  };
}

export async function runHttp(opts: { quick: boolean }) {
  const maxRequests = opts.quick ? 400 : 2000;
  const maxMs = opts.quick ? 5_000 : 20_000;
  const repeats = opts.quick ? 1 : 3;
  const levels = opts.quick ? [16] : [1, 16, 64];
  const stack = await startBenchStack({ rateLimit: 1_000_000 });
  const admin = new pg.Client({ connectionString: stack.databaseUrl });
  await admin.connect();
  try {
    const app: BenchApp = await createBenchApp(stack);
    const users = await createUsers(admin, 200, "bench");
    const tokens = await Promise.all(users.map((u) => app.token(u)));
    const jobs: { id: string; token: string }[] = [];
    const runs: Load[] = [];
    for (const c of levels) {
      for (let r = 0; r < repeats; r++) {
        const enq = await load(
          "POST /api/jobs",
          c,
          maxRequests,
          maxMs,
          (i) => [
            `${stack.appUrl}/api/jobs`,
            {
              method: "POST",
              headers: {
                authorization: `Bearer ${tokens[i % tokens.length]}`,
                "content-type": "application/json",
              },
              body: JSON.stringify({ prompt: `Load test prompt ${i}` }),
            },
          ],
          (b) => {
            const id = (b as { job?: { id: string } }).job?.id;
            if (id && jobs.length < 50_000) jobs.push({ id, token: "" });
          },
        );
        runs.push(enq);
        log(
          `  http enqueue c=${c}: ${enq.rps} req/s p50 ${enq.p50Ms} p99 ${enq.p99Ms} non2xx ${enq.non2xx}`,
        );
      }
    }
    // Status needs each job's owner token: read the owners back.
    const { rows } = await admin.query<{ id: string; user_id: string }>(
      "select id, user_id from public.generation_jobs where id = any($1::uuid[])",
      [jobs.map((j) => j.id)],
    );
    const tokenOf = new Map(users.map((u, i) => [u, tokens[i] as string]));
    const owned = rows.map((r) => ({ id: r.id, token: tokenOf.get(r.user_id) as string }));
    for (const c of levels) {
      for (let r = 0; r < repeats; r++) {
        const st = await load("GET /api/jobs/:id", c, maxRequests, maxMs, (i) => {
          const j = owned[i % owned.length] as { id: string; token: string };
          return [
            `${stack.appUrl}/api/jobs/${j.id}`,
            { headers: { authorization: `Bearer ${j.token}` } },
          ];
        });
        runs.push(st);
        log(
          `  http status c=${c}: ${st.rps} req/s p50 ${st.p50Ms} p99 ${st.p99Ms} non2xx ${st.non2xx}`,
        );
      }
    }
    const summary = [];
    for (const route of ["POST /api/jobs", "GET /api/jobs/:id"]) {
      for (const c of levels) {
        const rs = runs.filter((x) => x.route === route && x.concurrency === c);
        summary.push({
          route,
          concurrency: c,
          rps: round(median(rs.map((x) => x.rps)), 0),
          p50Ms: round(median(rs.map((x) => x.p50Ms)), 2),
          p99Ms: round(median(rs.map((x) => x.p99Ms)), 2),
          requests: rs.reduce((s, x) => s + x.requests, 0),
          non2xx: rs.reduce((s, x) => s + x.non2xx, 0),
        });
      }
    }

    // The handler's own cost, in this process.
    const calls = opts.quick ? 100 : 300;
    const h = app.handlers;
    const mine: string[] = [];
    const costs = [
      await cost("POST /api/jobs (enqueue)", calls, async (i) => {
        const res = await h.jobs(
          app.request("/api/jobs", {
            method: "POST",
            token: tokens[i % tokens.length] as string,
            body: JSON.stringify({ prompt: `cpu prompt ${i}` }),
          }),
        );
        const copy = res.clone();
        mine.push(((await copy.json()) as { job: { id: string } }).job.id);
        return res;
      }),
    ];
    const { rows: ownerRows } = await admin.query<{ id: string; user_id: string }>(
      "select id, user_id from public.generation_jobs where id = any($1::uuid[])",
      [mine],
    );
    const ownerById = new Map(ownerRows.map((r) => [r.id, r.user_id]));
    const owners = mine.map((id) => ownerById.get(id) as string);
    costs.push(
      await cost("GET /api/jobs/:id (status)", calls, (i) =>
        h.job(
          app.request(`/api/jobs/${mine[i % mine.length]}`, {
            token: tokenOf.get(owners[i % owners.length] as string) as string,
          }),
        ),
      ),
      await cost(
        "POST /api/worker (success, fake model)",
        Math.min(calls, mine.length - 20),
        async (i) => h.worker(await app.signed("/api/worker", { jobId: mine[i] })),
      ),
    );
    for (const c of costs) log(`  http cost ${c.handler}: cpu ${c.cpuMs} ms of ${c.wallMs} ms`);
    await admin.end().catch(() => {});
    await stack.stop();
    const full = await throughDevStack(opts.quick ? 200 : 1000, maxMs, 16);
    const result = { maxRequests, maxMs, repeats, summary, runs, costs, devStack: full };
    await writeResult("http", result);
    return result;
  } finally {
    await admin.end().catch(() => {});
    await stack.stop();
  }
}

interface DevStack {
  urls: { app: string };
  signIn(o: { plan: "free" | "pro" }): Promise<{ userId: string; accessToken: string }>;
  stop(): Promise<void>;
}

/**
 * The same load through dev/stack.ts, the stack `npm run dev` starts: here QStash really
 * delivers every job to the real worker, which calls the fake model, all in this process.
 */
async function throughDevStack(maxRequests: number, maxMs: number, concurrency: number) {
  const path = "../dev/stack.ts";
  let mod: { startStack(o: unknown): Promise<DevStack> };
  try {
    mod = (await import(path)) as typeof mod;
  } catch (error) {
    return { skipped: `dev/stack.ts could not be loaded: ${(error as Error).message}` };
  }
  const { setLogSink } = await import("../lib/log.ts");
  setLogSink(() => {});
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-bench-devstack-"));
  const { ANY_FREE_PORTS } = await import("../dev/ports.ts");
  const stack = await mod.startStack({
    ports: ANY_FREE_PORTS,
    dataDir,
    reset: true,
    timeScale: 0.001,
    env: { RATE_LIMIT_REQUESTS: "1000000" },
  });
  try {
    const sessions: { userId: string; accessToken: string }[] = [];
    for (let i = 0; i < 300; i++) sessions.push(await stack.signIn({ plan: "pro" }));
    const created: { id: string; token: string }[] = [];
    const tokenFor = (i: number) =>
      (sessions[i % sessions.length] as { accessToken: string }).accessToken;
    const enq = await load(
      "POST /api/jobs (dev/stack.ts, worker live)",
      concurrency,
      maxRequests,
      maxMs,
      (i) => [
        `${stack.urls.app}/api/jobs`,
        {
          method: "POST",
          headers: { authorization: `Bearer ${tokenFor(i)}`, "content-type": "application/json" },
          body: JSON.stringify({ prompt: `dev stack prompt ${i}` }),
        },
      ],
    );
    const st = await load(
      "GET /api/jobs (dev/stack.ts)",
      concurrency,
      maxRequests,
      maxMs,
      (i) => [
        `${stack.urls.app}/api/jobs`,
        { headers: { authorization: `Bearer ${tokenFor(i)}` } },
      ],
      (b, i) => {
        const id = (b as { jobs?: { id: string }[] }).jobs?.[0]?.id;
        if (id) created.push({ id, token: tokenFor(i) });
      },
    );
    const status = await load(
      "GET /api/jobs/:id (dev/stack.ts)",
      concurrency,
      maxRequests,
      maxMs,
      (i) => [
        `${stack.urls.app}/api/jobs/${(created[i % created.length] as { id: string }).id}`,
        {
          headers: {
            authorization: `Bearer ${(created[i % created.length] as { token: string }).token}`,
          },
        },
      ],
    );
    log(
      `  http dev/stack.ts: enqueue ${enq.rps} req/s (non2xx ${enq.non2xx}), list ${st.rps}, status ${status.rps}`,
    );
    return { enqueue: enq, list: st, status };
  } finally {
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

export function printHttp(r: Awaited<ReturnType<typeof runHttp>>): string {
  const a = table(
    ["route", "concurrency", "req/s", "p50 ms", "p99 ms", "requests", "non-2xx"],
    r.summary.map((s) => [s.route, s.concurrency, s.rps, s.p50Ms, s.p99Ms, s.requests, s.non2xx]),
  );
  const b = table(
    [
      "handler (in-process)",
      "calls",
      "CPU ms (median)",
      "wall ms",
      "waiting on IO ms",
      "CPU share",
    ],
    r.costs.map((c) => [c.handler, c.calls, c.cpuMs, c.wallMs, c.ioWaitMs, c.cpuShare]),
  );
  const d = r.devStack;
  const c =
    "skipped" in d
      ? `dev/stack.ts: ${d.skipped}`
      : table(
          [
            "through dev/stack.ts (worker live)",
            "concurrency",
            "req/s",
            "p50 ms",
            "p99 ms",
            "requests",
            "non-2xx",
          ],
          [d.enqueue, d.list, d.status].map((s) => [
            s.route,
            s.concurrency,
            s.rps,
            s.p50Ms,
            s.p99Ms,
            s.requests,
            s.non2xx,
          ]),
        );
  return `${a}\n\n${b}\n\n${c}`;
}
