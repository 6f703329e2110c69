/**
 * Section 5: growth. The hot paths' latency with 10 k, 100 k, 1 M and 10 M jobs (their events
 * with them), and their plans captured with auto_explain (ANALYZE, BUFFERS, nested statements:
 * the plans of the statements INSIDE the transition functions, not of the outer `select fn()`),
 * which must stay index paths. At each size also what grows with the tables: the drift view,
 * ops/reconcile.ts's whole report, one retention batch (public.retention_batch, when the
 * database has it) and one run of the history maintenance (public.maintain_job_events: one month
 * dropped, and a run with nothing to do), each in a transaction rolled back so the next size
 * starts from the same rows. Then the sweeper ending the stale tenth in its batches of 100.
 *
 * The table is bulk-loaded with generate_series: 10,000 users on a no-limit plan, each job's
 * status drawn from a hash of its row number: 10 % stale (queued or running, created 4-5 h ago,
 * past the 3 h max age), 1 % recently active, the rest finished over the past year; quota_usage
 * and job_events (2 to 3 events a job) are filled by the same statement, so the drift view stays
 * empty. `GROWTH_SIZES=10000,100000` picks the sizes.
 */
import type pg from "pg";
import { reconcile } from "../ops/reconcile.ts";
import { bulkJobs, createUsers, driftRows, GROWTH_LAYOUT, startBenchDb } from "./support/pg.ts";
import { log, median, quantile, round, table, writeResult } from "./support/util.ts";

type Stat = { medianMs: number; p99Ms: number; n: number };

async function timed(n: number, fn: (i: number) => Promise<void>): Promise<Stat> {
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    await fn(i);
    ms.push(performance.now() - t);
  }
  return { medianMs: round(median(ms), 3), p99Ms: round(quantile(ms, 0.99), 3), n };
}

/** Plans of every statement run inside the call, via auto_explain at NOTICE level. */
async function explain(
  client: pg.PoolClient,
  text: string,
  values: unknown[],
  rollback = false,
): Promise<string[]> {
  const plans: string[] = [];
  const onNotice = (msg: { message?: string }) => {
    if (msg.message?.includes("Query Text:")) plans.push(msg.message);
  };
  client.on("notice", onNotice);
  try {
    if (rollback) await client.query("begin");
    // auto_explain's settings are superuser-only: set them first, then call as the service role.
    await client.query("set auto_explain.log_min_duration = 0");
    await client.query("set role service_role");
    await client.query(text, values);
  } finally {
    await client.query("reset role");
    await client.query("set auto_explain.log_min_duration = -1");
    if (rollback) await client.query("rollback");
    client.off("notice", onNotice);
  }
  return plans;
}
const BIG_TABLES = /Seq Scan on (generation_jobs|quota_usage|job_events)\b/;

type BenchDb = Awaited<ReturnType<typeof startBenchDb>>;
/** One size's sampling: the service role's session, the users in turn, the sample count. */
interface Sampling {
  c: pg.PoolClient;
  pick: (i: number) => string;
  samples: number;
  size: number;
}

/** The hot paths' latency: enqueue, claim, complete, a status read, usage, a cancel. */
async function hotPaths(db: BenchDb, { c, pick, samples, size }: Sampling) {
  const enqueued: string[] = [];
  const enqueue = await timed(samples, async (i) => {
    const { rows } = await c.query("select public.enqueue_job(p_user_id => $1, p_prompt => $2) r", [
      pick(i + size),
      `growth prompt ${size} ${i}`,
    ]);
    enqueued.push(rows[0].r.job.id);
  });
  const claim = await timed(samples, async (i) => {
    await c.query("select public.start_job(p_job_id => $1) r", [enqueued[i]]);
  });
  const complete = await timed(samples, async (i) => {
    await c.query(
      "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'ok') r",
      [enqueued[i]],
    );
  });
  const { rows: existing } = await db.admin.query<{ id: string; user_id: string }>(
    `select id, user_id from public.generation_jobs tablesample system (${Math.max(0.2, (100 * samples * 20) / size)}) limit $1`,
    [samples],
  );
  const status = await timed(existing.length, async (i) => {
    const e = existing[i] as { id: string; user_id: string };
    await c.query("select public.get_job(p_job_id => $1, p_user_id => $2) r", [e.id, e.user_id]);
  });
  const usage = await timed(samples, async (i) => {
    await c.query("select public.get_usage(p_user_id => $1) r", [pick(i)]);
  });
  const cancel = await timed(samples, async (i) => {
    const user = pick(i + size + 3);
    const { rows } = await c.query("select public.enqueue_job(p_user_id => $1, p_prompt => $2) r", [
      user,
      `growth cancel ${size} ${i}`,
    ]);
    await c.query("select public.cancel_job(p_job_id => $1, p_user_id => $2) r", [
      rows[0].r.job.id,
      user,
    ]);
  });
  return { enqueue, claim, complete, status, usage, cancel, existing };
}

