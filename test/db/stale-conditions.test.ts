/**
 * The stale-job conditions are defined once (private.stale_past_max_age, stale_lease_expired and
 * stale_undelivered, supabase/migrations/20261201060000_stale_conditions.sql) and used by both the
 * sweeper and ops/reconcile.ts. Two things must hold:
 * - reconcile reports exactly the jobs the sweeper ends, reason by reason, at the boundary too;
 * - the sweep's three walks stay ordered walks of their partial indexes (no seq scan, no sort),
 *   which needs PostgreSQL to inline the condition functions. The plans are those of the walks
 *   inside sweep_jobs as it runs (auto_explain, nested statements), on a table big enough that
 *   without the index the planner scans it all and sorts, as the last test shows.
 */
import pg from "pg";
import { beforeAll, describe, expect, test } from "vitest";
import { reconcile } from "../../ops/reconcile.ts";
import { addSeconds, at, databaseUrl, expectNoDrift, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

// Both halves look at every job in the database: a database of our own.
const db = dbFixture({ fresh: true, noDrift: "never" });
const { svc, admin } = db;

const MAX_AGE = 10_800;
const GRACE = 300;
const UNDELIVERED = 900;
const limits = {
  p_lease_grace_seconds: GRACE,
  p_undelivered_after_seconds: UNDELIVERED,
  p_max_age_seconds: MAX_AGE,
};

async function sweepAll(now: Date, maxRepublish: number) {
  const ended: Record<string, string[]> = {};
  const republished: string[] = [];
  for (;;) {
    const r = await rpc(svc, "sweep_jobs", {
      ...limits,
      p_now: now,
      p_batch_size: 3,
      p_max_republish: maxRepublish,
    });
    for (const f of r.failed as { id: string; reason: string }[])
      ended[f.reason] = [...(ended[f.reason] ?? []), f.id];
    for (const j of r.republish as { id: string }[]) republished.push(j.id);
    if (!r.more) return { ended, republished };
  }
}

describe("reconcile and the sweeper judge stale jobs by the same conditions", () => {
  test("backdated jobs in each condition and at each boundary: reconcile's checks list exactly the ids sweep_jobs ends for that reason", async () => {
    const T = at("2026-02-01T00:00:00Z");
    const ms = (d: Date, n: number) => new Date(d.getTime() + n);
    const enqueue = async (when: Date) => {
      const user = await db.user("pro");
      const r = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "p", p_now: when });
      expect(r.outcome).toBe("enqueued");
      return r.job.id as string;
    };
    const running = async (created: Date, leaseEnds: Date) => {
      const id = await enqueue(created);
      const startAt = addSeconds(leaseEnds, -90);
      expect(startAt >= created).toBe(true);
      await rpc(svc, "start_job", { p_job_id: id, p_lease_seconds: 90, p_now: startAt });
      return id;
    };
    const waiting = async (resumeAt: Date) => {
      // Claimed, hit the provider's quota at T - 1500 s, waiting to resume at resumeAt.
      const id = await running(addSeconds(T, -2000), addSeconds(T, -1500 + 90));
      const r = await rpc(svc, "requeue_job", {
        p_job_id: id,
        p_attempt: 1,
        p_resume_at: resumeAt,
        p_now: addSeconds(T, -1500),
      });
      expect(r.outcome).toBe("requeued");
      return id;
    };
    const maxAgeAt = addSeconds(T, -MAX_AGE);
    const leaseAt = addSeconds(T, -GRACE);
    const dueAt = addSeconds(T, -UNDELIVERED);

    // Past the max age (running with a live lease: no other condition).
    const old = await running(ms(maxAgeAt, -1), addSeconds(T, 60));
    const oldEdge = await running(maxAgeAt, addSeconds(T, 60));
    // A lease expired more than the grace ago.
    const dead = await running(addSeconds(T, -3000), ms(leaseAt, -1));
    const deadEdge = await running(addSeconds(T, -3000), leaseAt);
    // Queued and never delivered, by queued_at and by resume_at (which wins over queued_at).
    const lost = await enqueue(ms(dueAt, -1));
    const lostEdge = await enqueue(dueAt);
    const lostAfterWait = await waiting(ms(dueAt, -1));
    const lostAfterWaitEdge = await waiting(dueAt);
    // In two conditions: reconcile lists it under both, the sweeper ends it for the first.
    const oldAndLost = await enqueue(ms(maxAgeAt, -1));
    const oldAndDead = await running(ms(maxAgeAt, -1), ms(leaseAt, -1));

    const report = await reconcile({ dbUrl: databaseUrl(), now: T, sample: 1000 });
    const listed = (check: string) =>
      (report.findings.find((f) => f.check === check)?.rows ?? []).map((r) => r.id as string);
    const reported = {
      max_age_exceeded: listed("active_past_max_age"),
      lease_expired: listed("running_lease_expired"),
      undelivered: listed("queued_never_delivered"),
    };

    const { ended, republished } = await sweepAll(T, 1);
    const swept = {
      max_age_exceeded: ended.max_age_exceeded ?? [],
      lease_expired: ended.lease_expired ?? [],
      undelivered: [...republished, ...(ended.never_delivered ?? [])],
    };

    const sorted = (ids: string[]) => [...ids].sort();
    expect(Object.fromEntries(Object.entries(reported).map(([k, v]) => [k, sorted(v)]))).toEqual({
      max_age_exceeded: sorted([old, oldAndLost, oldAndDead]),
      lease_expired: sorted([dead, oldAndDead]),
      undelivered: sorted([lost, lostAfterWait, oldAndLost]),
    });
    // The sweeper's walks run in this order; a job is ended by the first that finds it.
    const first = new Set<string>();
    const expected: Record<string, string[]> = {};
    for (const [reason, ids] of Object.entries(reported)) {
      expected[reason] = sorted(ids.filter((id) => !first.has(id)));
      for (const id of ids) first.add(id);
    }
    expect(Object.fromEntries(Object.entries(swept).map(([k, v]) => [k, sorted(v)]))).toEqual(
      expected,
    );
    expect(swept.undelivered).not.toContain(oldAndLost);
    expect(swept.lease_expired).not.toContain(oldAndDead);

    // The jobs at the boundary are in no condition (none is in a list above): still active.
    const { rows } = await admin.query(
      "select status from public.generation_jobs where id = any($1)",
      [[oldEdge, deadEdge, lostEdge, lostAfterWaitEdge]],
    );
    expect(rows.map((r) => r.status).sort()).toEqual(["queued", "queued", "running", "running"]);

    await expectNoDrift(admin);
    // Leave nothing active for the plans below.
    await sweepAll(at("2100-01-01T00:00:00Z"), 0);
    await expectNoDrift(admin);
  });
});

