/**
 * ops/reconcile.ts at size, beside the SQL its event checks had before:
 * `npx tsx bench/reconcile.ts [jobs]` (default 1,000,000).
 *
 * The table is bulk-loaded as section 5 (growth) loads it: 10,000 users on a no-limit plan, each
 * job's status from a hash of its row number (10 % stale, 1 % recently active, the rest finished
 * over the past year), its 2-3 events in the past year's month partitions (17 of them, made
 * first as a year of cron runs would have). A handful of anomalies are planted on one more user,
 * so that every event check has findings: refunds with no event or two, withheld refunds with
 * and without the event that says so, a succeeded job with a refund-bearing event, counted and
 * legacy running cancels off their counter, and an old job only the full history judges.
 *
 * In one READ ONLY repeatable-read snapshot (reconcile's own), each check of `CHECKS` runs three
 * times: the current SQL, the previous SQL (`PREVIOUS` below), the current SQL again; every
 * run's rows must equal the others' (as sets: the previous SQL had no order). That is done
 * twice: with nothing dropped (events_complete_since -infinity, as growth runs) and with the
 * horizon 183 days back (older jobs judged on their row only). Then EXPLAIN (ANALYZE, BUFFERS)
 * of the rewritten checks. Results in bench/results/reconcile.json.
 */
import { execSync } from "node:child_process";
import type pg from "pg";
import { CHECKS, type Check, type Param } from "../ops/reconcile.ts";
import { bulkJobs, createUsers, GROWTH_LAYOUT, startBenchDb } from "./support/pg.ts";
import { log, round, table, writeResult } from "./support/util.ts";

/**
 * THE PREVIOUS SQL of the four checks that read job_events, kept here only to compare with
 * (ops/reconcile.ts no longer has it): each job's events looked up in correlated subqueries (one
 * probe of every month partition's job_events_job index per job and subquery), the legacy
 * cutoff of COUNTED as `min(at) where detail ? 'counted'` (a walk of the `at` index, once for
 * each copy of the expression), and the horizon function called once a row.
 */
const PREVIOUS_COUNTED = `(e.detail ->> 'counted' = 'true'
  or (not e.detail ? 'counted' and e.to_status = 'canceled' and e.from_status = 'running'
    and e.detail ->> 'refunded' = 'true'
    -- A token plan's running cancel captures what it consumed and is not counted.
    and j.meter = 'jobs'
    and e.at < coalesce((select min(x.at) from public.job_events x
      where x.detail ? 'counted'), 'infinity')))`;

const PREVIOUS: Record<string, string> = {
  failed_or_canceled_without_refund: `select j.id, j.user_id, j.status, j.refunded_at,
            (select count(*) from public.job_events e
             where e.job_id = j.id and e.to_status in ('failed', 'canceled') and e.from_status is distinct from e.to_status)::int as refund_events
          from public.generation_jobs j
          where j.status in ('failed', 'canceled')
            and (j.created_at < private.events_complete_since()
                 and j.refunded_at is null and j.refund_withheld is null
              or j.created_at >= private.events_complete_since()
            and ((j.refunded_at is null and not (
                   ((j.status = 'canceled' and j.refund_withheld = 'running_cancel_limit'
                     and exists (select 1 from public.job_events e
                       where e.job_id = j.id and e.to_status = 'canceled' and e.from_status = 'running'
                         and e.detail ->> 'refunded' = 'false'))
                   or (j.refund_withheld = 'paid_refund_limit'
                     and exists (select 1 from public.job_events e
                       where e.job_id = j.id and e.to_status = j.status
                         and e.from_status is distinct from e.to_status
                         and e.detail ->> 'refunded' = 'false')))))
                 or (select count(*) from public.job_events e
                 where e.job_id = j.id and e.to_status in ('failed', 'canceled') and e.from_status is distinct from e.to_status) <> 1))`,
  running_cancel_count_mismatch: `with counted as (
            select j.user_id, j.period_start, j.meter, count(*)::int as n
            from public.job_events e join public.generation_jobs j on j.id = e.job_id
            where ${PREVIOUS_COUNTED}
            group by j.user_id, j.period_start, j.meter
          )
          select q.user_id, q.period_start, q.meter, q.paid_refunds, coalesce(c.n, 0) as events
          from public.quota_usage q
          left join counted c
            on c.user_id = q.user_id and c.period_start = q.period_start and c.meter = q.meter
          where q.paid_refunds <> coalesce(c.n, 0)
            and q.period_start >= private.events_complete_since()`,
  refund_after_spend_past_bound: `with endings as (
            select e.id, j.id as job_id, j.user_id, j.period_start, j.meter, j.status,
              private.refund_bound(p) as bound,
              ${PREVIOUS_COUNTED} as counted,
              (j.refund_withheld is not null and e.detail ->> 'refunded' = 'false') as withheld
            from public.job_events e
            join public.generation_jobs j on j.id = e.job_id
            join public.plans p on p.id = j.plan_id
            where j.meter = 'jobs' and e.to_status in ('failed', 'canceled')
              and e.from_status is distinct from e.to_status
              and j.period_start >= private.events_complete_since()
          ), ordered as (
            select x.*, count(*) filter (where x.counted) over (
              partition by x.user_id, x.period_start, x.meter order by x.id
              rows between unbounded preceding and 1 preceding) as before
            from endings x
          )
          select job_id, user_id, period_start, status, before::int, bound,
            case when counted then 'refunded' else 'withheld' end as ending
          from ordered
          where (counted and before >= bound) or (withheld and before < bound)
          order by id`,
  succeeded_with_refund: `select j.id, j.user_id, j.refunded_at from public.generation_jobs j
          where j.status = 'succeeded' and (j.refunded_at is not null or exists (
            select 1 from public.job_events e
            where e.job_id = j.id and e.to_status in ('failed', 'canceled') and e.from_status is distinct from e.to_status))`,
};