/**
 * What grows with the tables: the drift view, reconcile's report, a retention batch and a
 * pruning run (rolled back), the tables' sizes, one sweep batch (rolled back).
 */
async function whatGrows(
  db: BenchDb,
  { c, samples }: Sampling,
  has: { partitioned: boolean; retention: boolean },
  quick: boolean,
) {
  const { partitioned, retention } = has;
  const rolledBack = (n: number, sql: string, values: unknown[] = []) =>
    timed(n, async () => {
      await c.query("begin");
      await c.query(sql, values);
      await c.query("rollback");
    });
  const drift = await timed(3, async () => {
    await c.query("select count(*) from public.quota_drift");
  });
  const reconcileRun = await timed(1, async () => {
    await reconcile({ dbUrl: db.url, sample: 5 });
  });
  const retentionBatch = retention
    ? await rolledBack(3, "select public.retention_batch(now() - interval '30 days', 1000)")
    : null;
  const prune = partitioned
    ? await rolledBack(
        3,
        "select public.maintain_job_events(p_before => now() - interval '30 days', p_max_drops => 1)",
      )
    : null;
  const pruneIdle = partitioned
    ? await timed(samples, async () => {
        await c.query(
          "select public.maintain_job_events(p_before => now() - interval '30 days', p_max_drops => 0)",
        );
      })
    : null;
  const { rows: sizeRows } = await db.admin.query<{
    events: number;
    in_default: number;
    jobs_mb: number;
    events_mb: number;
  }>(
    `select (select count(*)::int from public.job_events) as events,
            (select count(*)::int from ${partitioned ? "private.job_events_default" : "public.job_events where false"}) as in_default,
            (pg_total_relation_size('public.generation_jobs') / 1048576)::int as jobs_mb,
            ((select sum(pg_total_relation_size(c.oid)) from pg_class c
              where c.oid = 'public.job_events'::regclass
                 or c.oid in (select inhrelid from pg_inherits where inhparent = 'public.job_events'::regclass)
            ) / 1048576)::int as events_mb`,
  );
  const footprint = sizeRows[0];
  // One sweep batch, rolled back, so the stale tenth stays for the sweep below.
  const sweepBatch = await timed(quick ? 3 : 5, async () => {
    await c.query("begin");
    await c.query("select public.sweep_jobs() r");
    await c.query("rollback");
  });

  return { drift, reconcileRun, retentionBatch, prune, pruneIdle, footprint, sweepBatch };
}

/** The plans of the statements inside each transition, and their seq scans on the big tables. */
async function capturePlans(
  x: pg.PoolClient,
  { pick, size }: Sampling,
  existing: { id: string; user_id: string }[],
) {
  // Warm the capture session's plan cache past plpgsql's 5 custom plans, then capture.
  const u = pick(size + 1);
  await x.query("set role service_role");
  for (let i = 0; i < 6; i++)
    await x.query("select public.enqueue_job(p_user_id => $1, p_prompt => $2)", [
      u,
      `warm ${i} ${size}`,
    ]);
  const { rows: fresh } = await x.query<{ r: { job: { id: string } } }>(
    "select public.enqueue_job(p_user_id => $1, p_prompt => 'warm again') r",
    [u],
  );
  await x.query("reset role");
  const e0 = existing[0] as { id: string; user_id: string };
  const plans: Record<string, string[]> = {
    enqueue_job: await explain(x, "select public.enqueue_job(p_user_id => $1, p_prompt => $2)", [
      pick(size + 2),
      `explained ${size}`,
    ]),
    start_job: await explain(x, "select public.start_job(p_job_id => $1)", [fresh[0]?.r.job.id]),
    complete_job: await explain(
      x,
      "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'ok')",
      [fresh[0]?.r.job.id],
    ),
    get_job: await explain(x, "select public.get_job(p_job_id => $1, p_user_id => $2)", [
      e0.id,
      e0.user_id,
    ]),
    get_usage: await explain(x, "select public.get_usage(p_user_id => $1)", [pick(3)]),
    sweep_jobs: await explain(x, "select public.sweep_jobs()", [], true),
  };
  const seqScans = Object.fromEntries(
    Object.entries(plans).map(([k, ps]) => [k, ps.filter((p) => BIG_TABLES.test(p)).length]),
  );
  return { plans, seqScans };
}