// ---------------------------------------------------------------------------------------------

const T2 = at("2026-06-01T00:00:00Z");
const WALKS = [
  { condition: "stale_past_max_age", index: "generation_jobs_active_created" },
  { condition: "stale_lease_expired", index: "generation_jobs_running_lease" },
  { condition: "stale_undelivered", index: "generation_jobs_queued_since" },
] as const;

type PlanNode = { "Node Type": string; "Index Name"?: string; Plans?: PlanNode[] };
type Walk = { condition: string; nodes: string[]; indexes: string[] };

function flatten(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(flatten)];
}

/**
 * 40,000 finished jobs over the past year, 2,000 active and fresh, and 30 in each stale
 * condition (90: one sweep batch of the default 100 reaches every walk) (each unit held in quota_usage, so the sweep can refund them), then ANALYZE.
 */
async function seedBigTable() {
  await admin.query(
    `with src as (
       select i,
         ('00000000-0000-4000-8000-' || lpad((i % 500)::text, 12, '0'))::uuid as user_id,
         case
           when i <= 40000 then 'canceled'
           when i <= 42000 then case when i % 2 = 0 then 'queued' else 'running' end
           when i <= 42030 then 'old'
           when i <= 42060 then 'dead'
           else 'lost' end as kind
       from generate_series(1, 42090) i
     ), timed as (
       select i, user_id,
         case kind when 'old' then 'running' when 'dead' then 'running' when 'lost' then 'queued'
           else kind end as status,
         case kind
           when 'canceled' then $1::timestamptz - make_interval(days => i % 365, secs => i % 86400)
           when 'old' then $1::timestamptz - interval '4 hours' - make_interval(secs => i % 600)
           when 'dead' then $1::timestamptz - interval '1 hour' - make_interval(secs => i % 600)
           when 'lost' then $1::timestamptz - interval '1 hour' - make_interval(secs => i % 600)
           else $1::timestamptz - interval '2 minutes' end as created_at,
         case kind
           when 'dead' then $1::timestamptz - interval '30 minutes' - make_interval(secs => i % 600)
           else $1::timestamptz + interval '1 minute' end as lease_end
       from src
     )
     insert into public.generation_jobs (
       user_id, status, prompt, request_hash, plan_id, period_start, attempts, lease_expires_at,
       created_at, queued_at, started_at, finished_at, refunded_at, captured, updated_at)
     select user_id, status, 'plan ' || i, md5(i::text), 'pro',
       date_trunc('month', created_at at time zone 'UTC') at time zone 'UTC',
       case when status = 'queued' then 0 else 1 end,
       case when status = 'running' then lease_end end,
       created_at, created_at,
       case when status <> 'queued' then created_at end,
       case when status = 'canceled' then created_at + interval '30 s' end,
       case when status = 'canceled' then created_at + interval '30 s' end,
       case when status = 'canceled' then 0 end,
       created_at
     from timed`,
    [T2],
  );
  await admin.query(`
    insert into public.quota_usage (user_id, period_start, meter, units_used)
    select user_id, period_start, meter, sum(hold) from public.generation_jobs
    where status in ('queued', 'running') group by user_id, period_start, meter
    on conflict (user_id, period_start, meter)
      do update set units_used = public.quota_usage.units_used + excluded.units_used`);
  await admin.query("analyze public.generation_jobs");
}

