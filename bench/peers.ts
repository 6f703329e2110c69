/**
 * Section: peers. A job's whole life in SQL, ours beside the Postgres job queues a user would
 * pick instead, on the same embedded PostgreSQL, in the same run, interleaved repeat by repeat
 * so that noise from the shared machine lands on all three alike:
 *
 * - ours: `enqueue_job` → `start_job` → `complete_job` (quota, limits, idempotency, event log),
 *   each a `select public.fn(...)` as the service role, C loops on C connections over 1,000 users,
 *   as prepared statements (PostgREST prepares its statements by default, and so does
 *   graphile-worker; pg-boss does not);
 *   the failure path is `enqueue_job` → `start_job` → `fail_job` (the worker's give-up: failed +
 *   refund).
 * - pg-boss: `send` → `fetch` → `complete` on a standard queue, C loops on one `PgBoss` whose pool
 *   has C connections; the failure path is `send` → `fetch` → `fail` on a queue with
 *   `retryLimit: 0` (retries exhausted at once: the job ends `failed`).
 * - graphile-worker: `addJob` from C producers (WorkerUtils on a pool of C) while a runner of
 *   concurrency C, pool `max(10, C + 2)` as its docs recommend, works them off with a no-op task;
 *   the clock stops when the last job's result is written. The failure path is a task that
 *   throws, with `maxAttempts: 1` (retries exhausted at once: permanently failed).
 *
 * - ours, split: the same three calls in graphile-worker's shape, C loops enqueueing while C
 *   other loops start and end (not a target row; it shows what the shape is worth).
 *
 * Counted, not guessed: each run's write transactions (the server's next transaction id, before
 * and after) per job, and the connections each system keeps working at C (graphile-worker's
 * producers and runner are two sets of C).
 *
 * Tuned, and only this: the peers' pool sizes (pg-boss defaults to 10 connections, so C = 32
 * would be pool-bound; graphile-worker's producers get C). Everything else is each library's
 * default: pg-boss's supervisor and scheduler on, graphile-worker with LISTEN/NOTIFY, prepared
 * statements, no local queue and no completion batching (both opt-in, both widen the window in
 * which a crash re-runs a finished job).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Logger, makeWorkerUtils, run as runGraphile } from "graphile-worker";
import pg from "pg";
import { PgBoss } from "pg-boss";
import { type BenchDb, createUsers, driftRows, startBenchDb } from "./support/pg.ts";
import { log, median, pool, root, round, table, writeResult } from "./support/util.ts";

type Path = "success" | "failure";
type System = "ours" | "pg-boss" | "graphile-worker" | "ours, split";
/**
 * Runs `n` jobs' whole lives on C loops; resolves to the wall time in ms and oddities: for ours
 * an outcome other than the expected one, for pg-boss a fetch that found nothing (retried).
 */
type Runner = (n: number) => Promise<{ ms: number; unexpected: number }>;

const silent = new Logger(() => () => {});

/**
 * Ours. `split` false: each of C loops runs a job's whole life on its one connection (the
 * issue's shape). `split` true: C loops enqueue while C other loops start and end what was
 * enqueued, graphile-worker's shape (and production's: the API enqueues, the worker claims).
 */
async function ours(db: BenchDb, c: number, users: string[], path: Path, split = false) {
  const service = db.service(split ? 2 * c : c);
  const clients = await Promise.all(
    Array.from({ length: split ? 2 * c : c }, () => service.connect()),
  );
  const end =
    path === "success"
      ? "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'bench output') as r"
      : `select public.fail_job(p_job_id => $1, p_reason => 'model_refused',
           p_error => 'bench: refused', p_attempt => 1) as r`;
  const endOutcome = path === "success" ? "completed" : "failed";
  let unexpected = 0;
  const enqueue = async (cl: pg.PoolClient, i: number) => {
    const e = await cl.query({
      name: "bench_enqueue",
      text: "select public.enqueue_job(p_user_id => $1, p_prompt => $2) as r",
      values: [users[i % users.length], `Write a short note about queues and quotas. #${i}`],
    });
    const id = e.rows[0]?.r?.job?.id as string | undefined;
    if (!id) unexpected++;
    return id;
  };
  const work = async (cl: pg.PoolClient, id: string) => {
    const s = await cl.query({
      name: "bench_start",
      text: "select public.start_job(p_job_id => $1) as r",
      values: [id],
    });
    if (s.rows[0]?.r?.outcome !== "started") unexpected++;
    const f = await cl.query({ name: `bench_${path}`, text: end, values: [id] });
    if (f.rows[0]?.r?.outcome !== endOutcome) unexpected++;
  };
  const whole: Runner = async (n) => {
    unexpected = 0;
    const ms = await pool(c, n, async (i, w) => {
      const cl = clients[w] as pg.PoolClient;
      const id = await enqueue(cl, i);
      if (id) await work(cl, id);
    });
    return { ms, unexpected };
  };
  const pipelined: Runner = async (n) => {
    unexpected = 0;
    const ready: (string | undefined)[] = [];
    let waiting: (() => void)[] = [];
    let taken = 0;
    const wake = () => {
      const w = waiting;
      waiting = [];
      for (const f of w) f();
    };
    const started = performance.now();
    const producers = pool(c, n, async (i, w) => {
      ready.push(await enqueue(clients[w] as pg.PoolClient, i));
      wake();
    });
    const workers = Array.from({ length: c }, async (_, w) => {
      const cl = clients[c + w] as pg.PoolClient;
      while (taken < n) {
        if (ready.length === 0) {
          await new Promise<void>((resolve) => waiting.push(resolve));
          continue;
        }
        const id = ready.shift();
        taken++;
        if (id) await work(cl, id);
      }
      wake();
    });
    await Promise.all([producers, ...workers]);
    return { ms: performance.now() - started, unexpected };
  };
  const close = async () => {
    for (const cl of clients) cl.release();
    await service.end();
  };
  return { runner: split ? pipelined : whole, close };
}

