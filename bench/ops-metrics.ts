/**
 * The operator page's query (public.ops_metrics, GET /api/ops/metrics) at the growth bench's
 * size: 1 M jobs with their events (enqueued, started, completed or failed: about 3 M rows of
 * job_events), laid out two ways:
 *   spread  the growth bench's year (about 2,700 jobs a day): what a week window reads today;
 *   dense   every job in the last hour (about 280 jobs/s): the per-row cost of a full window,
 *           from which 1,000 jobs/s is extrapolated.
 * Each window (hour, day, week) is timed (median of 5) and its plan kept with EXPLAIN (ANALYZE,
 * BUFFERS): the window must be read through the time indexes, never a scan of the table.
 *
 * Then the drift tile against the quota_drift view it replaced, on the same data (median of 5).
 *
 *   npx tsx bench/ops-metrics.ts [jobs] [spread|dense]     (default 1000000, both layouts)
 */
import { bulkJobs, createUsers, startBenchDb } from "./support/pg.ts";
import { log, median, round } from "./support/util.ts";

const JOBS = Number(process.argv[2] ?? 1_000_000);
const WINDOWS = { hour: [3600, 60], day: [86_400, 900], week: [604_800, 7200] } as const;

const STATUS_SQL = `case when (hashint8(i) & 2147483647) % 100 < 80 then 'succeeded'
  when (hashint8(i) & 2147483647) % 100 < 90 then 'failed' else 'canceled' end`;
const layouts = {
  spread: `now() - make_interval(days => (i % 365)::int, secs => i % 86400)`,
  dense: `now() - make_interval(secs => (i % 3540)::int) - interval '1 minute'`,
};

const EVENTS_SQL = `
  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  select id, user_id, created_at, 'enqueued', null, 'queued', jsonb_build_object('plan', plan_id, 'hold', 1)
  from public.generation_jobs
  union all
  select id, user_id, started_at, 'started', 'queued', 'running', jsonb_build_object('attempt', 1)
  from public.generation_jobs where started_at is not null
  union all
  select id, user_id, finished_at, case status when 'succeeded' then 'completed' else status end,
    'running', status,
    jsonb_build_object('usage', jsonb_build_object('prompt_tokens', 20, 'completion_tokens', 200))
  from public.generation_jobs where finished_at is not null`;

async function main() {
  const only = process.argv[3];
  for (const [layout, createdSql] of Object.entries(layouts)) {
    if (only && layout !== only) continue;
    const db = await startBenchDb();
    try {
      const users = await createUsers(db.admin, 10_000, "bench");
      const t0 = performance.now();
      for (let from = 1; from <= JOBS; from += 250_000)
        await bulkJobs(db.admin, {
          users,
          from,
          to: Math.min(JOBS, from + 249_999),
          statusSql: STATUS_SQL,
          createdSql,
        });
      await db.admin.query(EVENTS_SQL);
      await db.admin.query("vacuum analyze public.generation_jobs, public.job_events");
      const { rows: counts } = await db.admin.query(
        "select (select count(*) from public.generation_jobs)::int jobs, (select count(*) from public.job_events)::int events",
      );
      log(
        `${layout}: ${JSON.stringify(counts[0])} loaded in ${round((performance.now() - t0) / 1000, 1)} s`,
      );
      const svc = db.service(1);
      for (const [name, [seconds, bucket]] of Object.entries(WINDOWS)) {
        const args = [`${seconds} seconds`, `${bucket} seconds`];
        const call = `select public.ops_metrics(now() - $1::interval, now(), $2::interval)`;
        const ms: number[] = [];
        for (let i = 0; i < 5; i++) {
          const t = performance.now();
          await svc.query(call, args);
          ms.push(performance.now() - t);
        }
        const inWindow = await db.admin.query(
          "select count(*)::int n from public.job_events where at >= now() - $1::interval",
          [args[0]],
        );
        log(
          `${layout} ${name}: median ${round(median(ms), 1)} ms (events in window ${inWindow.rows[0].n})`,
        );
        // the plans of the statements inside the call (the functions are not inlined: they
        // carry a search_path setting), via auto_explain at NOTICE level, as the growth bench
        const client = await db.admin.connect();
        const plans: string[] = [];
        const onNotice = (m: { message?: string }) => {
          if (m.message?.includes("Query Text:")) plans.push(m.message);
        };
        try {
          await client.query(`load 'auto_explain';
            set auto_explain.log_analyze = on; set auto_explain.log_buffers = on;
            set auto_explain.log_timing = off; set auto_explain.log_nested_statements = on;
            set auto_explain.log_level = notice; set auto_explain.log_min_duration = 0`);
          client.on("notice", onNotice);
          await client.query(`${call.replace("select", "select length(")}::text)`, args);
        } finally {
          client.off("notice", onNotice);
          await client.query("set auto_explain.log_min_duration = -1");
          client.release();
        }
        for (const plan of plans) console.log(`--- ${layout} ${name}\n${plan}`);
      }
      // The drift tile side by side with what it replaced, on the same data in the same run:
      // the quota_drift view over every job (the tile until it was bounded, and still the full
      // check), the bounded tile as the page calls it today, and the bounded tile with last
      // month's periods open as well (a job of last month still active: a whole month and more).
      const drift = {
        "quota_drift (every job)": "select count(*) from public.quota_drift",
        "tile today":
          "select count(*) from private.quota_drift_since(private.open_periods_since(now()))",
        "tile, last month open too":
          "select count(*) from private.quota_drift_since(private.period_start('month', now() - interval '1 month'))",
      };
      for (const [name, sql] of Object.entries(drift)) {
        const ms: number[] = [];
        for (let i = 0; i < 5; i++) {
          const t = performance.now();
          await db.admin.query(sql);
          ms.push(performance.now() - t);
        }
        const { rows } = await db.admin.query(
          "select count(*)::int n from public.generation_jobs where period_start >= $1",
          [
            name === "tile today"
              ? (await db.admin.query("select private.open_periods_since(now()) s")).rows[0].s
              : name === "tile, last month open too"
                ? (
                    await db.admin.query(
                      "select private.period_start('month', now() - interval '1 month') s",
                    )
                  ).rows[0].s
                : new Date(0),
          ],
        );
        log(`${layout} drift, ${name}: median ${round(median(ms), 1)} ms (jobs read ${rows[0].n})`);
      }
    } finally {
      await db.stop();
    }
  }
}

void main();