/**
 * Runs sweep_jobs as the sweeper does (the service role), in a transaction rolled back, and
 * returns the plan of each of its three walks, as auto_explain logged them. `before` runs first
 * in the same transaction (as the superuser).
 */
async function walkPlans(mode: "force_custom_plan" | "force_generic_plan", before = "") {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  const plans: { text: string; plan: PlanNode }[] = [];
  client.on("notice", (msg) => {
    const m = msg.message ?? "";
    const start = m.indexOf("{");
    if (!m.includes("Query Text") || start < 0) return;
    const parsed = JSON.parse(m.slice(start)) as { "Query Text": string; Plan: PlanNode };
    plans.push({ text: parsed["Query Text"], plan: parsed.Plan });
  });
  try {
    await client.query(`load 'auto_explain';
      set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on;
      set auto_explain.log_level = notice; set auto_explain.log_format = json;
      set plan_cache_mode = ${mode}`);
    await client.query("begin");
    if (before) await client.query(before);
    await client.query("set local role service_role");
    const { rows } = await client.query(
      `select public.sweep_jobs(p_now => $1,
         p_lease_grace_seconds => $2, p_undelivered_after_seconds => $3, p_max_age_seconds => $4) r`,
      [T2, GRACE, UNDELIVERED, MAX_AGE],
    );
    const r = rows[0].r as { failed: { reason: string }[]; republish: unknown[] };
    // Each walk found its 30 (or the plans below would be of walks that did nothing).
    expect({
      max_age_exceeded: r.failed.filter((f) => f.reason === "max_age_exceeded").length,
      lease_expired: r.failed.filter((f) => f.reason === "lease_expired").length,
      republish: r.republish.length,
    }).toEqual({ max_age_exceeded: 30, lease_expired: 30, republish: 30 });
    await client.query("rollback");
  } finally {
    await client.end();
  }
  return WALKS.map((w): Walk => {
    const mine = plans.filter(
      (p) => p.text.includes(`private.${w.condition}(`) && /for update skip locked/i.test(p.text),
    );
    expect(mine, `one logged plan of the ${w.condition} walk`).toHaveLength(1);
    const nodes = flatten((mine[0] as { plan: PlanNode }).plan);
    return {
      condition: w.condition,
      nodes: nodes.map((n) => n["Node Type"]),
      indexes: nodes.flatMap((n) => (n["Index Name"] ? [n["Index Name"]] : [])),
    };
  });
}

const asWalked = (w: Walk) => ({
  condition: w.condition,
  indexes: w.indexes,
  seqScan: w.nodes.includes("Seq Scan"),
  sort: w.nodes.some((n) => n.endsWith("Sort")),
  indexScan: w.nodes.some((n) => n === "Index Scan" || n === "Index Only Scan"),
});

describe("the sweep's walks stay ordered walks of their partial indexes", () => {
  beforeAll(seedBigTable);

  test("the condition functions are inlinable: language sql, no SET clause, security invoker, executable by the service role", async () => {
    const { rows } = await admin.query(
      `select p.proname, l.lanname, p.proconfig, p.prosecdef,
         has_function_privilege('service_role', p.oid, 'EXECUTE') as service_role
       from pg_proc p join pg_language l on l.oid = p.prolang
       where p.pronamespace = 'private'::regnamespace
         and p.proname in ('stale_past_max_age', 'stale_lease_expired', 'stale_undelivered', 'queued_due_since')
       order by p.proname`,
    );
    expect(rows).toEqual(
      ["queued_due_since", "stale_lease_expired", "stale_past_max_age", "stale_undelivered"].map(
        (proname) => ({
          proname,
          lanname: "sql",
          proconfig: null,
          prosecdef: false,
          service_role: true,
        }),
      ),
    );
  });

  test.each(["force_custom_plan", "force_generic_plan"] as const)(
    "each walk (%s) is an index scan of its own index, no seq scan, no sort: the condition functions are inlined",
    async (mode) => {
      const walks = await walkPlans(mode);
      expect(walks.map(asWalked)).toEqual(
        WALKS.map((w) => ({
          condition: w.condition,
          indexes: [w.index],
          seqScan: false,
          sort: false,
          indexScan: true,
        })),
      );
    },
  );

  test("the check has teeth: a condition function with a search_path setting is not inlined, and its walk loses its partial index", async () => {
    const alter = WALKS.map(
      (w) =>
        `alter function private.${w.condition}(public.generation_jobs, timestamptz, integer) set search_path = ''`,
    ).join(";");
    const walks = (await walkPlans("force_custom_plan", alter)).map(asWalked);
    // Without its inlined predicate, no walk can use its own partial index: it reads the whole
    // table, by a seq scan or through a full index over created_at (the operator page's), with
    // the condition as a filter on every row.
    expect(walks.map((w) => w.condition)).toEqual(WALKS.map((w) => w.condition));
    walks.forEach((w, i) => {
      expect(w.indexes).not.toContain(WALKS[i]?.index);
      expect(w.seqScan || w.indexes.length > 0).toBe(true);
    });
  });
});
