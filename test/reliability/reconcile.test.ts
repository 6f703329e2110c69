/**
 * ops/reconcile.ts against a real database (this file's own copy): bad states are seeded by
 * backdating rows through the transitions (p_now in the past) or, for drift, by a raw write a
 * careless operator could make; the states the constraints make unrepresentable are proven so.
 */
import { spawnSync } from "node:child_process";
import { describe, expect, test } from "vitest";
import { reconcile } from "../../ops/reconcile.ts";
import { databaseUrl, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { enqueueIn, members, newOrganization, orgPlan, pool } from "../support/organizations.ts";

// Drift is seeded here on purpose: reconcile must find it.
const db = dbFixture({ fresh: true, noDrift: "never" });
const { admin, svc: service } = db;
const hoursAgo = (h: number) => new Date(Date.now() - h * 3_600_000);

async function enqueue(userId: string, at: Date): Promise<string> {
  const r = await rpc(service, "enqueue_job", {
    p_user_id: userId,
    p_prompt: `reconcile ${Math.random()}`,
    p_now: at,
  });
  expect(r.outcome).toBe("enqueued");
  return r.job.id as string;
}

/** job_events is append-only: the test, as the table's owner, lifts the guard for `edit` alone. */
async function editingEvents(edit: () => Promise<unknown>): Promise<void> {
  await admin.query("alter table public.job_events disable trigger job_events_append_only");
  try {
    await edit();
  } finally {
    await admin.query("alter table public.job_events enable trigger job_events_append_only");
  }
}

const checks = (r: Awaited<ReturnType<typeof reconcile>>["findings"]) =>
  Object.fromEntries(r.map((f) => [f.check, f.count]));

describe("npm run reconcile", () => {
  test("a clean database: nothing found, exit code 0", async () => {
    const user = await db.user("pro");
    const id = await enqueue(user, new Date());
    await rpc(service, "cancel_job", { p_job_id: id, p_user_id: user });
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(report).toMatchObject({ ok: true, findings: [] });
  });

  test("a token plan's running cancels are not counted in the job plans' bound of paid refunds", async () => {
    // Without `j.meter = 'jobs'` the check counts them and reports a counter mismatch.
    const user = await db.user("team");
    for (let i = 0; i < 2; i++) {
      const id = await enqueue(user, new Date());
      await rpc(service, "start_job", { p_job_id: id, p_lease_seconds: 90 });
      await rpc(service, "cancel_job", { p_job_id: id, p_user_id: user });
    }
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(report).toMatchObject({ ok: true, findings: [] });
  });

  test("organizations: refunds after spend counted on the pool are clean, over the bound with a personal plan beside them; a pool's drift is reported by organization", async () => {
    // Without the pool in the count, a member's running cancels read as a mismatch on their own
    // counter and the organization's bound as passed (docs/DESIGN.md#organizations).
    const plan = await orgPlan(admin, "reconcile_team", { units: 50, maxPaidRefunds: 2 });
    const org = await newOrganization(admin, plan);
    const [a, b] = await members(admin, org, 2);
    const personal = await enqueue(a as string, new Date());
    await rpc(service, "start_job", { p_job_id: personal, p_lease_seconds: 90 });
    await rpc(service, "cancel_job", { p_job_id: personal, p_user_id: a });
    for (const u of [a, b, a] as string[]) {
      const r = await enqueueIn(service, u, org);
      await rpc(service, "start_job", { p_job_id: r.job.id, p_lease_seconds: 90 });
      await rpc(service, "cancel_job", { p_job_id: r.job.id, p_user_id: u });
    }
    expect((await pool(admin, org)).paid_refunds).toBe(2);
    expect(await reconcile({ dbUrl: databaseUrl() })).toMatchObject({ ok: true, findings: [] });

    await admin.query(
      "update public.organization_usage set units_used = units_used + 1 where organization_id = $1",
      [org],
    );
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(checks(report.findings)).toEqual({ drift: 1 });
    expect(report.findings[0]?.rows).toEqual([
      expect.objectContaining({ user_id: null, organization_id: org, units_used: 2 }),
    ]);
    await admin.query(
      "update public.organization_usage set units_used = units_used - 1 where organization_id = $1",
      [org],
    );
  });

  test("a canceled attempt's usage record (canceled → canceled) is not a second refund", async () => {
    // Without `from_status is distinct from to_status` the attempt_usage event counts as a
    // second transition into canceled and the job is reported as refunded twice.
    const user = await db.user("pro");
    const id = await enqueue(user, new Date());
    await rpc(service, "start_job", { p_job_id: id, p_lease_seconds: 90 });
    await rpc(service, "cancel_job", { p_job_id: id, p_user_id: user });
    const usage = { prompt_tokens: 3, completion_tokens: 40, source: "counted" };
    const r = await rpc(service, "record_attempt_usage", {
      p_job_id: id,
      p_attempt: 1,
      p_usage: usage,
    });
    expect(r.outcome).toBe("recorded");
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(report).toMatchObject({ ok: true, findings: [] });
  });

  test("reports old active jobs, dead workers' jobs, undelivered jobs and drift read-only; --fix ends them with sweep_jobs, one refund each; drift is left to a human", async () => {
    const user = await db.user("pro");
    const old = await enqueue(user, hoursAgo(4)); // past the max age, still queued
    const dead = await enqueue(user, hoursAgo(1)); // its worker died: lease long expired
    await rpc(service, "start_job", { p_job_id: dead, p_lease_seconds: 90, p_now: hoursAgo(1) });
    const lost = await enqueue(user, hoursAgo(0.5)); // its message was lost
    const drifted = await db.user("free");
    await admin.query(
      "insert into public.quota_usage (user_id, period_start, units_used) values ($1, date_trunc('day', now() at time zone 'UTC') at time zone 'UTC', 1)",
      [drifted],
    );

    const before = await admin.query(
      "select id, status, updated_at from public.generation_jobs order by id",
    );
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(report.ok).toBe(false);
    expect(checks(report.findings)).toEqual({
      drift: 1,
      active_past_max_age: 1,
      running_lease_expired: 1,
      queued_never_delivered: 2, // the old one too: it was never delivered either
    });
    const rowsOf = (check: string) =>
      report.findings.find((f) => f.check === check)?.rows.map((r) => r.id ?? r.user_id);
    expect(rowsOf("active_past_max_age")).toEqual([old]);
    expect(rowsOf("running_lease_expired")).toEqual([dead]);
    expect(rowsOf("queued_never_delivered")).toEqual([old, lost]);
    expect(rowsOf("drift")).toEqual([drifted]);
    // Read-only: nothing changed.
    expect(
      (await admin.query("select id, status, updated_at from public.generation_jobs order by id"))
        .rows,
    ).toEqual(before.rows);

    const fixed = await reconcile({ dbUrl: databaseUrl(), fix: true });
    expect(fixed.fixed?.failed).toEqual({
      max_age_exceeded: 1,
      lease_expired: 1,
      never_delivered: 1,
    });
    expect(checks(fixed.after ?? [])).toEqual({ drift: 1 });
    expect(fixed.ok).toBe(false);
    const { rows } = await admin.query(
      `select j.id, j.status, j.failure_reason,
         (select count(*)::int from public.job_events e where e.job_id = j.id and e.event = 'swept') as swept
       from public.generation_jobs j where j.user_id = $1 order by j.created_at`,
      [user],
    );
    expect(rows).toEqual([
      { id: old, status: "failed", failure_reason: "max_age_exceeded", swept: 1 },
      { id: dead, status: "failed", failure_reason: "lease_expired", swept: 1 },
      { id: lost, status: "failed", failure_reason: "never_delivered", swept: 1 },
    ]);
    const drift = await admin.query("select user_id from public.quota_drift where user_id = $1", [
      user,
    ]);
    expect(drift.rows).toEqual([]);

    // A second --fix finds nothing it could end (drift only): it runs no sweep at all.
    const again = await reconcile({ dbUrl: databaseUrl(), fix: true });
    expect(checks(again.findings)).toEqual({ drift: 1 });
    expect(again.fixed).toBeUndefined();

    // The human fixes the drift; then it is clean.
    await admin.query("delete from public.quota_usage where user_id = $1", [drifted]);
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("a job ended by a raw UPDATE (no transition, no refund): reported twice, as drift and as a failure without its refund event", async () => {
    const user = await db.user("pro");
    const id = await enqueue(user, new Date());
    await admin.query(
      `update public.generation_jobs set status = 'failed', failure_reason = 'delivery_failed',
         finished_at = now(), refunded_at = now(), captured = 0 where id = $1`,
      [id],
    );
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(checks(report.findings)).toEqual({ drift: 1, failed_or_canceled_without_refund: 1 });
    // Clean up for the next test: the unit the raw update never returned.
    await admin.query(
      "update public.quota_usage set units_used = units_used - 1 where user_id = $1",
      [user],
    );
    await admin.query(
      "insert into public.job_events (job_id, user_id, at, event, from_status, to_status) values ($1, $2, now(), 'failed', 'queued', 'failed')",
      [id, user],
    );
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("a running cancel past the plan's bound is clean; a withheld refund without its event, or a counter off its events, is reported", async () => {
    const user = await db.user("free");
    const now = new Date();
    const first = await enqueue(user, now);
    await rpc(service, "start_job", { p_job_id: first, p_lease_seconds: 90 });
    expect((await rpc(service, "cancel_job", { p_job_id: first, p_user_id: user })).refunded).toBe(
      true,
    );
    const second = await enqueue(user, now);
    await rpc(service, "start_job", { p_job_id: second, p_lease_seconds: 90 });
    expect((await rpc(service, "cancel_job", { p_job_id: second, p_user_id: user })).refunded).toBe(
      false,
    );
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);

    // A careless operator's raw writes: a queued job "canceled" without its refund, and the
    // running-cancel counter bumped by hand.
    const other = await db.user("pro");
    const raw = await enqueue(other, now);
    // On a plan that refunds nothing after spend, so the repaired job below is a withheld
    // running cancel the bound called for.
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_paid_refunds)
       values ('reconcile_none', 'None', 'day', 10, 3, 0) on conflict (id) do nothing`,
    );
    await admin.query(
      `update public.generation_jobs set status = 'canceled', finished_at = now(),
         refund_withheld = 'running_cancel_limit', captured = 1, plan_id = 'reconcile_none'
       where id = $1`,
      [raw],
    );
    await admin.query(
      "insert into public.job_events (job_id, user_id, at, event, from_status, to_status) values ($1, $2, now(), 'canceled', 'queued', 'canceled')",
      [raw, other],
    );
    await admin.query("update public.quota_usage set paid_refunds = 3 where user_id = $1", [other]);
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(checks(report.findings)).toEqual({
      failed_or_canceled_without_refund: 1,
      running_cancel_count_mismatch: 1,
    });
    // Clean up for the next test: the counter back to its events, the job to what it is.
    await admin.query("update public.quota_usage set paid_refunds = 0 where user_id = $1", [other]);
    await editingEvents(() =>
      admin.query(
        `update public.job_events set from_status = 'running',
           detail = '{"refunded": false, "reason": "running_cancel_limit"}' where job_id = $1 and to_status = 'canceled'`,
        [raw],
      ),
    );
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("a refund withheld past the bound of paid refunds needs its own ending's event saying so; a job ended twice is reported", async () => {
    // A plan that refunds nothing after spend, so every withholding below is one the bound
    // called for (refund_after_spend_past_bound stays clean).
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_paid_refunds)
       values ('reconcile_none', 'None', 'day', 10, 3, 0) on conflict (id) do nothing`,
    );
    const user = await db.user("reconcile_none");
    const withheld = { refunded: false, reason: "paid_refund_limit" };
    // Raw writes, as an old database could hold them: each job ended with its unit kept.
    const end = async (status: "failed" | "canceled", event: { from: string; to: string }) => {
      const id = await enqueue(user, new Date());
      await admin.query(
        `update public.generation_jobs set status = $2, finished_at = now(), captured = 1,
           refund_withheld = 'paid_refund_limit',
           failure_reason = case when $2 = 'failed' then 'model_refused' end
         where id = $1`,
        [id, status],
      );
      await admin.query(
        `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
         values ($1, $2, now(), $4, $3, $4, $5)`,
        [id, user, event.from, event.to, withheld],
      );
      return id;
    };
    await end("failed", { from: "running", to: "failed" });
    await end("canceled", { from: "queued", to: "canceled" });
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);

    // A failed job whose withholding event is a cancel's: not its own ending's.
    const wrong = await end("failed", { from: "running", to: "canceled" });
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(checks(report.findings)).toEqual({ failed_or_canceled_without_refund: 1 });
    expect(report.findings[0]?.rows).toEqual([
      expect.objectContaining({ id: wrong, status: "failed", refund_events: 1 }),
    ]);

    // A canceled job with its refund and two cancels in its events.
    const twice = await enqueue(user, new Date());
    await rpc(service, "cancel_job", { p_job_id: twice, p_user_id: user });
    await admin.query(
      `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
       values ($1, $2, now(), 'canceled', 'queued', 'canceled', '{"refunded": true}')`,
      [twice, user],
    );
    const both = await reconcile({ dbUrl: databaseUrl() });
    expect(
      both.findings.find((f) => f.check === "failed_or_canceled_without_refund")?.rows,
    ).toEqual([
      expect.objectContaining({ id: wrong, refund_events: 1 }),
      expect.objectContaining({ id: twice, status: "canceled", refund_events: 2 }),
    ]);

    // Clean up for the next tests: job_events is append-only; the test, as the table's owner,
    // lifts the guard to take back what it planted.
    await editingEvents(async () => {
      await admin.query(
        "delete from public.job_events where job_id = $1 and to_status = 'canceled'",
        [wrong],
      );
      await admin.query(
        "insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail) values ($1, $2, now(), 'failed', 'running', 'failed', $3)",
        [wrong, user, withheld],
      );
      await admin.query(
        "delete from public.job_events where id = (select max(id) from public.job_events where job_id = $1)",
        [twice],
      );
    });
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("a succeeded job with a refund-bearing event is reported; a record that changes no status is not one", async () => {
    const user = await db.user("pro");
    const id = await enqueue(user, new Date());
    await rpc(service, "start_job", { p_job_id: id, p_lease_seconds: 90 });
    await rpc(service, "complete_job", { p_job_id: id, p_attempt: 1, p_output: "done" });
    const plantEvent = (from: string, to: string) =>
      admin.query(
        `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
         values ($1, $2, now(), $4, $3, $4, '{"refunded": true}')`,
        [id, user, from, to],
      );
    await plantEvent("failed", "failed");
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);

    await plantEvent("running", "failed");
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(checks(report.findings)).toEqual({ succeeded_with_refund: 1 });
    expect(report.findings[0]?.rows).toEqual([{ id, user_id: user, refunded_at: null }]);

    await editingEvents(async () => {
      await admin.query(
        "delete from public.job_events where job_id = $1 and to_status = 'failed'",
        [id],
      );
    });
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("a legacy running cancel (refunded, no `counted` key) counts against the counter only before the first event that says `counted`", async () => {
    // The first counted event, by the transition itself.
    const counted = await db.user("free");
    const first = await enqueue(counted, new Date());
    await rpc(service, "start_job", { p_job_id: first, p_lease_seconds: 90 });
    expect(
      (await rpc(service, "cancel_job", { p_job_id: first, p_user_id: counted })).refunded,
    ).toBe(true);
    // Running cancels as the code before counted events wrote them: raw writes, the unit back.
    const legacy = async (at: Date) => {
      const user = await db.user("pro");
      const id = await enqueue(user, at);
      await admin.query(
        `update public.generation_jobs set status = 'canceled', finished_at = $2, refunded_at = $2,
           captured = 0, attempts = 1, started_at = $2 where id = $1`,
        [id, at],
      );
      await admin.query(
        "update public.quota_usage set units_used = units_used - 1 where user_id = $1",
        [user],
      );
      await admin.query(
        `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
         values ($1, $2, $3, 'canceled', 'running', 'canceled', '{"refunded": true}')`,
        [id, user, at],
      );
      return user;
    };
    const before = await legacy(hoursAgo(48));
    await legacy(new Date(Date.now() + 60_000));
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(checks(report.findings)).toEqual({ running_cancel_count_mismatch: 1 });
    expect(report.findings[0]?.rows).toEqual([
      expect.objectContaining({ user_id: before, paid_refunds: 0, events: 1 }),
    ]);
    // The counter as the legacy event says: clean.
    await admin.query("update public.quota_usage set paid_refunds = 1 where user_id = $1", [
      before,
    ]);
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("refunds after spend are judged by the SQL's own bound (private.refund_bound): a refund past it and a withholding under it are reported", async () => {
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_paid_refunds)
       values ('reconcile_two', 'Two', 'day', 10, 3, 2) on conflict (id) do nothing`,
    );
    const user = await db.user("reconcile_two");
    const refunded: boolean[] = [];
    for (let i = 0; i < 3; i++) {
      const id = await enqueue(user, new Date());
      await rpc(service, "start_job", { p_job_id: id, p_lease_seconds: 90 });
      refunded.push((await rpc(service, "cancel_job", { p_job_id: id, p_user_id: user })).refunded);
    }
    expect(refunded).toEqual([true, true, false]);
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
    const bound = async (n: number) =>
      admin.query("update public.plans set max_paid_refunds = $1 where id = 'reconcile_two'", [n]);
    try {
      // The same history judged by a bound of 1: the second refund was one too many.
      await bound(1);
      const past = await reconcile({ dbUrl: databaseUrl() });
      expect(checks(past.findings)).toEqual({ refund_after_spend_past_bound: 1 });
      expect(past.findings[0]?.rows).toEqual([
        expect.objectContaining({ user_id: user, before: 1, bound: 1, ending: "refunded" }),
      ]);
      // By a bound of 3: the third cancel's unit was kept while one was left.
      await bound(3);
      const under = await reconcile({ dbUrl: databaseUrl() });
      expect(under.findings[0]?.rows).toEqual([
        expect.objectContaining({ user_id: user, before: 2, bound: 3, ending: "withheld" }),
      ]);
    } finally {
      await bound(2);
    }
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("a failed/canceled job without refunded_at, or a succeeded one with it, cannot be written at all", async () => {
    const user = await db.user("pro");
    const a = await enqueue(user, new Date());
    await expect(
      admin.query(
        "update public.generation_jobs set status = 'canceled', finished_at = now() where id = $1",
        [a],
      ),
    ).rejects.toMatchObject({ code: "23514" }); // check_violation: refunded iff failed/canceled
    await rpc(service, "start_job", { p_job_id: a, p_lease_seconds: 90 });
    await rpc(service, "complete_job", { p_job_id: a, p_attempt: 1, p_output: "done" });
    await expect(
      admin.query("update public.generation_jobs set refunded_at = now() where id = $1", [a]),
    ).rejects.toMatchObject({ code: "P0001" }); // final is final
    await expect(
      admin.query(
        `insert into public.generation_jobs (user_id, status, prompt, request_hash, plan_id, period_start,
           created_at, queued_at, updated_at, finished_at, output, refunded_at)
         values ($1, 'succeeded', 'x', 'x', 'pro', now(), now(), now(), now(), now(), 'out', now())`,
        [user],
      ),
    ).rejects.toMatchObject({ code: "23514" });
    expect((await reconcile({ dbUrl: databaseUrl() })).ok).toBe(true);
  });

  test("the command line: exit 1 with findings, 0 when clean, 2 without --db-url", async () => {
    const run = (...args: string[]) =>
      spawnSync(process.execPath, ["--import", "tsx", "ops/reconcile.ts", ...args], {
        encoding: "utf8",
        timeout: 30_000,
      });
    expect(run("--db-url", databaseUrl()).status).toBe(0);
    const user = await db.user("free");
    await enqueue(user, hoursAgo(5));
    const found = run("--db-url", databaseUrl(), "--json");
    expect(found.status).toBe(1);
    expect(JSON.parse(found.stdout).findings.map((f: { check: string }) => f.check)).toContain(
      "active_past_max_age",
    );
    const fixed = run(`--db-url=${databaseUrl()}`, "--fix");
    expect(fixed.stdout).toContain("max_age_exceeded");
    expect(fixed.status).toBe(0);
    const bad = run();
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--db-url");
  });
});
