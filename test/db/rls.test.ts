import type pg from "pg";
import { describe, expect, test } from "vitest";
import { KIND_IDS } from "../../lib/kinds/index.ts";
import { rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { enqueueIn, join, newOrganization, orgPlan } from "../support/organizations.ts";

// Row level security with real role switching, the way PostgREST runs a user's request:
// transaction-local request.jwt.claims and `set local role`. A database of its own, so the list of
// functions it checks holds only ours.
const db = dbFixture({ fresh: true, noDrift: "file" });
const { admin } = db;

async function as<T>(
  role: "anon" | "authenticated",
  sub: string | null,
  fn: (c: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await admin.connect();
  try {
    await client.query("begin");
    const claims = JSON.stringify(sub ? { sub, role, aud: "authenticated" } : { role });
    await client.query("select set_config('request.jwt.claims', $1, true)", [claims]);
    await client.query(`set local role ${role}`);
    return await fn(client);
  } finally {
    await client.query("rollback");
    client.release();
  }
}

async function userWithJob() {
  const user = await db.user("pro");
  const job = await db.enqueued(user, { prompt: `secret of ${user}` });
  return { user, jobId: job.id as string };
}

describe("row level security", () => {
  test("a signed-in user reads only their own jobs, usage, events and plan", async () => {
    const a = await userWithJob();
    const b = await userWithJob();
    const seen = await as("authenticated", a.user, async (c) => ({
      jobs: (await c.query("select id, user_id from public.generation_jobs")).rows,
      usage: (await c.query("select user_id from public.quota_usage")).rows,
      events: (await c.query("select distinct user_id from public.job_events")).rows,
      plans: (await c.query("select user_id from public.user_plans")).rows,
      bJob: (await c.query("select id from public.generation_jobs where id = $1", [b.jobId])).rows,
    }));
    expect(seen.jobs).toEqual([{ id: a.jobId, user_id: a.user }]);
    expect(seen.usage).toEqual([{ user_id: a.user }]);
    expect(seen.events).toEqual([{ user_id: a.user }]);
    expect(seen.plans).toEqual([{ user_id: a.user }]);
    expect(seen.bJob).toEqual([]);
  });

  test("a signed-in user reads only their own jobs' streamed text", async () => {
    const streaming = async () => {
      const a = await userWithJob();
      await db.started(a.jobId);
      const r = await rpc(db.svc, "record_progress", {
        p_job_id: a.jobId,
        p_attempt: 1,
        p_offset: 0,
        p_text: `text of ${a.user}`,
        p_completion_tokens: 3,
      });
      expect(r.outcome).toBe("recorded");
      return a;
    };
    const a = await streaming();
    const b = await streaming();
    const seen = await as(
      "authenticated",
      a.user,
      async (c) => (await c.query("select job_id, text from public.job_output_chunks")).rows,
    );
    expect(seen).toEqual([{ job_id: a.jobId, text: `text of ${a.user}` }]);
    expect(seen).not.toContainEqual(expect.objectContaining({ job_id: b.jobId }));
  });

  test("plans are readable by signed-in users", async () => {
    const a = await userWithJob();
    const plans = await as(
      "authenticated",
      a.user,
      async (c) => (await c.query("select id from public.plans order by id")).rows,
    );
    expect(plans.map((p) => p.id)).toEqual(["economy", "free", "none", "pro", "team"]);
  });

  test("the job kinds and what each plan offers are readable by signed-in users", async () => {
    const a = await userWithJob();
    const seen = await as("authenticated", a.user, async (c) => ({
      kinds: (await c.query("select id from public.job_kinds order by id")).rows,
      offers: (
        await c.query(
          "select plan_id, kind, units from public.plan_kinds where plan_id in ('free', 'pro') order by 1, 2",
        )
      ).rows,
    }));
    expect(seen.kinds.map((k) => k.id)).toEqual([...KIND_IDS].sort());
    expect(seen.offers).toEqual([
      { plan_id: "free", kind: "document", units: 1 },
      { plan_id: "pro", kind: "document", units: 1 },
      { plan_id: "pro", kind: "extract", units: 2 },
      { plan_id: "pro", kind: "summary", units: 1 },
    ]);
  });

  test.each([
    [
      "insert a job",
      "insert into public.generation_jobs (user_id, prompt, request_hash, plan_id, period_start, created_at, queued_at, updated_at) values ((select auth.uid()), 'x', 'h', 'free', now(), now(), now(), now())",
    ],
    [
      "update their job",
      "update public.generation_jobs set status = 'canceled' where user_id = (select auth.uid())",
    ],
    ["delete their job", "delete from public.generation_jobs where user_id = (select auth.uid())"],
    [
      "reset their usage",
      "update public.quota_usage set units_used = 0 where user_id = (select auth.uid())",
    ],
    [
      "give themselves a plan",
      "insert into public.user_plans (user_id, plan_id) values ((select auth.uid()), 'pro')",
    ],
    [
      "write an event",
      "insert into public.job_events (job_id, user_id, at, event, to_status) select id, user_id, now(), 'x', 'queued' from public.generation_jobs limit 1",
    ],
  ])("no signed-in user can %s", async (_name, sql) => {
    const a = await userWithJob();
    await expect(as("authenticated", a.user, (c) => c.query(sql))).rejects.toMatchObject({
      code: "42501",
    });
  });

  test("no signed-in user can call a transition function (cancel someone's job, enqueue for free)", async () => {
    const a = await userWithJob();
    await expect(
      as("authenticated", a.user, (c) =>
        c.query("select public.cancel_job($1, $2)", [a.jobId, a.user]),
      ),
    ).rejects.toMatchObject({ code: "42501" });
    await expect(
      as("authenticated", a.user, (c) => c.query("select public.enqueue_job($1, 'x')", [a.user])),
    ).rejects.toMatchObject({ code: "42501" });
    await expect(
      as("authenticated", a.user, (c) => c.query("select * from public.quota_drift")),
    ).rejects.toMatchObject({ code: "42501" });
  });

  test("anon sees nothing and calls nothing", async () => {
    await userWithJob();
    for (const table of [
      "generation_jobs",
      "quota_usage",
      "job_events",
      "job_output_chunks",
      "user_plans",
      "plans",
      "job_kinds",
      "plan_kinds",
    ]) {
      await expect(
        as("anon", null, (c) => c.query(`select * from public.${table}`)),
      ).rejects.toMatchObject({ code: "42501" });
    }
    await expect(
      as("anon", null, (c) => c.query("select public.get_usage(gen_random_uuid())")),
    ).rejects.toMatchObject({ code: "42501" });
  });

  test("the service role calls every transition", async () => {
    const fns = await admin.query(`
      select p.proname, has_function_privilege('service_role', p.oid, 'execute') as service,
             has_function_privilege('authenticated', p.oid, 'execute') as authed,
             has_function_privilege('anon', p.oid, 'execute') as anon
      from pg_proc p join pg_namespace n on n.oid = p.pronamespace
      where n.nspname = 'public' order by p.proname`);
    expect(fns.rows.map((r) => r.proname)).toEqual([
      "accept_invitation",
      "cancel_job",
      "complete_job",
      "create_invitation",
      "delete_organization",
      "enqueue_job",
      "erase_user",
      "export_user",
      "fail_job",
      "get_job",
      "get_usage",
      "list_jobs",
      "maintain_job_events",
      "my_organizations",
      "ops_failure_reasons",
      "ops_job_series",
      "ops_latency_series",
      "ops_metrics",
      "ops_now",
      "ops_plans",
      "ops_provider_series",
      "organization_overview",
      "plan_worst_case",
      "record_attempt_usage",
      "record_model_catalogue",
      "record_progress",
      "release_job",
      "remove_member",
      "requeue_job",
      "retention_batch",
      "retention_run",
      "revoke_invitation",
      "set_member_cap",
      "start_job",
      "sweep_jobs",
      "user_pseudonym",
      "watched_models",
    ]);
    for (const row of fns.rows)
      expect(row).toMatchObject({ service: true, authed: false, anon: false });
  });

  test("realtime.messages: a user may read job:<their id> only, and write no topic", async () => {
    const { rows } = await admin.query(
      `select c.relrowsecurity as rls, array(select p.policyname::text from pg_policies p
                where p.schemaname = 'realtime' and p.tablename = 'messages') as policies
         from pg_class c where c.oid = 'realtime.messages'::regclass`,
    );
    expect(rows).toEqual([{ rls: true, policies: ["a user hears their own jobs' states"] }]);
    const [user, other] = [await db.user(), await db.user()];
    for (const topic of [`job:${user}`, `job:${other}`])
      await admin.query(
        "insert into realtime.messages (topic, extension, event, payload) values ($1, 'broadcast', 'e', '{}')",
        [topic],
      );
    // Realtime sets realtime.topic to the channel's topic before it reads (dev/realtime/authorize.ts).
    const visible = (topic: string) =>
      as("authenticated", user, async (c) => {
        await c.query("select set_config('realtime.topic', $1, true)", [topic]);
        const r = await c.query(
          "select count(*)::int as n from realtime.messages where topic = $1",
          [topic],
        );
        return r.rows[0].n;
      });
    expect(await visible(`job:${user}`)).toBe(1);
    expect(await visible(`job:${other}`)).toBe(0);
    const write = await as("authenticated", user, async (c) => {
      await c.query("select set_config('realtime.topic', $1, true)", [`job:${user}`]);
      return c
        .query("insert into realtime.messages (topic, extension) values ($1, 'broadcast')", [
          `job:${user}`,
        ])
        .then(
          () => "written",
          (e: { code?: string }) => e.code,
        );
    });
    expect(write).toBe("42501");
  });

  test("organizations: a member reads their organization, own membership and usage; an owner or admin also the members and the pool; nobody another member's jobs", async () => {
    const plan = await orgPlan(admin, "rls_team", { units: 10 });
    const [org, elsewhere] = [
      await newOrganization(admin, plan),
      await newOrganization(admin, plan),
    ];
    const [owner, admin1, member, other] = await Promise.all(
      Array.from({ length: 4 }, () => db.user()),
    );
    await join(admin, org, owner as string, "owner");
    await join(admin, org, admin1 as string, "admin");
    await join(admin, org, member as string, "member", 3);
    await join(admin, elsewhere, other as string, "owner");
    const jobs: Record<string, string> = {};
    for (const u of [owner, member, other] as string[]) {
      const r = await enqueueIn(db.svc, u, u === other ? elsewhere : org);
      expect(r.outcome).toBe("enqueued");
      jobs[u] = r.job.id;
    }
    const read = (user: string) =>
      as("authenticated", user, async (c) => ({
        orgs: (await c.query("select id from public.organizations")).rows.map((r) => r.id),
        members: (
          await c.query("select user_id from public.organization_members order by user_id")
        ).rows.map((r) => r.user_id),
        pools: (await c.query("select organization_id from public.organization_usage")).rows.map(
          (r) => r.organization_id,
        ),
        usage: (
          await c.query("select user_id from public.organization_member_usage order by user_id")
        ).rows.map((r) => r.user_id),
        jobs: (await c.query("select id from public.generation_jobs")).rows.map((r) => r.id),
      }));
    const sorted = (xs: (string | undefined)[]) => (xs as string[]).slice().sort();
    for (const manager of [owner, admin1] as string[]) {
      const seen = await read(manager);
      expect(seen.orgs).toEqual([org]);
      expect(seen.members).toEqual(sorted([owner, admin1, member]));
      expect(seen.pools).toEqual([org]);
      expect(seen.usage).toEqual(sorted([owner, member]));
      // Jobs stay their owner's, even to an owner of the organization.
      expect(seen.jobs).toEqual(manager === owner ? [jobs[owner as string]] : []);
    }
    expect(await read(member as string)).toEqual({
      orgs: [org],
      members: [member],
      pools: [],
      usage: [member],
      jobs: [jobs[member as string]],
    });
    const outsider = await read(other as string);
    expect(outsider.orgs).toEqual([elsewhere]);
    expect(outsider.members).toEqual([other]);
    expect(outsider.jobs).toEqual([jobs[other as string]]);
    // No one writes them: a member cannot raise their cap or empty the pool.
    for (const sql of [
      "update public.organization_members set cap = null",
      "update public.organization_usage set units_used = 0",
      "insert into public.organization_members (organization_id, user_id, role) values (gen_random_uuid(), (select auth.uid()), 'owner')",
    ])
      await expect(as("authenticated", owner as string, (c) => c.query(sql))).rejects.toMatchObject(
        { code: "42501" },
      );
  });

  test("every table has row level security on", async () => {
    const rows = await admin.query(
      "select c.relname, c.relrowsecurity from pg_class c join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'public' and c.relkind in ('r', 'p') order by 1",
    );
    const secured = [
      "erased_usage",
      "generation_jobs",
      "job_events",
      "job_kinds",
      "job_output_chunks",
      "model_tiers",
      "models",
      "organization_invitations",
      "organization_member_usage",
      "organization_members",
      "organization_usage",
      "organizations",
      "plan_kinds",
      "plans",
      "quota_usage",
      "superseded_callbacks",
      "user_plans",
    ];
    expect(rows.rows).toEqual(secured.map((relname) => ({ relname, relrowsecurity: true })));
  });
});
