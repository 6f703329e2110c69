import { describe, expect, test } from "vitest";
import { addSeconds, at, expectNoDrift, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import {
  enqueueIn,
  join,
  members,
  memberUsage,
  newOrganization,
  orgPlan,
  pool,
} from "../support/organizations.ts";

// Organizations (docs/DESIGN.md#organizations): one pool per organization and period, a cap per
// member, raced by real concurrent connections on the real database. The assertion is the limit,
// read from the database after every round, and no drift (pools and members included).
const ROUNDS = 30;
const db = dbFixture({ fresh: true, service: 50, noDrift: "file" });
const { svc, admin } = db;

function tally(results: { outcome: string }[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { outcome } of results) counts[outcome] = (counts[outcome] ?? 0) + 1;
  return counts;
}

const T = at("2031-03-01T00:00:00Z");

describe("organizations: one pool, a cap per member, raced", () => {
  test(`24 members enqueuing at once (2 requests each, cap 1) on a pool with room for 7: exactly 7 held (${ROUNDS} rounds)`, async () => {
    const plan = await orgPlan(admin, "org_seven", { units: 7, maxActive: 5 });
    for (let round = 0; round < ROUNDS; round++) {
      const org = await newOrganization(admin, plan);
      const users = await members(admin, org, 24, 1);
      const results = await Promise.all(
        users.flatMap((u) => [enqueueIn(svc, u, org), enqueueIn(svc, u, org)]),
      );
      const counts = tally(results);
      expect(counts.enqueued ?? 0).toBe(7);
      for (const o of Object.keys(counts))
        expect(["enqueued", "pool_exhausted", "member_cap_reached"]).toContain(o);
      expect((await pool(admin, org)).units_used).toBe(7);
      const perMember = await memberUsage(admin, org);
      expect(Object.values(perMember).every((n) => n <= 1)).toBe(true);
      expect(Object.values(perMember).reduce((a, b) => a + b, 0)).toBe(7);
      const { rows } = await admin.query(
        `select count(*)::int as jobs, count(distinct user_id)::int as members,
           (select count(*)::int from public.quota_usage where user_id = any($2)) as personal
         from public.generation_jobs where organization_id = $1`,
        [org, users],
      );
      // 7 jobs of 7 members, and no member's own quota touched.
      expect(rows[0]).toEqual({ jobs: 7, members: 7, personal: 0 });
    }
    await expectNoDrift(admin);
  });

  test(`a member of two organizations racing in both: each pool exact (${ROUNDS} rounds)`, async () => {
    const planA = await orgPlan(admin, "org_four", { units: 4, maxActive: 5 });
    const planB = await orgPlan(admin, "org_six", { units: 6, maxActive: 5 });
    for (let round = 0; round < ROUNDS; round++) {
      const [a, b] = [await newOrganization(admin, planA), await newOrganization(admin, planB)];
      const users = await members(admin, a, 8);
      for (const u of users) await join(admin, b, u);
      const results = await Promise.all(
        users.flatMap((u) =>
          [a, a, a, b, b, b].map((org) => enqueueIn(svc, u, org).then((r) => ({ org, ...r }))),
        ),
      );
      const held = (org: string) =>
        results.filter((r) => r.org === org && r.outcome === "enqueued").length;
      expect([held(a), held(b)]).toEqual([4, 6]);
      expect([(await pool(admin, a)).units_used, (await pool(admin, b)).units_used]).toEqual([
        4, 6,
      ]);
      expect(results.every((r) => r.outcome === "enqueued" || r.outcome === "pool_exhausted")).toBe(
        true,
      );
    }
    await expectNoDrift(admin);
  });

  test(`running jobs of 5 members canceled at once: the organization's bound of refunds after spend, counted on the pool (${ROUNDS} rounds)`, async () => {
    const plan = await orgPlan(admin, "org_bound_two", {
      units: 100,
      maxActive: 5,
      maxPaidRefunds: 2,
    });
    for (let round = 0; round < ROUNDS; round++) {
      const org = await newOrganization(admin, plan);
      const users = await members(admin, org, 5);
      const jobs: { id: string; user: string }[] = [];
      for (const u of users) {
        const r = await enqueueIn(svc, u, org);
        await rpc(svc, "start_job", { p_job_id: r.job.id, p_lease_seconds: 90 });
        jobs.push({ id: r.job.id, user: u });
      }
      const results = await Promise.all(
        jobs.map((j) => rpc(svc, "cancel_job", { p_job_id: j.id, p_user_id: j.user })),
      );
      expect(results.every((r) => r.outcome === "canceled")).toBe(true);
      expect(results.filter((r) => r.refunded)).toHaveLength(2);
      expect(await pool(admin, org)).toMatchObject({ units_used: 3, paid_refunds: 2 });
      const perMember = await memberUsage(admin, org);
      expect(Object.values(perMember).sort()).toEqual([0, 0, 1, 1, 1]);
    }
    await expectNoDrift(admin);
  });

  test(`complete, cancel, fail, the failure callback, the sweeper, new enqueues and an erasure racing across two pools: no deadlock, no drift (${ROUNDS} rounds)`, async () => {
    const plan = await orgPlan(admin, "org_wide", { units: 10000, maxActive: 10 });
    const tokens = await orgPlan(admin, "org_tokens", {
      units: 1000000,
      maxActive: 10,
      meter: "tokens",
    });
    for (let round = 0; round < ROUNDS; round++) {
      const now = addSeconds(T, round * 100000);
      const [a, b] = [await newOrganization(admin, plan), await newOrganization(admin, tokens)];
      const users = await members(admin, a, 6, 50);
      for (const u of users) await join(admin, b, u, "member", 20000);
      const leaving = users[5] as string;
      const jobs: { id: string; user: string; running: boolean }[] = [];
      for (const u of users)
        for (const org of [a, b, a, b]) {
          const r = await enqueueIn(svc, u, org, { p_now: now, p_prompt_tokens: 100 });
          expect(r.outcome).toBe("enqueued");
          const running = jobs.length % 2 === 0;
          if (running)
            await rpc(svc, "start_job", { p_job_id: r.job.id, p_lease_seconds: 90, p_now: now });
          jobs.push({ id: r.job.id, user: u, running });
        }
      const later = addSeconds(now, 90 + 301);
      const usage = { prompt_tokens: 100, completion_tokens: 40, source: "counted" };
      const calls = jobs.flatMap((j, i) => {
        const complete = rpc(svc, "complete_job", {
          p_job_id: j.id,
          p_attempt: 1,
          p_output: "done",
          p_now: later,
          p_usage: usage,
        });
        const cancel = rpc(svc, "cancel_job", { p_job_id: j.id, p_user_id: j.user, p_now: later });
        const fail = rpc(svc, "fail_job", {
          p_job_id: j.id,
          p_reason: "delivery_failed",
          p_now: later,
        });
        return i % 3 === 0 ? [complete, cancel] : i % 3 === 1 ? [cancel, fail] : [fail, complete];
      });
      const settled = await Promise.allSettled([
        ...calls,
        rpc(svc, "sweep_jobs", { p_now: later }),
        ...users.flatMap((u) => [
          enqueueIn(svc, u, a, { p_now: later }),
          enqueueIn(svc, u, b, { p_now: later, p_prompt_tokens: 100 }),
        ]),
        admin.query("select private.erase_user_data($1, $2)", [leaving, later]),
      ]);
      const errors = settled.filter((s) => s.status === "rejected");
      expect(errors.map((e) => String((e as PromiseRejectedResult).reason))).toEqual([]);
      const { rows } = await admin.query(
        "select count(*)::int as n from public.generation_jobs where user_id = $1",
        [leaving],
      );
      expect(rows[0].n).toBe(0);
      await expectNoDrift(admin);
    }
  });

  test("a member's erasure erases their prompts and outputs, keeps the pool's accounting but for the refunds its cancels make; their export had their organization jobs", async () => {
    const plan = await orgPlan(admin, "org_privacy", {
      units: 100,
      maxActive: 5,
      maxPaidRefunds: 10,
    });
    const org = await newOrganization(admin, plan);
    const [a, b] = await members(admin, org, 2, 10);
    const [leaving, staying] = [a as string, b as string];
    const secret = "the leaving member's secret prompt";
    const done = await enqueueIn(svc, leaving, org, { p_prompt: `${secret} 1` });
    await rpc(svc, "start_job", { p_job_id: done.job.id, p_lease_seconds: 90 });
    expect(
      (
        await rpc(svc, "complete_job", {
          p_job_id: done.job.id,
          p_attempt: 1,
          p_output: "the secret answer",
        })
      ).outcome,
    ).toBe("completed");
    const queued = await enqueueIn(svc, leaving, org, { p_prompt: `${secret} 2` });
    const running = await enqueueIn(svc, leaving, org, { p_prompt: `${secret} 3` });
    await rpc(svc, "start_job", { p_job_id: running.job.id, p_lease_seconds: 90 });
    const kept = await enqueueIn(svc, staying, org);
    expect(await pool(admin, org)).toEqual({ units_used: 4, paid_refunds: 0, erased_units: 0 });

    const exported = await rpc(svc, "export_user", { p_user_id: leaving });
    expect(exported.jobs.map((j: { id: string }) => j.id).sort()).toEqual(
      [done.job.id, queued.job.id, running.job.id].sort(),
    );
    expect(exported.jobs.every((j: { organization_id: string }) => j.organization_id === org)).toBe(
      true,
    );
    expect(exported.organizations).toEqual([
      expect.objectContaining({ organization_id: org, role: "member", cap: 10 }),
    ]);
    expect(exported.organizations[0].usage).toEqual([
      expect.objectContaining({ units_used: 3, meter: "jobs" }),
    ]);

    const erased = (await admin.query("select private.erase_user_data($1, now()) as r", [leaving]))
      .rows[0].r;
    expect(erased).toMatchObject({ outcome: "erased", jobs: 3, canceled: 2 });
    // The queued job refunded, the running one refunded after spend (counted, under the bound 10);
    // the completed job's unit stays spent, in the pool, without its member.
    expect(await pool(admin, org)).toEqual({ units_used: 2, paid_refunds: 1, erased_units: 1 });
    expect(await memberUsage(admin, org)).toEqual({ [staying]: 1 });
    const { rows } = await admin.query(
      `select (select count(*)::int from public.generation_jobs
                where user_id = $1 or prompt like $2 or output like '%secret answer%') as jobs,
              (select count(*)::int from public.job_events where user_id = $1) as events,
              (select count(*)::int from public.organization_members where user_id = $1) as memberships,
              (select status from public.generation_jobs where id = $3) as kept`,
      [leaving, `${secret}%`, kept.job.id],
    );
    expect(rows[0]).toEqual({ jobs: 0, events: 0, memberships: 0, kept: "queued" });
    await expectNoDrift(admin);
    // The pool goes on: the staying member's job still settles on it.
    expect(
      (await rpc(svc, "cancel_job", { p_job_id: kept.job.id, p_user_id: staying })).refunded,
    ).toBe(true);
    expect(await pool(admin, org)).toEqual({ units_used: 1, paid_refunds: 1, erased_units: 1 });
    await expectNoDrift(admin);
  });

  test("removing a member cancels their organization jobs there by the refund rules; only an owner or admin removes someone, never the last owner", async () => {
    const plan = await orgPlan(admin, "org_removal", { units: 100, maxPaidRefunds: 10 });
    const org = await newOrganization(admin, plan);
    const [owner, admin1, leaving, other] = await members(admin, org, 4, 10);
    await admin.query(
      `update public.organization_members set role = case user_id when $2 then 'owner' else 'admin' end
       where organization_id = $1 and user_id in ($2, $3)`,
      [org, owner, admin1],
    );
    const done = await enqueueIn(svc, leaving as string, org);
    await rpc(svc, "start_job", { p_job_id: done.job.id, p_lease_seconds: 90 });
    await rpc(svc, "complete_job", { p_job_id: done.job.id, p_attempt: 1, p_output: "ok" });
    await enqueueIn(svc, leaving as string, org);
    const running = await enqueueIn(svc, leaving as string, org);
    await rpc(svc, "start_job", { p_job_id: running.job.id, p_lease_seconds: 90 });
    expect((await pool(admin, org)).units_used).toBe(3);
    const remove = (who: unknown, by: unknown) =>
      rpc(svc, "remove_member", { p_organization_id: org, p_user_id: who, p_by: by });

    expect((await remove(leaving, other)).outcome).toBe("forbidden");
    expect((await remove(owner, admin1)).outcome).toBe("forbidden");
    expect((await remove(owner, owner)).outcome).toBe("last_owner");
    expect(await remove(leaving, admin1)).toEqual({ outcome: "removed", canceled: 2, refunded: 2 });
    expect((await remove(leaving, admin1)).outcome).toBe("not_a_member");
    // The finished job's unit stays spent; the queued and the running one came back.
    expect(await pool(admin, org)).toMatchObject({ units_used: 1, paid_refunds: 1 });
    expect((await memberUsage(admin, org))[leaving as string]).toBe(1);
    expect((await enqueueIn(svc, leaving as string, org)).outcome).toBe("not_a_member");
    expect((await remove(other, other)).outcome).toBe("removed");
    await expectNoDrift(admin);
  });

  test(`a removal racing the member's own enqueues and their jobs' endings: no deadlock, no drift (${ROUNDS} rounds)`, async () => {
    const plan = await orgPlan(admin, "org_removal_race", { units: 10000, maxActive: 10 });
    for (let round = 0; round < ROUNDS; round++) {
      const org = await newOrganization(admin, plan);
      const [owner, leaving] = (await members(admin, org, 2)) as [string, string];
      await admin.query(
        "update public.organization_members set role = 'owner' where organization_id = $1 and user_id = $2",
        [org, owner],
      );
      const ids: string[] = [];
      for (let i = 0; i < 4; i++) {
        const r = await enqueueIn(svc, leaving, org);
        if (i % 2 === 0) await rpc(svc, "start_job", { p_job_id: r.job.id, p_lease_seconds: 90 });
        ids.push(r.job.id);
      }
      const settled = await Promise.allSettled([
        rpc(svc, "remove_member", { p_organization_id: org, p_user_id: leaving, p_by: owner }),
        ...ids.flatMap((id, i) => [
          i % 2 === 0
            ? rpc(svc, "complete_job", { p_job_id: id, p_attempt: 1, p_output: "ok" })
            : rpc(svc, "cancel_job", { p_job_id: id, p_user_id: leaving }),
          rpc(svc, "fail_job", { p_job_id: id, p_reason: "delivery_failed" }),
        ]),
        enqueueIn(svc, leaving, org),
        enqueueIn(svc, owner, org),
      ]);
      expect(settled.filter((s) => s.status === "rejected")).toEqual([]);
      const { rows } = await admin.query(
        `select count(*)::int as active from public.generation_jobs
         where organization_id = $1 and user_id = $2 and status in ('queued', 'running')`,
        [org, leaving],
      );
      expect(rows[0].active).toBe(0);
      await expectNoDrift(admin);
    }
  });

  test("an invitation: made by an owner or admin, accepted once (10 racing accepts: one member), never after it expires", async () => {
    const plan = await orgPlan(admin, "org_invites", { units: 10 });
    const org = await newOrganization(admin, plan);
    const [owner, plain] = (await members(admin, org, 2)) as [string, string];
    await admin.query(
      "update public.organization_members set role = 'owner' where organization_id = $1 and user_id = $2",
      [org, owner],
    );
    const invite = (by: string, extra: Record<string, unknown> = {}) =>
      rpc(svc, "create_invitation", {
        p_organization_id: org,
        p_by: by,
        p_role: "member",
        p_cap: 2,
        ...extra,
      });
    expect((await invite(plain)).outcome).toBe("forbidden");
    expect((await invite(owner, { p_role: "owner" })).outcome).toBe("invalid_invitation");
    const made = await invite(owner);
    expect(made.outcome).toBe("created");
    const stored = await admin.query(
      "select token_hash from public.organization_invitations where id = $1",
      [made.invitation_id],
    );
    expect(stored.rows[0].token_hash).not.toContain(made.token);

    const joiners = await Promise.all(Array.from({ length: 10 }, () => db.user()));
    const answers = await Promise.all(
      joiners.map((u) => rpc(svc, "accept_invitation", { p_token: made.token, p_user_id: u })),
    );
    expect(tally(answers)).toEqual({ accepted: 1, already_accepted: 9 });
    const joined = joiners[answers.findIndex((a) => a.outcome === "accepted")] as string;
    const { rows } = await admin.query(
      "select user_id, role, cap from public.organization_members where organization_id = $1 and user_id = any($2)",
      [org, joiners],
    );
    expect(rows).toEqual([{ user_id: joined, role: "member", cap: 2 }]);
    expect((await enqueueIn(svc, joined, org)).outcome).toBe("enqueued");

    const soon = await invite(owner, { p_expires_at: addSeconds(T, 60), p_now: T });
    const late = await rpc(svc, "accept_invitation", {
      p_token: soon.token,
      p_user_id: joiners[0],
      p_now: addSeconds(T, 61),
    });
    expect(late.outcome).toBe("expired");
    const again = await invite(owner);
    expect(
      (await rpc(svc, "accept_invitation", { p_token: again.token, p_user_id: joined })).outcome,
    ).toBe("already_member");
    expect(
      (await rpc(svc, "accept_invitation", { p_token: "no such token", p_user_id: joined }))
        .outcome,
    ).toBe("not_found");
  });

  test("deleting an organization: only an owner; its active jobs canceled, every member's prompts, outputs and chunks there gone, its cost kept without anyone, their own jobs untouched", async () => {
    const plan = await orgPlan(admin, "org_deletion", { units: 100, maxPaidRefunds: 10 });
    const org = await newOrganization(admin, plan);
    const [owner, adminUser, member] = (await members(admin, org, 3, 10)) as [
      string,
      string,
      string,
    ];
    await admin.query(
      `update public.organization_members set role = case user_id when $2 then 'owner'
         when $3 then 'admin' else role end where organization_id = $1`,
      [org, owner, adminUser],
    );
    const secret = "a team member's secret prompt";
    const done = await enqueueIn(svc, member, org, { p_prompt: `${secret} 1` });
    await rpc(svc, "start_job", { p_job_id: done.job.id, p_lease_seconds: 90 });
    await rpc(svc, "complete_job", {
      p_job_id: done.job.id,
      p_attempt: 1,
      p_output: "the team's secret answer",
      p_usage: { prompt_tokens: 7, completion_tokens: 11 },
    });
    const running = await enqueueIn(svc, owner, org, { p_prompt: `${secret} 2` });
    await rpc(svc, "start_job", { p_job_id: running.job.id, p_lease_seconds: 90 });
    await rpc(svc, "record_progress", {
      p_job_id: running.job.id,
      p_attempt: 1,
      p_offset: 0,
      p_text: "the team's secret partial answer",
      p_completion_tokens: 5,
    });
    await enqueueIn(svc, adminUser, org, { p_prompt: `${secret} 3` });
    const personal = await rpc(svc, "enqueue_job", { p_user_id: member, p_prompt: "my own" });
    const cost = async () =>
      (
        await admin.query(
          `select coalesce(sum(jobs), 0)::int as jobs, coalesce(sum(completion_tokens), 0)::int as tokens
           from public.erased_usage where plan_id = $1`,
          [plan],
        )
      ).rows[0];
    const before = await cost();
    for (const by of [adminUser, member])
      expect(
        (await rpc(svc, "delete_organization", { p_organization_id: org, p_by: by })).outcome,
      ).toBe("forbidden");
    const stranger = (await members(admin, await newOrganization(admin, plan), 1))[0];
    expect(
      (await rpc(svc, "delete_organization", { p_organization_id: org, p_by: stranger })).outcome,
    ).toBe("not_a_member");

    const deleted = await rpc(svc, "delete_organization", { p_organization_id: org, p_by: owner });
    expect(deleted).toEqual({ outcome: "deleted", jobs: 3, canceled: 2, members: 3 });
    const { rows } = await admin.query(
      `select (select count(*)::int from public.generation_jobs
                where organization_id = $1 or prompt like $2 or output like '%secret answer%'
                  or partial_output like '%secret%') as jobs,
              (select count(*)::int from public.job_events where job_id = any($3::uuid[])) as events,
              (select count(*)::int from public.job_output_chunks where job_id = $4) as chunks,
              (select count(*)::int from public.organization_usage where organization_id = $1)
                + (select count(*)::int from public.organization_member_usage where organization_id = $1)
                + (select count(*)::int from public.organization_members where organization_id = $1)
                + (select count(*)::int from public.organizations where id = $1) as rows,
              (select status from public.generation_jobs where id = $5) as personal`,
      [org, `${secret}%`, [done.job.id, running.job.id], running.job.id, personal.job.id],
    );
    expect(rows[0]).toEqual({ jobs: 0, events: 0, chunks: 0, rows: 0, personal: "queued" });
    // What the provider billed stays countable: the completed call's 11 tokens, the canceled
    // one's 5 of progress, three jobs, no user.
    expect(await cost()).toEqual({ jobs: before.jobs + 3, tokens: before.tokens + 16 });
    expect(
      (await rpc(svc, "delete_organization", { p_organization_id: org, p_by: owner })).outcome,
    ).toBe("not_a_member");
    await expectNoDrift(admin);
  });

  test(`a deletion racing its members' enqueues, endings, a removal, an erasure and an accept: no deadlock, no error, nothing of it left, no drift (${ROUNDS} rounds)`, async () => {
    const plan = await orgPlan(admin, "org_deletion_race", { units: 10000, maxActive: 10 });
    for (let round = 0; round < ROUNDS; round++) {
      const org = await newOrganization(admin, plan);
      const [owner, a, b] = (await members(admin, org, 3)) as [string, string, string];
      await admin.query(
        "update public.organization_members set role = 'owner' where organization_id = $1 and user_id = $2",
        [org, owner],
      );
      const running = await enqueueIn(svc, a, org);
      await rpc(svc, "start_job", { p_job_id: running.job.id, p_lease_seconds: 90 });
      const queued = await enqueueIn(svc, a, org);
      const other = await enqueueIn(svc, b, org);
      await rpc(svc, "start_job", { p_job_id: other.job.id, p_lease_seconds: 90 });
      const invitation = await rpc(svc, "create_invitation", {
        p_organization_id: org,
        p_by: owner,
        p_role: "member",
      });
      const joiner = await db.user();
      const settled = await Promise.allSettled([
        rpc(svc, "delete_organization", { p_organization_id: org, p_by: owner }),
        enqueueIn(svc, a, org),
        enqueueIn(svc, b, org),
        rpc(svc, "complete_job", { p_job_id: running.job.id, p_attempt: 1, p_output: "ok" }),
        rpc(svc, "fail_job", { p_job_id: queued.job.id, p_reason: "delivery_failed" }),
        rpc(svc, "cancel_job", { p_job_id: other.job.id, p_user_id: b }),
        rpc(svc, "remove_member", { p_organization_id: org, p_user_id: b, p_by: owner }),
        admin.query("select private.erase_user_data($1, now())", [a]),
        rpc(svc, "accept_invitation", { p_token: invitation.token, p_user_id: joiner }),
      ]);
      expect(settled.filter((r) => r.status === "rejected")).toEqual([]);
      const { rows } = await admin.query(
        `select (select count(*)::int from public.organizations where id = $1)
              + (select count(*)::int from public.generation_jobs where organization_id = $1)
              + (select count(*)::int from public.organization_members where organization_id = $1)
              + (select count(*)::int from public.organization_usage where organization_id = $1)
              + (select count(*)::int from public.organization_invitations where organization_id = $1)
              as left`,
        [org],
      );
      expect(rows[0].left).toBe(0);
      await expectNoDrift(admin);
    }
  });
});