const PARAMS: Record<Param, number> = {
  maxAgeSeconds: 10_800,
  leaseGraceSeconds: 300,
  undeliveredAfterSeconds: 900,
};

type Run = { label: string; ms: Record<string, number>; totalMs: number };

async function runChecks(
  c: pg.PoolClient,
  label: string,
  checks: Check[],
  rows: Map<string, string[][]>,
): Promise<Run> {
  const ms: Record<string, number> = {};
  for (const check of checks) {
    const t = performance.now();
    const r = await c.query(check.sql, check.param ? [PARAMS[check.param], null] : []);
    ms[check.check] = round(performance.now() - t, 1);
    const got = r.rows.map((row) => JSON.stringify(row)).sort();
    const seen = rows.get(check.check) ?? [];
    seen.push(got);
    rows.set(check.check, seen);
    log(`    ${label} ${check.check}: ${r.rowCount} rows, ${ms[check.check]} ms`);
  }
  const totalMs = round(
    Object.values(ms).reduce((a, b) => a + b, 0),
    1,
  );
  return { label, ms, totalMs };
}

/** Plants one job of the extra user and its events (`[from, to, detail, seconds after creation]`). */
async function plant(
  db: pg.Pool,
  user: string,
  o: {
    status: "succeeded" | "failed" | "canceled";
    daysAgo: number;
    refunded?: boolean;
    withheld?: "running_cancel_limit" | "paid_refund_limit";
    events?: Array<[string | null, string, Record<string, unknown>, number]>;
  },
): Promise<string> {
  const { rows } = await db.query<{ id: string }>(
    `insert into public.generation_jobs (
       user_id, status, prompt, request_hash, plan_id, period_start, output, failure_reason,
       attempts, created_at, queued_at, started_at, finished_at, refunded_at, refund_withheld,
       captured, updated_at)
     select $1, $2, 'planted', md5(random()::text), 'bench',
       date_trunc('month', t at time zone 'UTC') at time zone 'UTC',
       case when $2 = 'succeeded' then 'out' end, case when $2 = 'failed' then 'model_refused' end,
       1, t, t, t, t + interval '30 s', case when $4 then t + interval '30 s' end, $5,
       case when $4 then 0 else 1 end, t
     from (select now() - make_interval(days => $3) as t) x
     returning id`,
    [user, o.status, o.daysAgo, o.refunded ?? false, o.withheld ?? null],
  );
  const id = rows[0]?.id as string;
  for (const [from, to, detail, after] of o.events ?? [])
    await db.query(
      `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
       select $1, $2, created_at + make_interval(secs => $6), $4, $3, $4, $5
       from public.generation_jobs where id = $1`,
      [id, user, from, to, detail, after],
    );
  return id;
}

