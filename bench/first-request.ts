/**
 * Section 6: what a person waits for on a fresh instance. Two parts, one run, one local stack
 * (dev/stack.ts: the database, the QStash and Upstash stand-ins, a real redis-server and the
 * fake model, all up and warmed first):
 *
 * A. The first request per function, on the built `.vercel/output` (`npm run build`: Vercel's
 *    builder, then each handler bundled into one file, dev/bundle-functions.ts), beside the
 *    same functions as the builder alone made them (`traced`: the builder's handler, kept in
 *    `.vercel/traced/`, put back in a copy of the folder). For each function and variant, N
 *    fresh Node processes, each started in the function's folder with the app's environment:
 *    import the handler, send it the first request against the stack, then a second one
 *    (warm). Times are taken by this process from the spawn to each line the child writes
 *    (import done, first response, second response), so they include Node's own start; beside
 *    them, N empty processes (spawn → first line) and N import-only processes, interleaved
 *    with the others so the machine's load falls on all of them alike.
 *
 * B. Generate → first visible token, as the page sees it: POST /api/jobs on the stack's app,
 *    QStash's delivery to the worker, the worker's claim and first text in the database, and
 *    the page's next look (public/poll.js: the old fixed schedule and the adaptive one, both
 *    polling the same job). The fake model's pause before each token is 0 (its only
 *    time-to-first-token knob, `setChunkMs`), so what remains is ours and the poll's. Each
 *    Generate meets an idle Flow Control key, as a user whose job is alone in its window does:
 *    the rounds are a rate period (`QSTASH_FLOW_PERIOD_SECONDS`, 3 s) apart, since back to back
 *    each waited for the next period (1.8 s of a 2.1 s median on 2026-12-07), which is the
 *    queue under its rate, not the latency of a Generate.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { cp, mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";
import { ensureBuild, OUTPUT_DIR, TRACED_DIR } from "../dev/build.ts";
import { functionFolders } from "../dev/bundle-functions.ts";
import { ANY_FREE_PORTS } from "../dev/ports.ts";
import { signDelivery } from "../dev/qstash/signing.ts";
import type { Stack } from "../dev/stack.ts";
import { VARIABLES } from "../lib/config.ts";
import { createPoller, paceOf } from "../public/poll.js";
import { log, median, quantile, round, sleep, table, writeResult } from "./support/util.ts";

/** The target: the enqueue function's first request on a fresh instance, against this floor. */
const TARGET_FUNCTION = "api/jobs/index";
const TARGET_RATIO = 2.5;
const IMPORT_TARGET_MS = 100;

interface Req {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: string;
}

/** Two requests (first, second) for one process of one function, against the stack. */
type RequestsFor = (stack: Stack) => Promise<[Req, Req]>;

const CHILD = `
const [url, reqsJson, mode] = process.argv.slice(1);
const cpu = () => { const u = process.cpuUsage(); return ((u.user + u.system) / 1000).toFixed(1); };
const line = (s) => process.stdout.write(s + " cpu=" + cpu() + "\\n");
if (mode === "empty") { line("ready"); process.exit(0); }
const m = await import(url);
if (typeof m.default?.fetch !== "function") throw new Error("no default fetch");
line("imported");
if (mode === "import") process.exit(0);
for (const r of JSON.parse(reqsJson)) {
  const res = await m.default.fetch(new Request(r.url, { method: r.method, headers: r.headers, body: r.body }));
  const text = await res.text();
  line("answered " + res.status + " " + JSON.stringify(text.slice(0, 200)));
}
process.exit(0);
`;

interface ChildTimes {
  /** Each line: when it came (ms after the spawn), its text, and the child's CPU ms so far. */
  lines: { at: number; text: string; cpu: number }[];
  exitMs: number;
}

