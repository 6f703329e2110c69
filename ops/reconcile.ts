/**
 * Reconciliation for any quota-jobs database, production included:
 *
 *   npm run reconcile -- --db-url postgres://...            read-only report, exit 1 if anything found
 *   npm run reconcile -- --db-url postgres://... --fix      also end what the sweeper would end
 *
 * The report (in one READ ONLY transaction, one snapshot):
 * - drift: users, organization pools and members, periods and meters whose counter differs from
 *   their open holds plus captures (public.quota_drift);
 * - active jobs older than the max age (the sweeper should have ended them);
 * - running jobs whose lease expired more than the grace ago (a dead worker's job);
 * - queued jobs never delivered (the outbox: the sweeper republishes or ends them);
 * - failed/canceled jobs without a refund, or without exactly one refund-bearing event (a job
 *   may lack its refund only when withheld, past the plan's bound of refunds after provider
 *   spend: a running cancel, `running_cancel_limit`, or a failure or queued cancel after spend,
 *   `paid_refund_limit`; and its event says `refunded: false`);
 * - counters of refunds after spend (`paid_refunds`) that differ from their events;
 * - refunds after spend made past the plan's bound, or withheld under it (the bound is
 *   `private.refund_bound`, the rule the endings themselves use);
 * - succeeded jobs with a refund or a refund-bearing event.
 * The checks that read job_events judge only the jobs and periods whose events are all kept:
 * those that start at or after `private.events_complete_since()` (the retention drops whole
 * past months, docs/DESIGN.md#history). An older failed/canceled job is still checked for its
 * refund on its own row.
 * The last two are impossible by the table's constraints; they are checked anyway, because this
 * command is for databases whose history nobody here has seen. The three stale checks call the
 * sweeper's own conditions (`private.stale_past_max_age`, `private.stale_lease_expired`,
 * `private.stale_undelivered`: the functions `sweep_jobs` walks with), so the report lists exactly
 * the jobs `--fix` ends. The URL's role must read every job and use `private`: the database owner
 * (`postgres`), as for migrations.
 *
 * `--fix` never writes a row itself: it calls `public.sweep_jobs(...)`, the sweeper's own
 * transition (row locks with skip locked, one refund per job, every change in job_events), in
 * batches until it reports nothing more. It passes `p_max_republish => 0`: this command cannot
 * publish to QStash, so a never-delivered job is failed with its refund instead of being marked
 * for a republish no one would make. Drift is reported, never "fixed": no transition creates or
 * removes units, and a counter that disagrees with its jobs needs a human to read job_events.
 *
 * Exit codes: 0 nothing found, 1 findings, 2 usage or connection error.
 */
import { pathToFileURL } from "node:url";
import pg from "pg";

export interface ReconcileOptions {
  dbUrl: string;
  fix?: boolean;
  /** @default 10800 (JOB_MAX_AGE_SECONDS) */
  maxAgeSeconds?: number;
  /** @default 300 (SWEEP_LEASE_GRACE_SECONDS) */
  leaseGraceSeconds?: number;
  /** @default 900 (SWEEP_UNDELIVERED_AFTER_SECONDS) */
  undeliveredAfterSeconds?: number;
  /** @default 100 */
  batchSize?: number;
  /** Rows listed per finding. @default 20 */
  sample?: number;
  /** The time jobs are judged stale at, and the sweep's `p_now`. @default the database's now() */
  now?: Date;
}

type Options = Required<Omit<ReconcileOptions, "now">> & { now: Date | null };

export interface Finding {
  check: string;
  count: number;
  /** Up to `sample` rows. */
  rows: Record<string, unknown>[];
  /** Whether `--fix` (sweep_jobs) ends these. */
  fixable: boolean;
}

export interface ReconcileReport {
  checkedAt: string;
  findings: Finding[];
  fixed?: { batches: number; failed: Record<string, number>; markedForRepublish: number };
  /** Findings left after the fix (when `fix`). */
  after?: Finding[];
  ok: boolean;
}

export type Param = "maxAgeSeconds" | "leaseGraceSeconds" | "undeliveredAfterSeconds";

/**
 * An event `e` (of job `j`) that used one of the period's refunds after provider spend. Every one
 * says `"counted": true` since 20261201090000_paid_endings.sql; before it, only running cancels
 * were counted, and their events said no more than `refunded: true`. `l` is `LEGACY`.
 */
const COUNTED = `(e.detail ->> 'counted' = 'true'
  or (not e.detail ? 'counted' and e.to_status = 'canceled' and e.from_status = 'running'
    and e.detail ->> 'refunded' = 'true'
    -- A token plan's running cancel captures what it consumed and is not counted.
    and j.meter = 'jobs'
    and e.at < l.until))`;