/** The sweeper ending the stale tenth, as the cron would, after the last size. */
async function sweepStale(db: BenchDb, c: pg.PoolClient, loaded: number) {
  // Batch after batch, as the cron would (SQL side).
  const { rows: before } = await db.admin.query<{ n: number }>(
    `select count(*)::int n from public.generation_jobs
   where status in ('queued', 'running') and created_at < now() - interval '3 hours'`,
  );
  const batches: number[] = [];
  let ended = 0;
  const started = performance.now();
  for (;;) {
    const t = performance.now();
    const { rows } = await c.query("select public.sweep_jobs() r");
    batches.push(performance.now() - t);
    const r = rows[0].r as { failed: unknown[]; republish: unknown[]; more: boolean };
    ended += r.failed.length;
    // Past 300 batches the rate is known; ending a million stale jobs would take minutes more.
    if (!r.more || batches.length >= 300) break;
  }
  const totalSeconds = (performance.now() - started) / 1000;
  const { rows: after } = await db.admin.query<{ n: number }>(
    `select count(*)::int n from public.generation_jobs
   where status in ('queued', 'running') and created_at < now() - interval '3 hours'`,
  );
  const q = (p: number) => round(quantile(batches, p), 1);
  const sweep = {
    jobs: loaded,
    staleBefore: before[0]?.n ?? 0,
    staleAfter: after[0]?.n ?? 0,
    ended,
    batches: batches.length,
    totalSeconds: round(totalSeconds, 1),
    jobsPerSecond: round(ended / totalSeconds, 0),
    batchMs: {
      first: round(batches[0] ?? 0, 1),
      median: q(0.5),
      p99: q(0.99),
      max: q(1),
      last: round(batches.at(-1) ?? 0, 1),
    },
    // lib/sweeper.ts stops a cron run after 1000 batches or 20 s, whichever comes first.
    cronRunsNeeded: Math.max(
      Math.ceil(batches.length / 1000),
      Math.ceil(batches.reduce((a, b) => a + b, 0) / 20_000),
    ),
  };
  return sweep;
}

export async function runGrowth(opts: { quick: boolean }) {
  const sizes = process.env.GROWTH_SIZES
    ? process.env.GROWTH_SIZES.split(",").map(Number)
    : opts.quick
      ? [10_000, 100_000]
      : [10_000, 100_000, 1_000_000, 10_000_000];
  const samples = opts.quick ? 100 : 300;
  const db = await startBenchDb();
  try {
    const users = await createUsers(db.admin, 10_000, "bench");
    const service = db.service(2);
    const c = await service.connect();
    const x = await db.admin.connect();
    await x.query(`load 'auto_explain';
      set auto_explain.log_min_duration = -1; set auto_explain.log_analyze = on;
      set auto_explain.log_buffers = on; set auto_explain.log_timing = on;
      set auto_explain.log_nested_statements = on; set auto_explain.log_level = notice;
      set timezone = 'UTC'`);
    try {
      const { rows: has } = await db.admin.query<{ partitioned: boolean; retention: boolean }>(
        `select to_regprocedure('public.maintain_job_events(timestamptz, timestamptz, integer, integer)') is not null as partitioned,
                to_regprocedure('public.retention_batch(timestamptz, integer)') is not null as retention`,
      );
      const partitioned = has[0]?.partitioned === true;
      const retention = has[0]?.retention === true;
      // The loads span the past year: its months' partitions, as a year of cron runs made them.
      if (partitioned)
        await db.admin.query(
          "select private.job_events_month_partition(now() - make_interval(months => m)) from generate_series(1, 13) m",
        );
      const points = [];
      let loaded = 0;
      for (const size of sizes) {
        const t0 = performance.now();
        await bulkJobs(db.admin, {
          users,
          from: loaded,
          to: size - 1,
          statusSql: GROWTH_LAYOUT.statusSql,
          createdSql: GROWTH_LAYOUT.createdSql,
          events: true,
        });
        await db.admin.query(
          "analyze public.generation_jobs; analyze public.quota_usage; analyze public.job_events",
        );
        const loadSeconds = round((performance.now() - t0) / 1000, 1);
        loaded = size;
        log(`  growth: ${size} jobs loaded in ${loadSeconds} s`);
        const pick = (i: number) => users[(i * 7919) % users.length] as string;

        const sampling: Sampling = { c, pick, samples, size };
        const { enqueue, claim, complete, status, usage, cancel, existing } = await hotPaths(
          db,
          sampling,
        );
        const { drift, reconcileRun, retentionBatch, prune, pruneIdle, footprint, sweepBatch } =
          await whatGrows(db, sampling, { partitioned, retention }, opts.quick);
        const { plans, seqScans } = await capturePlans(x, sampling, existing);
        const point = {
          jobs: size,
          loadSeconds,
          events: footprint?.events ?? 0,
          inDefault: footprint?.in_default ?? 0,
          jobsMb: footprint?.jobs_mb ?? 0,
          eventsMb: footprint?.events_mb ?? 0,
          enqueue,
          claim,
          complete,
          status,
          usage,
          cancel,
          drift,
          reconcile: reconcileRun,
          retentionBatch,
          prune,
          pruneIdle,
          sweepBatch,
          seqScans,
          plans,
        };
        points.push(point);
        // Written at each size, so a long run stopped early keeps what it measured.
        await writeResult("growth", {
          postgres: db.version,
          samples,
          partitioned,
          retention,
          points,
        });
        log(
          `  growth ${size}: enqueue ${enqueue.medianMs} ms, claim ${claim.medianMs}, status ${status.medianMs}, usage ${usage.medianMs}, cancel ${cancel.medianMs}, drift ${drift.medianMs}, reconcile ${reconcileRun.medianMs}, retention ${retentionBatch?.medianMs}, prune ${prune?.medianMs} (idle ${pruneIdle?.medianMs}), sweep batch ${sweepBatch.medianMs} ms, seq scans ${JSON.stringify(seqScans)}`,
        );
      }

      const sweep = await sweepStale(db, c, loaded);
      log(`  growth sweep: ${JSON.stringify(sweep)}`);
      const drift = await driftRows(db.admin);
      const result = {
        postgres: db.version,
        samples,
        partitioned,
        retention,
        points,
        sweep,
        drift,
      };
      await writeResult("growth", result);
      return result;
    } finally {
      c.release();
      x.release();
    }
  } finally {
    await db.stop();
  }
}