async function plantAnomalies(db: pg.Pool): Promise<Record<string, string>> {
  const [user] = await createUsers(db, 1, "bench");
  const u = user as string;
  const refunded = { refunded: true };
  const withheld = { refunded: false };
  const planted = {
    // failed_or_canceled_without_refund
    noEvent: await plant(db, u, { status: "failed", daysAgo: 10, refunded: true }),
    twoEvents: await plant(db, u, {
      status: "canceled",
      daysAgo: 11,
      refunded: true,
      events: [
        ["queued", "canceled", refunded, 30],
        ["queued", "canceled", refunded, 31],
      ],
    }),
    runningCancelWithheldClean: await plant(db, u, {
      status: "canceled",
      daysAgo: 12,
      withheld: "running_cancel_limit",
      events: [["running", "canceled", withheld, 30]],
    }),
    runningCancelWithheldNoEvent: await plant(db, u, {
      status: "canceled",
      daysAgo: 13,
      withheld: "running_cancel_limit",
      events: [["running", "canceled", refunded, 30]],
    }),
    paidFailureWithheldClean: await plant(db, u, {
      status: "failed",
      daysAgo: 14,
      withheld: "paid_refund_limit",
      events: [["running", "failed", withheld, 30]],
    }),
    paidFailureWithheldWrongEvent: await plant(db, u, {
      status: "failed",
      daysAgo: 15,
      withheld: "paid_refund_limit",
      events: [["running", "canceled", withheld, 30]],
    }),
    paidCancelWithheldClean: await plant(db, u, {
      status: "canceled",
      daysAgo: 16,
      withheld: "paid_refund_limit",
      events: [["queued", "canceled", withheld, 30]],
    }),
    oldNoEvent: await plant(db, u, { status: "failed", daysAgo: 300, refunded: true }),
    // succeeded_with_refund
    succeededRefundEvent: await plant(db, u, {
      status: "succeeded",
      daysAgo: 17,
      events: [["running", "failed", refunded, 30]],
    }),
    succeededSameStatusEvent: await plant(db, u, {
      status: "succeeded",
      daysAgo: 18,
      events: [["failed", "failed", {}, 30]],
    }),
    // running_cancel_count_mismatch: the first counted event (20 days ago) makes the legacy
    // running cancel before it (25 days) count and the one after it (13 days, above) not.
    counted: await plant(db, u, {
      status: "canceled",
      daysAgo: 20,
      refunded: true,
      events: [["running", "canceled", { refunded: true, counted: true }, 30]],
    }),
    legacyCounted: await plant(db, u, {
      status: "canceled",
      daysAgo: 25,
      refunded: true,
      events: [["running", "canceled", refunded, 30]],
    }),
  };
  // The user's counters as its jobs say (no drift), paid_refunds left at 0.
  await db.query(
    `insert into public.quota_usage (user_id, period_start, meter, units_used)
     select user_id, period_start, meter, sum(coalesce(captured, hold)) from public.generation_jobs
     where user_id = $1 group by 1, 2, 3`,
    [u],
  );
  return planted;
}

const uptime = () => execSync("uptime", { encoding: "utf8" }).trim();