async function pgBoss(db: BenchDb, c: number, path: Path) {
  const boss = new PgBoss({ connectionString: db.url, max: c });
  boss.on("error", (error: unknown) => log(`  pg-boss error: ${String(error)}`));
  await boss.start();
  const queue = `bench-${path}-${c}`;
  await boss.createQueue(queue, path === "failure" ? { retryLimit: 0 } : {});
  const runner: Runner = async (n) => {
    let emptyFetches = 0;
    const ms = await pool(c, n, async (i) => {
      await boss.send(queue, { i });
      for (let tries = 0; ; tries++) {
        const [job] = await boss.fetch(queue);
        if (job) {
          if (path === "success") await boss.complete(queue, job.id);
          else await boss.fail(queue, job.id, { message: "bench: refused" });
          return;
        }
        // Another loop took the job this loop sent; every loop sent one, so one is there.
        if (tries === 0) emptyFetches++;
        if (tries > 100) throw new Error("pg-boss: nothing to fetch");
      }
    });
    return { ms, unexpected: emptyFetches };
  };
  return { runner, close: () => boss.stop({ graceful: false }) };
}

async function graphileWorker(db: BenchDb, c: number, path: Path) {
  const producers = new pg.Pool({ connectionString: db.url, max: c });
  producers.on("error", () => {});
  producers.on("connect", (client) => client.on("error", () => {}));
  const utils = await makeWorkerUtils({ pgPool: producers, logger: silent });
  await utils.migrate();
  let done = 0;
  let waiting: { target: number; resolve: () => void } | null = null;
  const worker = await runGraphile({
    connectionString: db.url,
    concurrency: c,
    maxPoolSize: Math.max(10, c + 2),
    noHandleSignals: true,
    logger: silent,
    taskList: {
      bench_ok: async () => {},
      bench_fail: async () => {
        throw new Error("bench: refused");
      },
    },
  });
  worker.events.on("job:complete", () => {
    done++;
    if (waiting && done >= waiting.target) waiting.resolve();
  });
  const task = path === "success" ? "bench_ok" : "bench_fail";
  const runner: Runner = async (n) => {
    const target = done + n;
    const finished = new Promise<void>((resolve) => {
      waiting = { target, resolve };
    });
    const started = performance.now();
    await pool(c, n, async (i) => {
      await utils.addJob(task, { i }, { maxAttempts: path === "success" ? 25 : 1 });
    });
    await finished;
    waiting = null;
    return { ms: performance.now() - started, unexpected: 0 };
  };
  const close = async () => {
    await worker.stop();
    await utils.release();
    await producers.end();
  };
  return { runner, close };
}

/**
 * The next transaction id: its growth over a run is the write transactions the run committed
 * (or aborted), counted by the server, without taking an id itself. Each lifecycle step of each
 * system writes, so this counts the round trips that change state.
 */
async function nextXid(db: BenchDb): Promise<number> {
  const { rows } = await db.admin.query<{ x: string }>(
    "select pg_snapshot_xmax(pg_current_snapshot())::text as x",
  );
  return Number(rows[0]?.x);
}

/** What each system left behind, counted in its own tables (the bench's own check on itself). */
async function finalStates(db: BenchDb) {
  const q = async (sql: string) => (await db.admin.query(sql)).rows;
  return {
    ours: await q(
      "select status, count(*)::int n from public.generation_jobs group by status order by status",
    ),
    pgBoss: await q("select state, count(*)::int n from pgboss.job group by state order by state"),
    graphileWorker: await q(
      `select (attempts >= max_attempts) as exhausted, last_error is not null as errored,
              count(*)::int n from graphile_worker.jobs group by 1, 2 order by 1, 2`,
    ),
  };
}