export function printGrowth(r: Awaited<ReturnType<typeof runGrowth>>): string {
  const ms = (s: Stat) => `${s.medianMs} / ${s.p99Ms}`;
  const opt = (s: Stat | null) => (s ? ms(s) : "n/a");
  const lat = table(
    [
      "jobs",
      "events",
      "load s",
      "enqueue ms p50/p99",
      "claim",
      "complete",
      "status",
      "usage",
      "cancel",
      "1 sweep batch (p50/p99)",
      "seq scans on big tables",
    ],
    r.points.map((p) => [
      p.jobs,
      p.events,
      p.loadSeconds,
      ms(p.enqueue),
      ms(p.claim),
      ms(p.complete),
      ms(p.status),
      ms(p.usage),
      ms(p.cancel),
      ms(p.sweepBatch),
      Object.values(p.seqScans).reduce((a, b) => a + b, 0),
    ]),
  );
  const big = table(
    [
      "jobs",
      "jobs MB",
      "events MB",
      "events in default",
      "quota_drift ms p50/max",
      "reconcile s",
      "1 retention batch ms p50/max",
      "1 pruning run (1 month dropped) ms p50/max",
      "pruning, nothing to do ms p50/p99",
    ],
    r.points.map((p) => [
      p.jobs,
      p.jobsMb,
      p.eventsMb,
      p.inDefault,
      ms(p.drift),
      round(p.reconcile.medianMs / 1000, 1),
      opt(p.retentionBatch),
      opt(p.prune),
      opt(p.pruneIdle),
    ]),
  );
  const s = r.sweep;
  const sw = table(
    [
      "jobs",
      "stale before",
      "ended",
      "stale after",
      "batches",
      "total s",
      "jobs/s",
      "batch ms first / p50 / p99 / last",
      "cron runs (1000 batches / 20 s each)",
    ],
    [
      [
        s.jobs,
        s.staleBefore,
        s.ended,
        s.staleAfter,
        s.batches,
        s.totalSeconds,
        s.jobsPerSecond,
        `${s.batchMs.first} / ${s.batchMs.median} / ${s.batchMs.p99} / ${s.batchMs.last}`,
        s.cronRunsNeeded,
      ],
    ],
  );
  return `${lat}\n\n${big}\n\n${sw}\n\ndrift rows after the sweep: ${r.drift}`;
}