/**
 * The one row `l` that `COUNTED` reads: until when events are legacy, the first that says
 * `counted` at all (infinity when none does). One pass over job_events, once a statement: as
 * `min(at) where ...` the planner walks the `at` index until the first such event, every
 * event before it read from the heap (1.3 s at 1 M jobs when few events say it), and once
 * for each place the expression is copied to.
 */
const LEGACY = `(select coalesce(min(x.at) filter (where x.detail ? 'counted'), 'infinity') as until
  from public.job_events x) l`;

/**
 * Each job's events into failed or canceled, in one grouped pass over job_events: the
 * refund-bearing transitions (`refund_events`), and those that say their refund was withheld,
 * by kind. The checks join it to generation_jobs by hash instead of looking each job's events
 * up in a subquery: job_id is not the partition key, so a lookup probes every month's index.
 * A count (0 for a job without a row here) is never null, as the `exists` it replaces.
 */
const REFUND_EVENTS = `select e.job_id,
    count(*) filter (where e.from_status is distinct from e.to_status) as refund_events,
    count(*) filter (where e.to_status = 'canceled' and e.from_status = 'running'
      and e.detail ->> 'refunded' = 'false') as withheld_running_cancels,
    count(*) filter (where e.to_status = 'failed' and e.from_status is distinct from e.to_status
      and e.detail ->> 'refunded' = 'false') as withheld_failures,
    count(*) filter (where e.to_status = 'canceled' and e.from_status is distinct from e.to_status
      and e.detail ->> 'refunded' = 'false') as withheld_cancels
  from public.job_events e
  where e.to_status in ('failed', 'canceled')
  group by e.job_id`;

/**
 * `private.events_complete_since()` read once a statement (an InitPlan): called in a filter, the
 * function (not inlinable: it sets its search_path) runs for each row, a read of its table each.
 */
const SINCE = "(select private.events_complete_since())";

export type Check = { check: string; fixable: boolean; sql: string; param?: Param };

/**
 * The jobs `private.stale_<condition>` finds at $2 (now when null) with its threshold `param`
 * as $1: the id and user, then the two `columns`, ordered by the second. `--fix` ends them.
 */
function stale(check: string, param: Param, condition: string, columns: string): Check {
  return {
    check,
    fixable: true,
    param,
    sql: `select j.id, j.user_id, ${columns} from public.generation_jobs j
          where private.stale_${condition}(j, coalesce($2::timestamptz, now()), $1)
          order by 4`,
  };
}

/**
 * The report's checks, in order; each runs with `[o[param], now]` when it has a `param`.
 * Exported for bench/reconcile.ts.
 */