export async function runPeers(opts: { quick: boolean }) {
  const n = opts.quick ? 150 : 600;
  const repeats = opts.quick ? 1 : 3;
  const levels = [1, 8, 32];
  const db = await startBenchDb();
  try {
    const users = await createUsers(db.admin, 1000, "bench");
    const rows: Record<string, unknown>[] = [];
    for (const path of ["success", "failure"] as const) {
      for (const c of levels) {
        const systems: [System, { runner: Runner; close(): Promise<unknown> }][] = [
          ["ours", await ours(db, c, users, path)],
          ["pg-boss", await pgBoss(db, c, path)],
          ["graphile-worker", await graphileWorker(db, c, path)],
          ["ours, split", await ours(db, c, users, path, true)],
        ];
        const perSec: Record<System, number[]> = {
          ours: [],
          "pg-boss": [],
          "graphile-worker": [],
          "ours, split": [],
        };
        const writes: Record<System, number[]> = {
          ours: [],
          "pg-boss": [],
          "graphile-worker": [],
          "ours, split": [],
        };
        let unexpected = 0;
        let emptyFetches = 0;
        try {
          for (let r = 0; r <= repeats; r++) {
            // Repeat 0 warms plans, pools and caches; it is not counted.
            for (const [name, s] of systems) {
              const count = r === 0 ? Math.min(100, n) : n;
              const before = await nextXid(db);
              const res = await s.runner(count);
              const after = await nextXid(db);
              if (r > 0) {
                perSec[name].push((count * 1000) / res.ms);
                writes[name].push((after - before) / count);
                if (name === "ours" || name === "ours, split") unexpected += res.unexpected;
                if (name === "pg-boss") emptyFetches += res.unexpected;
              }
            }
          }
        } finally {
          for (const [, s] of systems) await s.close();
        }
        const m = (s: System) => median(perSec[s]);
        const row = {
          path,
          connections: c,
          ours: round(m("ours"), 0),
          pgBoss: round(m("pg-boss"), 0),
          graphileWorker: round(m("graphile-worker"), 0),
          oursOverPgBoss: round(m("ours") / m("pg-boss"), 2),
          oursOverGraphile: round(m("ours") / m("graphile-worker"), 2),
          oursSplit: round(m("ours, split"), 0),
          oursSplitOverGraphile: round(m("ours, split") / m("graphile-worker"), 2),
          metPgBoss: m("ours") / m("pg-boss") >= 1.5,
          metGraphile: m("ours") / m("graphile-worker") >= 1.0,
          writeTransactionsPerJob: Object.fromEntries(
            Object.entries(writes).map(([k, v]) => [k, round(median(v), 2)]),
          ),
          connectionsBusy: { ours: c, pgBoss: c, graphileWorker: 2 * c, oursSplit: 2 * c },
          unexpectedOutcomes: unexpected,
          pgBossEmptyFetches: emptyFetches,
          runs: Object.fromEntries(
            Object.entries(perSec).map(([k, v]) => [k, v.map((x) => round(x, 0))]),
          ),
        };
        rows.push(row);
        log(
          `  peers ${path} c=${c}: ours ${row.ours}/s, pg-boss ${row.pgBoss}/s, graphile-worker ${row.graphileWorker}/s`,
        );
      }
    }
    const states = await finalStates(db);
    const drift = await driftRows(db.admin);
    const result = {
      n,
      repeats,
      postgres: db.version,
      versions: await versions(),
      rows,
      states,
      drift,
    };
    await writeResult("peers", result);
    return result;
  } finally {
    await db.stop();
  }
}

async function versions() {
  const read = async (p: string) =>
    (
      JSON.parse(await readFile(join(root, "node_modules", p, "package.json"), "utf8")) as {
        version: string;
      }
    ).version;
  return { pgBoss: await read("pg-boss"), graphileWorker: await read("graphile-worker") };
}

export function printPeers(r: Awaited<ReturnType<typeof runPeers>>): string {
  const t = table(
    [
      "path",
      "C",
      "ours jobs/s",
      "pg-boss",
      "graphile-worker",
      "ours / pg-boss",
      "target",
      "ours / graphile",
      "target",
      "write tx / job (ours, pg-boss, graphile, ours split)",
      "connections working",
      "ours split (C enqueue + C work)",
      "split / graphile",
      "unexpected",
    ],
    r.rows.map((x) => [
      x.path as string,
      x.connections as number,
      x.ours as number,
      x.pgBoss as number,
      x.graphileWorker as number,
      x.oursOverPgBoss as number,
      x.metPgBoss ? ">= 1.5 yes" : ">= 1.5 NO",
      x.oursOverGraphile as number,
      x.metGraphile ? ">= 1.0 yes" : ">= 1.0 NO",
      Object.values(x.writeTransactionsPerJob as Record<string, number>).join(" / "),
      `${x.connections} / ${x.connections} / ${2 * (x.connections as number)} / ${2 * (x.connections as number)}`,
      x.oursSplit as number,
      x.oursSplitOverGraphile as number,
      x.unexpectedOutcomes as number,
    ]),
  );
  return `${t}\n\npg-boss ${r.versions.pgBoss}, graphile-worker ${r.versions.graphileWorker}, PostgreSQL ${r.postgres}; ${r.n} jobs per measurement, median of ${r.repeats}; drift rows after: ${r.drift}\nfinal states: ${JSON.stringify(r.states)}`;
}