/** Spawns one fresh process in `cwd`; the time from the spawn to each line it writes. */
function runChild(
  cwd: string,
  args: string[],
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<ChildTimes> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child: ChildProcess = spawn(
      process.execPath,
      ["--input-type=module", "-e", CHILD, ...args],
      { cwd, env: { PATH: process.env.PATH ?? "", ...env }, stdio: ["ignore", "pipe", "pipe"] },
    );
    const lines: ChildTimes["lines"] = [];
    let stderr = "";
    child.stderr?.on("data", (d) => {
      stderr += String(d);
    });
    if (!child.stdout) throw new Error("no stdout");
    createInterface({ input: child.stdout }).on("line", (text) => {
      const cpu = Number(/ cpu=([\d.]+)$/.exec(text)?.[1] ?? Number.NaN);
      lines.push({ at: performance.now() - started, text, cpu });
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("exit", (code) => {
      clearTimeout(timer);
      const exitMs = performance.now() - started;
      if (code !== 0) reject(new Error(`child in ${cwd} exited ${code}: ${stderr.slice(-800)}`));
      else resolve({ lines, exitMs });
    });
  });
}

async function signedDelivery(stack: Stack, route: "/api/worker" | "/api/dlq", body: string) {
  const url = `${stack.env.APP_URL}${route}`;
  const signature = await signDelivery(
    stack.env.QSTASH_CURRENT_SIGNING_KEY ?? "",
    url,
    new TextEncoder().encode(body),
  );
  return {
    method: "POST",
    url,
    headers: { "upstash-signature": signature, "content-type": "application/json" },
    body,
  };
}

/** A queued job no QStash message carries (made in SQL), for a delivery this bench signs. */
async function queuedJob(stack: Stack): Promise<{ jobId: string; seq: number }> {
  const { userId } = await stack.signIn({ plan: "pro" });
  const { rows } = await stack.sql.query(
    "select public.enqueue_job($1::uuid, $2, null, now(), $3) as r",
    [userId, "A first-request bench prompt", 40],
  );
  const r = rows[0].r as { outcome: string; job: { id: string; publish_seq: number } };
  if (r.outcome !== "enqueued") throw new Error(`enqueue_job: ${r.outcome}`);
  return { jobId: r.job.id, seq: r.job.publish_seq };
}

async function userGet(stack: Stack, path: string): Promise<Req> {
  const { accessToken } = await stack.signIn({ plan: "pro" });
  return {
    method: "GET",
    url: `${stack.env.APP_URL}${path}`,
    headers: { authorization: `Bearer ${accessToken}` },
  };
}