export const CHECKS: Check[] = [
  {
    check: "drift",
    fixable: false,
    // A user's counter (organization_id null), an organization's pool (user_id null) or a
    // member's row in one (both): docs/DESIGN.md#organizations.
    sql: "select user_id, organization_id, period_start, meter, units_used, units_expected from public.quota_drift",
  },
  // The stale conditions are the sweeper's own (private.stale_*, the functions sweep_jobs walks
  // with), so this reports exactly the jobs `--fix` ends. $2 is the time they are judged at.
  stale("active_past_max_age", "maxAgeSeconds", "past_max_age", "j.status, j.created_at"),
  stale(
    "running_lease_expired",
    "leaseGraceSeconds",
    "lease_expired",
    "j.attempts, j.lease_expires_at",
  ),
  stale(
    "queued_never_delivered",
    "undeliveredAfterSeconds",
    "undelivered",
    "j.republish_count, private.queued_due_since(j) as due_since",
  ),
  {
    check: "failed_or_canceled_without_refund",
    fixable: false,
    sql: `with ev as (${REFUND_EVENTS})
          select j.id, j.user_id, j.status, j.refunded_at, coalesce(ev.refund_events, 0)::int as refund_events
          from public.generation_jobs j
          left join ev on ev.job_id = j.id
          where j.status in ('failed', 'canceled')
            and (j.created_at < ${SINCE}
                 and j.refunded_at is null and j.refund_withheld is null
              or j.created_at >= ${SINCE}
            and ((j.refunded_at is null and not (
                   ((j.status = 'canceled' and j.refund_withheld = 'running_cancel_limit'
                     and coalesce(ev.withheld_running_cancels, 0) > 0)
                   or (j.refund_withheld = 'paid_refund_limit'
                     and coalesce(case j.status when 'failed' then ev.withheld_failures
                       else ev.withheld_cancels end, 0) > 0))))
                 or coalesce(ev.refund_events, 0) <> 1))
          order by j.created_at, j.id`,
  },
  {
    check: "running_cancel_count_mismatch",
    fixable: false,
    // A personal job's counted refund is on the user's counter, an organization job's on its
    // pool (docs/DESIGN.md#organizations).
    sql: `with counted as (
            select j.user_id, j.organization_id, j.period_start, j.meter, count(*)::int as n
            from public.job_events e join public.generation_jobs j on j.id = e.job_id
              cross join ${LEGACY}
            where ${COUNTED}
            group by j.user_id, j.organization_id, j.period_start, j.meter
          ), pooled as (
            select c.organization_id, c.period_start, c.meter, sum(c.n)::int as n
            from counted c where c.organization_id is not null
            group by c.organization_id, c.period_start, c.meter
          )
          select q.user_id, null::uuid as organization_id, q.period_start, q.meter,
            q.paid_refunds, coalesce(c.n, 0) as events
          from public.quota_usage q
          left join counted c
            on c.user_id = q.user_id and c.organization_id is null
            and c.period_start = q.period_start and c.meter = q.meter
          where q.paid_refunds <> coalesce(c.n, 0)
            and q.period_start >= ${SINCE}
          union all
          select null::uuid, o.organization_id, o.period_start, o.meter, o.paid_refunds,
            coalesce(c.n, 0)
          from public.organization_usage o
          left join pooled c on c.organization_id = o.organization_id
            and c.period_start = o.period_start and c.meter = o.meter
          where o.paid_refunds <> coalesce(c.n, 0)
            and o.period_start >= ${SINCE}`,
  },
  {
    check: "refund_after_spend_past_bound",
    fixable: false,
    // The bound is the SQL's own rule (private.refund_bound, which the cancel, the endings and
    // the usage report call), never restated here. Each ending of a job plan's job after spend,
    // in the order they took the period's counter: a counted refund must have found fewer than
    // the bound before it, a withheld one at least the bound. A plan whose bound was edited
    // inside a period shows here too (its earlier endings were judged by the old value).
    sql: `with endings as (
            select e.id, j.id as job_id, j.user_id, j.organization_id, j.period_start, j.meter,
              j.status,
              private.refund_bound(p) as bound,
              ${COUNTED} as counted,
              (j.refund_withheld is not null and e.detail ->> 'refunded' = 'false') as withheld
            from public.job_events e
            join public.generation_jobs j on j.id = e.job_id
            join public.plans p on p.id = j.plan_id
            cross join ${LEGACY}
            where j.meter = 'jobs' and e.to_status in ('failed', 'canceled')
              and e.from_status is distinct from e.to_status
              and j.period_start >= ${SINCE}
          ), ordered as (
            select x.*, count(*) filter (where x.counted) over (
              -- The counter the ending took: the user's, or (an organization job) its pool's.
              partition by x.organization_id,
                case when x.organization_id is null then x.user_id end, x.period_start, x.meter
              order by x.id
              rows between unbounded preceding and 1 preceding) as before
            from endings x
          )
          select job_id, user_id, period_start, status, before::int, bound,
            case when counted then 'refunded' else 'withheld' end as ending
          from ordered
          where (counted and before >= bound) or (withheld and before < bound)
          order by id`,
  },
  {
    check: "succeeded_with_refund",
    fixable: false,
    sql: `select j.id, j.user_id, j.refunded_at from public.generation_jobs j
          left join (select distinct e.job_id from public.job_events e
            where e.to_status in ('failed', 'canceled') and e.from_status is distinct from e.to_status) r
            on r.job_id = j.id
          where j.status = 'succeeded' and (j.refunded_at is not null or r.job_id is not null)
          order by j.created_at, j.id`,
  },
];

async function inspect(client: pg.ClientBase, o: Options): Promise<Finding[]> {
  await client.query("begin isolation level repeatable read read only");
  try {
    const findings: Finding[] = [];
    for (const c of CHECKS) {
      const { rows } = await client.query(c.sql, c.param ? [o[c.param], o.now] : []);
      if (rows.length > 0)
        findings.push({
          check: c.check,
          count: rows.length,
          rows: rows.slice(0, o.sample),
          fixable: c.fixable,
        });
    }
    return findings;
  } finally {
    await client.query("rollback");
  }
}