async function main() {
  const size = Number(process.argv[2] ?? 1_000_000);
  if (!Number.isInteger(size) || size < 1000)
    throw new Error("usage: bench/reconcile.ts [jobs ≥ 1000]");
  const db = await startBenchDb();
  try {
    const users = await createUsers(db.admin, 10_000, "bench");
    await db.admin.query(
      "select private.job_events_month_partition(now() - make_interval(months => m)) from generate_series(1, 13) m",
    );
    const t0 = performance.now();
    const chunk = 250_000;
    for (let from = 0; from < size; from += chunk) {
      await bulkJobs(db.admin, {
        users,
        from,
        to: Math.min(size, from + chunk) - 1,
        ...GROWTH_LAYOUT,
        events: true,
      });
      log(`  reconcile: ${Math.min(size, from + chunk)} jobs loaded`);
    }
    const planted = await plantAnomalies(db.admin);
    await db.admin.query(
      "analyze public.generation_jobs; analyze public.quota_usage; analyze public.job_events",
    );
    const loadSeconds = round((performance.now() - t0) / 1000, 1);
    const { rows: counts } = await db.admin.query<{ jobs: number; events: number; parts: number }>(
      `select (select count(*)::int from public.generation_jobs) as jobs,
              (select count(*)::int from public.job_events) as events,
              (select count(*)::int from pg_inherits where inhparent = 'public.job_events'::regclass) as parts`,
    );
    log(`  reconcile: loaded in ${loadSeconds} s: ${JSON.stringify(counts[0])}`);

    const previous = CHECKS.map((c) => ({ ...c, sql: PREVIOUS[c.check] ?? c.sql }));
    // The checks that read job_events, whose plans are shown.
    const explained = CHECKS.filter((c) => c.sql.includes("job_events"));
    const c = await db.admin.connect();
    const variants = [];
    try {
      await c.query("set time zone 'UTC'");
      for (const horizon of ["-infinity", "183 days back"]) {
        await db.admin.query(
          horizon === "-infinity"
            ? "update private.history_horizon set events_complete_since = '-infinity'"
            : "update private.history_horizon set events_complete_since = now() - interval '183 days'",
        );
        const load = { before: uptime(), after: "" };
        log(`  reconcile, horizon ${horizon}: ${load.before}`);
        const rows = new Map<string, string[][]>();
        await c.query("begin isolation level repeatable read read only");
        const runs: Run[] = [];
        const plans: Record<string, string> = {};
        try {
          runs.push(await runChecks(c, "current", CHECKS, rows));
          runs.push(await runChecks(c, "previous", previous, rows));
          runs.push(await runChecks(c, "current again", CHECKS, rows));
          for (const [check, got] of rows) {
            const [a, ...rest] = got.map((r) => JSON.stringify(r));
            if (rest.some((r) => r !== a))
              throw new Error(`${check}: the previous and the current SQL disagree`);
          }
          for (const check of explained)
            plans[check.check] = (await c.query(`explain (analyze, buffers) ${check.sql}`)).rows
              .map((x: Record<string, string>) => x["QUERY PLAN"])
              .join("\n");
          for (const check of previous)
            if (check.sql.includes("job_events"))
              plans[`previous ${check.check} (not analyzed)`] = (
                await c.query(`explain ${check.sql}`)
              ).rows
                .map((x: Record<string, string>) => x["QUERY PLAN"])
                .join("\n");
          // The previous succeeded_with_refund is one pass only while the planner expects its
          // set of job ids to fit in work_mem (times hash_mem_multiplier): its plan at 2 MB.
          await c.query("set local work_mem = '2MB'");
          plans["previous succeeded_with_refund at work_mem 2MB (not analyzed)"] = (
            await c.query(`explain ${PREVIOUS.succeeded_with_refund}`)
          ).rows
            .map((x: Record<string, string>) => x["QUERY PLAN"])
            .join("\n");
          await c.query("set local work_mem to default");
        } finally {
          await c.query("rollback");
        }
        load.after = uptime();
        const findings = Object.fromEntries(
          [...rows].map(([check, got]) => [check, got[0]?.length ?? 0]),
        );
        variants.push({ horizon, load, runs, findings, plans });
        log(`  reconcile, horizon ${horizon}: findings ${JSON.stringify(findings)}`);
      }
    } finally {
      c.release();
    }
    const result = {
      jobs: size,
      postgres: db.version,
      loadSeconds,
      counts: counts[0],
      planted,
      variants,
    };
    await writeResult("reconcile", result);
    for (const v of variants) {
      const current = v.runs.filter((r) => r.label !== "previous");
      const prev = v.runs.find((r) => r.label === "previous") as Run;
      const best = (check: string) => Math.min(...current.map((r) => r.ms[check] ?? Number.NaN));
      console.log(`\nhorizon ${v.horizon}; load before: ${v.load.before}; after: ${v.load.after}`);
      console.log(
        table(
          ["check", "findings", "previous ms", "current ms (1st / 2nd)", "previous / current"],
          [...CHECKS.map((ch) => ch.check), "total"].map((check) => {
            const ms = (r: Run) => (check === "total" ? r.totalMs : (r.ms[check] ?? Number.NaN));
            const cur = check === "total" ? Math.min(...current.map(ms)) : best(check);
            return [
              check,
              check === "total" ? "" : (v.findings[check] ?? 0),
              ms(prev),
              current.map(ms).join(" / "),
              round(ms(prev) / cur, 1),
            ];
          }),
        ),
      );
    }
    for (const [check, plan] of Object.entries(variants[0]?.plans ?? {}))
      if (!check.startsWith("previous")) console.log(`\n${check}:\n${plan}`);
  } finally {
    await db.stop();
  }
}

await main();