async function jobOf(stack: Stack): Promise<Req> {
  const { accessToken } = await stack.signIn({ plan: "pro" });
  const res = await fetch(`${stack.urls.app}/api/jobs`, {
    method: "POST",
    headers: { authorization: `Bearer ${accessToken}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "A job to read" }),
  });
  const { job } = (await res.json()) as { job: { id: string } };
  return {
    method: "GET",
    url: `${stack.env.APP_URL}/api/jobs/${job.id}`,
    headers: { authorization: `Bearer ${accessToken}` },
  };
}

async function enqueueReq(stack: Stack): Promise<Req> {
  const { accessToken } = await stack.signIn({ plan: "pro" });
  return {
    method: "POST",
    url: `${stack.env.APP_URL}/api/jobs`,
    headers: { authorization: `Bearer ${accessToken}`, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Write a haiku about cold starts" }),
  };
}

const REQUESTS: Record<string, RequestsFor> = {
  "api/jobs/index": async (s) => [await enqueueReq(s), await enqueueReq(s)],
  "api/jobs/[id]": async (s) => [await jobOf(s), await jobOf(s)],
  "api/usage": async (s) => [await userGet(s, "/api/usage"), await userGet(s, "/api/usage")],
  "api/health": async (s) => {
    const r = { method: "GET", url: `${s.env.APP_URL}/api/health`, headers: {} };
    return [r, r];
  },
  "api/public-config": async (s) => {
    const r = { method: "GET", url: `${s.env.APP_URL}/api/public-config`, headers: {} };
    return [r, r];
  },
  "api/cron/sweep": async (s) => {
    const r = {
      method: "GET",
      url: `${s.env.APP_URL}/api/cron/sweep`,
      headers: { authorization: `Bearer ${s.env.CRON_SECRET}` },
    };
    return [r, r];
  },
  "api/worker": async (s) => {
    const a = await queuedJob(s);
    const b = await queuedJob(s);
    return [
      await signedDelivery(s, "/api/worker", JSON.stringify(a)),
      await signedDelivery(s, "/api/worker", JSON.stringify(b)),
    ];
  },
  "api/dlq": async (s) => {
    const callback = async () => {
      const j = await queuedJob(s);
      return JSON.stringify({
        sourceBody: Buffer.from(JSON.stringify(j)).toString("base64"),
        status: 500,
        retried: 1,
        maxRetries: 1,
        dlqId: `dlq-${j.jobId}`,
        sourceMessageId: `msg-${j.jobId}`,
      });
    };
    return [
      await signedDelivery(s, "/api/dlq", await callback()),
      await signedDelivery(s, "/api/dlq", await callback()),
    ];
  },
};

interface Variant {
  name: "bundled" | "before" | "traced";
  functionsDir: string;
}

/**
 * `QUOTA_JOBS_BENCH_BEFORE=<dir>`: a `.vercel/output` built from an earlier commit, timed in the
 * same rounds as this build's (variant `before`), so a change's before and after share the load.
 */
function beforeVariant(): Variant | null {
  const dir = process.env.QUOTA_JOBS_BENCH_BEFORE;
  return dir ? { name: "before", functionsDir: join(dir, "functions") } : null;
}

/** The builder's own output beside the bundled one: a copy with the kept handlers put back. */
async function tracedCopy(tmp: string): Promise<Variant | null> {
  const kept = join(TRACED_DIR, "functions");
  if (!(await stat(kept).catch(() => null))) return null;
  const dir = join(tmp, "functions");
  await cp(join(OUTPUT_DIR, "functions"), dir, { recursive: true });
  for (const func of functionFolders(kept)) {
    const name = relative(kept, func);
    await cp(func, join(dir, name), { recursive: true, force: true });
  }
  return { name: "traced", functionsDir: dir };
}

const stats = (xs: number[]) => ({
  median: round(median(xs), 1),
  p10: round(quantile(xs, 0.1), 1),
  p90: round(quantile(xs, 0.9), 1),
  runs: xs.map((x) => round(x, 1)),
});

const lineAt = (t: ChildTimes, prefix: string, nth = 0) =>
  t.lines.filter((l) => l.text.startsWith(prefix))[nth]?.at ?? Number.NaN;
const cpuAt = (t: ChildTimes, prefix: string, nth = 0) =>
  t.lines.filter((l) => l.text.startsWith(prefix))[nth]?.cpu ?? Number.NaN;

async function firstRequests(stack: Stack, runs: number, variants: Variant[]) {
  const funcs = functionFolders(join(OUTPUT_DIR, "functions"))
    .map((d) => relative(join(OUTPUT_DIR, "functions"), d).replace(/\.func$/, ""))
    .filter((name) => REQUESTS[name]);
  const empty: number[] = [];
  const emptyCpu: number[] = [];
  const rows = new Map<
    string,
    {
      import: number[];
      importInFull: number[];
      first: number[];
      second: number[];
      importCpu: number[];
      firstCpu: number[];
      secondCpu: number[];
    }
  >();
  const statuses = new Map<string, Set<string>>();
  const handlers = new Map<string, string>();
  for (const fn of funcs) {
    const vc = JSON.parse(
      await readFile(join(OUTPUT_DIR, "functions", `${fn}.func`, ".vc-config.json"), "utf8"),
    ) as { handler: string };
    handlers.set(fn, vc.handler);
  }
  const env = { ...stack.env };
  for (let i = 0; i < runs; i++) {
    const e = await runChild(tmpdir(), ["", "[]", "empty"], env);
    empty.push(lineAt(e, "ready"));
    emptyCpu.push(cpuAt(e, "ready"));
    for (const fn of funcs) {
      for (const v of variants) {
        const key = `${fn}|${v.name}`;
        const row = rows.get(key) ?? {
          import: [],
          importInFull: [],
          first: [],
          second: [],
          importCpu: [],
          firstCpu: [],
          secondCpu: [],
        };
        rows.set(key, row);
        const cwd = join(v.functionsDir, `${fn}.func`);
        const url = pathToFileURL(join(cwd, handlers.get(fn) ?? "")).href;
        const imp = await runChild(cwd, [url, "[]", "import"], env);
        row.import.push(lineAt(imp, "imported"));
        const reqs = await (REQUESTS[fn] as RequestsFor)(stack);
        const full = await runChild(cwd, [url, JSON.stringify(reqs), "full"], env);
        row.importInFull.push(lineAt(full, "imported"));
        const a = lineAt(full, "answered", 0);
        const b = lineAt(full, "answered", 1);
        row.first.push(a);
        row.second.push(b - a);
        row.importCpu.push(cpuAt(imp, "imported"));
        row.firstCpu.push(cpuAt(full, "answered", 0));
        row.secondCpu.push(cpuAt(full, "answered", 1) - cpuAt(full, "answered", 0));
        const seen = statuses.get(key) ?? new Set<string>();
        for (const l of full.lines.filter((x) => x.text.startsWith("answered")))
          seen.add(l.text.split(" ")[1] ?? "?");
        statuses.set(key, seen);
      }
    }
    // Whatever the enqueues published runs on the stack's own worker; let it drain.
    await stack.qstash.waitIdle(30_000).catch(() => undefined);
    log(`  first: round ${i + 1}/${runs} done`);
  }
  const emptyMs = median(empty);
  const out = [...rows.entries()].map(([key, r]) => {
    const [fn, variant] = key.split("|") as [string, string];
    const warm = median(r.second);
    const first = median(r.first);
    return {
      function: fn,
      variant,
      statuses: [...(statuses.get(key) ?? [])],
      importOnlyMs: stats(r.import),
      importMs: stats(r.importInFull),
      firstResponseMs: stats(r.first),
      secondRequestMs: stats(r.second),
      /** CPU ms of the child (Node's start included): less moved by the machine's load. */
      cpu: {
        import: stats(r.importCpu),
        firstResponse: stats(r.firstCpu),
        secondRequest: stats(r.secondCpu),
      },
      /** The first response after the spawn, against an empty process's start + a warm request. */
      ratio: round(first / (emptyMs + warm), 2),
    };
  });
  return { emptyProcessMs: stats(empty), emptyProcessCpuMs: stats(emptyCpu), rows: out };
}

interface JobView {
  phase: string;
  status: string;
  partialOutput: string | null;
  output: string | null;
}

/** Watches the job row in the database (every 5 ms): when it was claimed and got its first text. */
async function watchRow(stack: Stack, id: string, t0: number, until: () => boolean) {
  let claimed = Number.NaN;
  let text = Number.NaN;
  while (!until() && Number.isNaN(text)) {
    const { rows } = await stack.sql.query(
      `select status, output is not null or exists (select from public.job_output_chunks c
         where c.job_id = j.id and c.attempt = j.attempts) as has_text
       from public.generation_jobs j where id = $1`,
      [id],
    );
    const r = rows[0] as { status: string; has_text: boolean } | undefined;
    const now = performance.now() - t0;
    if (r && r.status !== "queued" && Number.isNaN(claimed)) claimed = now;
    if (r?.has_text) text = now;
    await sleep(5);
  }
  return { claimed, text };
}

/** One Generate: the parts of the wait until the page shows the first text, per schedule. */
async function oneGenerate(stack: Stack, accessToken: string) {
  const headers = { authorization: `Bearer ${accessToken}` };
  const t0 = performance.now();
  const res = await fetch(`${stack.urls.app}/api/jobs`, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: JSON.stringify({ prompt: "Write a short poem about queues" }),
  });
  const { job } = (await res.json()) as { job: JobView & { id: string } };
  const accepted = performance.now() - t0;
  if (res.status !== 202) throw new Error(`enqueue answered ${res.status}`);
  let settled = 0;
  const seenAt: Record<"adaptive" | "fixed", number> = { adaptive: Number.NaN, fixed: Number.NaN };
  const lookMs: number[] = [];
  const looks: Record<"adaptive" | "fixed", number> = { adaptive: 0, fixed: 0 };
  const poll = (schedule: "adaptive" | "fixed") =>
    new Promise<void>((resolve) => {
      let last: JobView = job;
      const poller = createPoller({
        pace: () => (schedule === "adaptive" ? paceOf(last) : "slow"),
        tick: async () => {
          const t = performance.now();
          const r = await fetch(`${stack.urls.app}/api/jobs/${job.id}`, { headers });
          const body = (await r.json()) as { job: JobView };
          looks[schedule]++;
          lookMs.push(performance.now() - t);
          const changed =
            body.job.phase !== last.phase || body.job.partialOutput !== last.partialOutput;
          last = body.job;
          if (body.job.partialOutput || body.job.output) {
            seenAt[schedule] = performance.now() - t0;
            resolve();
            return "stop";
          }
          if (body.job.status === "failed" || body.job.status === "canceled") {
            resolve();
            return "stop";
          }
          return changed ? "changed" : "same";
        },
      });
      poller.start();
    });
  const both = Promise.all([poll("adaptive"), poll("fixed")]).then(() => {
    settled = 1;
  });
  const row = await watchRow(stack, job.id, t0, () => settled === 1);
  await both;
  return { accepted, ...row, seenAt, looks, lookMs: median(lookMs) };
}

/** Flow Control's rate period as the stack's app has it (the default, unless set for the run). */
const FLOW_PERIOD_MS =
  VARIABLES.QSTASH_FLOW_PERIOD_SECONDS.schema.parse(
    process.env.QSTASH_FLOW_PERIOD_SECONDS || undefined,
  ) * 1000;

async function generateToFirstToken(stack: Stack, runs: number) {
  stack.model.setChunkMs(0);
  const samples: Awaited<ReturnType<typeof oneGenerate>>[] = [];
  for (let i = 0; i < runs; i++) {
    const { accessToken } = await stack.signIn({ plan: "pro" });
    samples.push(await oneGenerate(stack, accessToken));
    await stack.qstash.waitIdle(30_000).catch(() => undefined);
    // The next Generate on an idle key: a rate period after this one's delivery.
    await sleep(FLOW_PERIOD_MS);
  }
  const pick = (f: (s: (typeof samples)[number]) => number) => stats(samples.map(f));
  return {
    runs,
    chunkMs: 0,
    enqueueResponseMs: pick((s) => s.accepted),
    deliveryAndClaimMs: pick((s) => s.claimed - s.accepted),
    claimToFirstTextMs: pick((s) => s.text - s.claimed),
    generateToTextInDbMs: pick((s) => s.text),
    statusReadMs: pick((s) => s.lookMs),
    adaptive: {
      visibleMs: pick((s) => s.seenAt.adaptive),
      pollWaitMs: pick((s) => s.seenAt.adaptive - s.text),
      looks: pick((s) => s.looks.adaptive),
    },
    fixed: {
      visibleMs: pick((s) => s.seenAt.fixed),
      pollWaitMs: pick((s) => s.seenAt.fixed - s.text),
      looks: pick((s) => s.looks.fixed),
    },
  };
}

export async function runFirstRequest(opts: { quick: boolean }) {
  const runs = opts.quick ? 5 : 10;
  const build = ensureBuild((l) => log(`  first: ${l}`));
  const { startStack } = await import("../dev/stack.ts");
  const { setLogSink } = await import("../lib/log.ts");
  setLogSink(() => {});
  const tmp = await mkdtemp(join(tmpdir(), "quota-jobs-bench-first-"));
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-bench-first-data-"));
  const stack = await startStack({
    ports: ANY_FREE_PORTS,
    dataDir,
    reset: true,
    timeScale: 0.01,
    env: { RATE_LIMIT_REQUESTS: "1000000" },
  });
  try {
    const variants: Variant[] = [{ name: "bundled", functionsDir: join(OUTPUT_DIR, "functions") }];
    const before = beforeVariant();
    if (before) variants.push(before);
    const traced = await tracedCopy(tmp);
    if (traced) variants.push(traced);
    else variants[0] = { name: "traced", functionsDir: join(OUTPUT_DIR, "functions") };
    // Warm the stack: the database, Redis, QStash and the app's own functions.
    for (let i = 0; i < 3; i++) {
      const r = await enqueueReq(stack);
      await fetch(r.url.replace(stack.env.APP_URL ?? "", stack.urls.app), r);
    }
    await stack.qstash.waitIdle(30_000).catch(() => undefined);
    const first = await firstRequests(stack, runs, variants);
    const generate = await generateToFirstToken(stack, runs);
    const target = first.rows.find(
      (r) => r.function === TARGET_FUNCTION && r.variant === variants[0]?.name,
    );
    const result = {
      runs,
      node: process.version,
      build,
      variants: variants.map((v) => v.name),
      target: {
        function: TARGET_FUNCTION,
        ratio: TARGET_RATIO,
        importMs: IMPORT_TARGET_MS,
        /** The import, less an empty process's start: wall and CPU. */
        importBeyondStartMs: target
          ? round(target.importOnlyMs.median - first.emptyProcessMs.median, 1)
          : null,
        importCpuBeyondStartMs: target
          ? round(target.cpu.import.median - first.emptyProcessCpuMs.median, 1)
          : null,
        met: target
          ? target.ratio <= TARGET_RATIO &&
            target.importOnlyMs.median - first.emptyProcessMs.median < IMPORT_TARGET_MS
          : false,
      },
      ...first,
      generate,
    };
    await writeResult("first-request", result);
    return result;
  } finally {
    await stack.stop();
    await rm(tmp, { recursive: true, force: true });
    await rm(dataDir, { recursive: true, force: true });
  }
}

export function printFirstRequest(r: Awaited<ReturnType<typeof runFirstRequest>>): string {
  const empty = r.emptyProcessMs.median;
  const a = table(
    [
      "function",
      "variant",
      "import only (spawn →)",
      "import (in the run)",
      "first response (spawn →)",
      "second request",
      "ratio",
      "CPU ms: import / first / second",
      "status",
    ],
    r.rows.map((x) => [
      x.function,
      x.variant,
      `${x.importOnlyMs.median} (${x.importOnlyMs.p10}–${x.importOnlyMs.p90})`,
      `${x.importMs.median}`,
      `${x.firstResponseMs.median} (${x.firstResponseMs.p10}–${x.firstResponseMs.p90})`,
      `${x.secondRequestMs.median} (${x.secondRequestMs.p10}–${x.secondRequestMs.p90})`,
      x.ratio,
      `${x.cpu.import.median} / ${x.cpu.firstResponse.median} / ${x.cpu.secondRequest.median}`,
      x.statuses.join("/"),
    ]),
  );
  const g = r.generate;
  const b = table(
    ["Generate → first visible token (ms)", "median", "p10–p90"],
    [
      ["POST /api/jobs answered (ours: the enqueue)", g.enqueueResponseMs],
      ["→ claimed (QStash delivery + the worker's claim)", g.deliveryAndClaimMs],
      ["→ first text in the database (model call + first write)", g.claimToFirstTextMs],
      ["Generate → first text in the database", g.generateToTextInDbMs],
      ["+ poll wait, adaptive schedule (the page's)", g.adaptive.pollWaitMs],
      ["= visible, adaptive schedule", g.adaptive.visibleMs],
      ["+ poll wait, old fixed schedule (1.5 s first)", g.fixed.pollWaitMs],
      ["= visible, old fixed schedule", g.fixed.visibleMs],
      ["one status read (GET /api/jobs/:id)", g.statusReadMs],
      ["looks until visible, adaptive / fixed", g.adaptive.looks],
    ].map(([k, v]) => {
      const s = v as ReturnType<typeof stats>;
      return [k as string, s.median, `${s.p10}–${s.p90}`];
    }),
  );
  return `${a}\n\nempty Node process (spawn → first line): ${empty} ms (${r.emptyProcessMs.p10}–${r.emptyProcessMs.p90}), CPU ${r.emptyProcessCpuMs.median} ms; ratio = first response / (empty process + second request); target for ${r.target.function}: ratio ≤ ${r.target.ratio} and import (less Node's start) < ${r.target.importMs} ms: ${r.target.met ? "met" : "NOT met"} (ratio ${r.rows.find((x) => x.function === r.target.function)?.ratio}, import less Node's start ${r.target.importBeyondStartMs} ms wall, ${r.target.importCpuBeyondStartMs} ms CPU); ${r.runs} processes each, interleaved; Node ${r.node}; build ${r.build}\n\n${b}\n\nfake model chunk pause ${g.chunkMs} ms; fixed-schedule looks: ${g.fixed.looks.median}`;
}