/** Runs the report (and the fix when asked). Never throws for findings; only for errors. */
export async function reconcile(options: ReconcileOptions): Promise<ReconcileReport> {
  const o: Options = {
    fix: false,
    now: null,
    maxAgeSeconds: 10_800,
    leaseGraceSeconds: 300,
    undeliveredAfterSeconds: 900,
    batchSize: 100,
    sample: 20,
    ...options,
  };
  const client = new pg.Client({
    connectionString: o.dbUrl,
    application_name: "quota-jobs reconcile",
  });
  await client.connect();
  try {
    await client.query("set time zone 'UTC'");
    const findings = await inspect(client, o);
    const report: ReconcileReport = {
      checkedAt: new Date().toISOString(),
      findings,
      ok: findings.length === 0,
    };
    if (!o.fix || !findings.some((f) => f.fixable)) return report;

    const fixed = { batches: 0, failed: {} as Record<string, number>, markedForRepublish: 0 };
    for (let more = true; more && fixed.batches < 1000; ) {
      const { rows } = await client.query<{
        r: { failed: Array<{ reason: string }>; republish: unknown[]; more: boolean };
      }>(
        `select public.sweep_jobs(
           p_now => coalesce($5::timestamptz, now()),
           p_batch_size => $1, p_lease_grace_seconds => $2, p_undelivered_after_seconds => $3,
           p_max_age_seconds => $4, p_max_republish => 0) as r`,
        [o.batchSize, o.leaseGraceSeconds, o.undeliveredAfterSeconds, o.maxAgeSeconds, o.now],
      );
      const r = rows[0]?.r;
      if (!r) break;
      fixed.batches++;
      for (const f of r.failed) fixed.failed[f.reason] = (fixed.failed[f.reason] ?? 0) + 1;
      fixed.markedForRepublish += r.republish.length;
      more = r.more;
    }
    report.fixed = fixed;
    report.after = await inspect(client, o);
    report.ok = report.after.length === 0;
    return report;
  } finally {
    await client.end();
  }
}

/** The flags that take a whole number, and the option each sets. */
const NUMBER_FLAGS: Record<string, Param | "batchSize"> = {
  "--max-age-seconds": "maxAgeSeconds",
  "--lease-grace-seconds": "leaseGraceSeconds",
  "--undelivered-after-seconds": "undeliveredAfterSeconds",
  "--batch-size": "batchSize",
};

function parseArgs(argv: string[]): ReconcileOptions & { json: boolean } {
  const out: ReconcileOptions & { json: boolean } = {
    dbUrl: process.env.DATABASE_URL ?? "",
    json: false,
  };
  const num = (name: string, v: string | undefined) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`${name} needs a whole number`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a?.startsWith("--") && a.includes("=") ? a.split(/=(.*)/s) : [a];
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case "--db-url":
        out.dbUrl = value() ?? "";
        break;
      case "--fix":
        out.fix = true;
        break;
      case "--json":
        out.json = true;
        break;
      default: {
        const option = flag === undefined ? undefined : NUMBER_FLAGS[flag];
        if (!option) throw new Error(`unknown argument ${a}`);
        out[option] = num(flag as string, value());
      }
    }
  }
  if (!out.dbUrl) throw new Error("--db-url postgres://... (or DATABASE_URL) is required");
  return out;
}

function describe(findings: Finding[]): string {
  if (findings.length === 0) return "  nothing found";
  return findings
    .map(
      (f) =>
        `  ${f.check}: ${f.count}${f.fixable ? " (--fix ends these with the sweeper's transition)" : ""}\n` +
        f.rows.map((r) => `    ${JSON.stringify(r)}`).join("\n"),
    )
    .join("\n");
}

export async function main(argv: string[]): Promise<number> {
  let args: ReturnType<typeof parseArgs>;
  try {
    args = parseArgs(argv);
  } catch (error) {
    process.stderr.write(`reconcile: ${(error as Error).message}\n`);
    return 2;
  }
  let report: ReconcileReport;
  try {
    report = await reconcile(args);
  } catch (error) {
    process.stderr.write(`reconcile: ${(error as Error).message}\n`);
    return 2;
  }
  if (args.json) {
    process.stdout.write(`${JSON.stringify(report)}\n`);
  } else {
    process.stdout.write(
      `reconcile (${report.checkedAt}, read only):\n${describe(report.findings)}\n`,
    );
    if (report.fixed) {
      process.stdout.write(
        `fixed with public.sweep_jobs in ${report.fixed.batches} batch(es): ${JSON.stringify(report.fixed.failed)}\n` +
          `after the fix:\n${describe(report.after ?? [])}\n`,
      );
    }
  }
  return report.ok ? 0 : 1;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main(process.argv.slice(2)).then((code) => {
    process.exitCode = code;
  });
}
