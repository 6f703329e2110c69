import { describe, expect, test } from "vitest";
import { addSeconds, at, expectNoDrift, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

// Exactly-once refund, one fate, limits hold (docs/DESIGN.md#invariants) by brute force: real concurrent connections race one transition, repeated.
// The assertion is the invariant, checked on the database after every round.
const ROUNDS = 200;
const db = dbFixture({ fresh: true, service: 50, noDrift: "file" });
const { svc, admin } = db;

/** A plan of 10 units, 5 active, 2 refunds after spend a day (max_paid_refunds). */
const raceCancelsPlan = () =>
  admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_paid_refunds)
     values ('race_cancels', 'Race', 'day', 10, 5, 2) on conflict (id) do nothing`,
  );

/** refundTally of 5 jobs ended after spend under that plan: 2 refunded and counted, 3 spent. */
/** How many calls ended in each outcome. */
function tally(results: { outcome: string }[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const { outcome } of results) counts[outcome] = (counts[outcome] ?? 0) + 1;
  return counts;
}

const BOUND_OF_TWO = { used: 3, counted: 2, refunded: 2, withheld: 3 };

/** The user's counter and its jobs' refunds: made, counted, and withheld as `reason`. */
async function refundTally(user: string, reason: string) {
  const { rows } = await admin.query(
    `select (select units_used from public.quota_usage where user_id = $1) as used,
            (select paid_refunds from public.quota_usage where user_id = $1) as counted,
            (select count(*)::int from public.generation_jobs where user_id = $1 and refunded_at is not null) as refunded,
            (select count(*)::int from public.generation_jobs
              where user_id = $1 and refund_withheld = $2 and refunded_at is null) as withheld`,
    [user, reason],
  );
  return rows[0];
}

describe("races on a real PostgreSQL", () => {
  test(`50 concurrent enqueues by one free user: exactly 1 reserved (${ROUNDS} rounds)`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("free");
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: `p${i}` }),
        ),
      );
      const outcomes = results.map((r) => r.outcome);
      expect(outcomes.filter((o) => o === "enqueued")).toHaveLength(1);
      expect(
        outcomes.every(
          (o) => o === "enqueued" || o === "quota_exceeded" || o === "too_many_active_jobs",
        ),
      ).toBe(true);
      const found = await admin.query(
        "select (select count(*)::int from public.generation_jobs where user_id = $1) as jobs, (select units_used from public.quota_usage where user_id = $1) as used",
        [user],
      );
      expect(found.rows[0]).toEqual({ jobs: 1, used: 1 });
    }
    await expectNoDrift(admin);
  });

  test(`a pro user's concurrent enqueues never exceed max_active_jobs (${ROUNDS} rounds of 20)`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("pro");
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: `p${i}` }),
        ),
      );
      expect(tally(results)).toEqual({ enqueued: 3, too_many_active_jobs: 17 });
      const found = await admin.query(
        "select count(*)::int as active from public.generation_jobs where user_id = $1 and status in ('queued', 'running')",
        [user],
      );
      expect(found.rows[0].active).toBe(3);
    }
    await expectNoDrift(admin);
  });

  test(`10 concurrent replays of one idempotency key: one job, one unit (${ROUNDS} rounds)`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("pro");
      const results = await Promise.all(
        Array.from({ length: 10 }, () =>
          rpc(svc, "enqueue_job", {
            p_user_id: user,
            p_prompt: "same",
            p_idempotency_key: `key-${round}`,
          }),
        ),
      );
      expect(new Set(results.map((r) => r.job.id)).size).toBe(1);
      expect(tally(results)).toEqual({ enqueued: 1, replayed: 9 });
      const used = await admin.query(
        "select units_used from public.quota_usage where user_id = $1",
        [user],
      );
      expect(used.rows[0].units_used).toBe(1);
    }
  });

  test(`complete vs cancel vs worker fail vs failure callback vs sweep on one job: one fate, at most one refund (${ROUNDS} rounds)`, async () => {
    const T = at("2030-01-01T00:00:00Z");
    const tally: Record<string, number> = {};
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("pro");
      const now = addSeconds(T, round * 100000);
      const { job } = await rpc(svc, "enqueue_job", {
        p_user_id: user,
        p_prompt: "race",
        p_now: now,
      });
      await rpc(svc, "start_job", { p_job_id: job.id, p_lease_seconds: 90, p_now: now });
      const later = addSeconds(now, 90 + 301); // the lease is past its grace: the sweeper may end it
      const [complete, cancel, fail, dlq, sweep] = await Promise.all([
        rpc(svc, "complete_job", {
          p_job_id: job.id,
          p_attempt: 1,
          p_output: "late",
          p_now: later,
        }),
        rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: later }),
        rpc(svc, "fail_job", {
          p_job_id: job.id,
          p_reason: "model_refused",
          p_attempt: 1,
          p_now: later,
        }),
        rpc(svc, "fail_job", { p_job_id: job.id, p_reason: "delivery_failed", p_now: later }),
        rpc(svc, "sweep_jobs", { p_now: later }),
      ]);
      const winners = [
        complete.outcome === "completed" && "complete",
        cancel.outcome === "canceled" && "cancel",
        fail.outcome === "failed" && "fail",
        dlq.outcome === "failed" && "dlq",
        sweep.failed.some((f: { id: string }) => f.id === job.id) && "sweep",
      ].filter(Boolean) as string[];
      expect(winners).toHaveLength(1);
      const winner = winners[0] as string;
      tally[winner] = (tally[winner] ?? 0) + 1;

      const row = (
        await admin.query(
          "select status, refunded_at, output from public.generation_jobs where id = $1",
          [job.id],
        )
      ).rows[0];
      const used = (
        await admin.query("select units_used from public.quota_usage where user_id = $1", [user])
      ).rows[0].units_used;
      const endings = (
        await admin.query(
          "select count(*)::int as n from public.job_events where job_id = $1 and to_status in ('succeeded', 'failed', 'canceled')",
          [job.id],
        )
      ).rows[0].n;
      expect(endings).toBe(1);
      if (winner === "complete") {
        expect(row).toMatchObject({ status: "succeeded", refunded_at: null, output: "late" });
        expect(used).toBe(1);
      } else {
        expect(row.status).toBe(winner === "cancel" ? "canceled" : "failed");
        expect(row.refunded_at).not.toBeNull();
        expect(row.output).toBeNull();
        expect(used).toBe(0);
      }
    }
    // Not an assertion on timing, a sanity check that the race was a race: more than one contender won somewhere.
    expect(Object.keys(tally).length).toBeGreaterThan(1);
    await expectNoDrift(admin);
  });

  test(`5 running jobs of one user canceled at once: exactly the plan's bound refunded, the rest spent (${ROUNDS} rounds)`, async () => {
    await raceCancelsPlan();
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("free");
      await admin.query(
        "insert into public.user_plans (user_id, plan_id) values ($1, 'race_cancels')",
        [user],
      );
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const { job } = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: `c${i}` });
        await rpc(svc, "start_job", { p_job_id: job.id, p_lease_seconds: 90 });
        ids.push(job.id);
      }
      const results = await Promise.all(
        ids.map((id) => rpc(svc, "cancel_job", { p_job_id: id, p_user_id: user })),
      );
      expect(results.every((r) => r.outcome === "canceled")).toBe(true);
      expect(results.filter((r) => r.refunded === true)).toHaveLength(2);
      expect(await refundTally(user, "running_cancel_limit")).toEqual(BOUND_OF_TWO);
    }
    await expectNoDrift(admin);
  });

  test(`5 jobs of one user ending after provider spend at once (callbacks, cancels): exactly the plan's bound refunded (${ROUNDS} rounds)`, async () => {
    // The same plan: 2 refunds after spend a day, shared by running cancels and by failures or
    // queued cancels after a consumed attempt.
    await raceCancelsPlan();
    const usage = { prompt_tokens: 20, completion_tokens: 200, source: "counted" };
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("race_cancels");
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        const { job } = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: `t${i}` });
        // Each attempt timed out after streaming: released with its usage, queued again.
        await rpc(svc, "start_job", { p_job_id: job.id, p_lease_seconds: 90 });
        await rpc(svc, "release_job", { p_job_id: job.id, p_attempt: 1, p_usage: usage });
        ids.push(job.id);
      }
      const results = await Promise.all(
        ids.map((id, i) =>
          i % 2 === 0
            ? rpc(svc, "fail_job", { p_job_id: id, p_reason: "delivery_failed", p_seq: 1 })
            : rpc(svc, "cancel_job", { p_job_id: id, p_user_id: user }),
        ),
      );
      expect(results.every((r) => r.outcome === "failed" || r.outcome === "canceled")).toBe(true);
      expect(await refundTally(user, "paid_refund_limit")).toEqual(BOUND_OF_TWO);
    }
    await expectNoDrift(admin);
  });

  test(`a duplicate delivery racing the first: one claim, one model call (${ROUNDS} rounds)`, async () => {
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("pro");
      const { job } = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "dup" });
      const claims = await Promise.all(
        Array.from({ length: 5 }, () => rpc(svc, "start_job", { p_job_id: job.id })),
      );
      expect(claims.filter((c) => c.outcome === "started")).toHaveLength(1);
      expect(claims.filter((c) => c.outcome === "already_running")).toHaveLength(4);
      await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user });
    }
  });
});
