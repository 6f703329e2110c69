import { describe, expect, test } from "vitest";
import { addSeconds, at, expectNoDrift, type Json, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

// What a user pays for attempts that were released, timed out or failed
// (docs/DESIGN.md#metering-hold-and-capture): each round below was free for an attacker before
// 20261201090000_paid_endings.sql, and the provider billed every attempt of it.
const T0 = at("2026-12-01T10:00:00Z");
const db = dbFixture({ fresh: true, service: 20, noDrift: "file", now: T0 });
const { svc, admin } = db;
const OUTPUT = 2048; // the team plan's max_output_tokens

const counter = (user: string, meter = "jobs") => db.usage(user, meter);
const enqueued = (user: string, now = T0, promptTokens = 100): Promise<Json> =>
  db.enqueued(user, { promptTokens, now });

/** One attempt that times out after streaming: claimed, then released with its usage. */
async function timedOut(jobId: string, now: Date, usage: { prompt: number; completion: number }) {
  const s = await db.started(jobId, { now });
  const r = await rpc(svc, "release_job", {
    p_job_id: jobId,
    p_attempt: s.job.attempts,
    p_error: "transient: timeout",
    p_now: addSeconds(now, 1),
    p_usage: {
      prompt_tokens: usage.prompt,
      completion_tokens: usage.completion,
      source: "counted",
    },
  });
  expect(r.outcome).toBe("released");
  return r.job;
}

/** complete_job on `attempt`, with the usage the provider reported. */
const completed = (
  jobId: string,
  attempt: number,
  now: Date,
  usage: { prompt: number; completion: number },
) =>
  rpc(svc, "complete_job", {
    p_job_id: jobId,
    p_attempt: attempt,
    p_output: "done",
    p_now: now,
    p_usage: {
      prompt_tokens: usage.prompt,
      completion_tokens: usage.completion,
      source: "provider",
    },
  });

/** A queued cancel at T0 of a new job of `user`'s whose one attempt timed out with `usage`. */
async function canceledAfterTimeout(user: string, usage: { prompt: number; completion: number }) {
  const job = await enqueued(user);
  await timedOut(job.id, T0, usage);
  return rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
}

/** A team user's job whose first attempt timed out with `usage`, its second started at T0 + 5 s. */
async function inSecondAttempt(usage: { prompt: number; completion: number }) {
  const user = await db.user("team");
  const job = await enqueued(user);
  await timedOut(job.id, T0, usage);
  const s = await db.started(job.id, { now: addSeconds(T0, 5) });
  return { user, job, s };
}

describe("a token plan's ending captures what the job's released attempts consumed", () => {
  test("a queued cancel after a released attempt of 1,422 tokens captures 1,422", async () => {
    const user = await db.user("team");
    const r = await canceledAfterTimeout(user, { prompt: 100, completion: 1322 });
    expect(r.job).toMatchObject({ status: "canceled", consumed: 1422, captured: 1422 });
    expect((await counter(user, "tokens")).units_used).toBe(1422);
  });

  test("a running cancel after a released attempt captures it plus the running attempt's prompt and progress", async () => {
    const { user, job, s } = await inSecondAttempt({ prompt: 100, completion: 1322 });
    await rpc(svc, "record_progress", {
      p_job_id: job.id,
      p_attempt: s.job.attempts,
      p_offset: 0,
      p_text: "a few words",
      p_completion_tokens: 27,
      p_now: addSeconds(T0, 6),
    });
    const r = await rpc(svc, "cancel_job", {
      p_job_id: job.id,
      p_user_id: user,
      p_now: addSeconds(T0, 6),
    });
    expect(r.job.captured).toBe(1422 + 100 + 27);
  });

  test("two timed-out attempts (1,620 tokens) ending in the failure callback's delivery_failed capture 1,620", async () => {
    const user = await db.user("team");
    const job = await enqueued(user);
    await timedOut(job.id, T0, { prompt: 100, completion: 710 });
    await timedOut(job.id, addSeconds(T0, 10), { prompt: 100, completion: 710 });
    const r = await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "delivery_failed",
      p_error: "QStash gave up",
      p_now: addSeconds(T0, 20),
      p_seq: 1,
    });
    expect(r.job).toMatchObject({ status: "failed", consumed: 1620, captured: 1620 });
    expect(r.job.refunded_at).not.toBeNull();
    expect((await counter(user, "tokens")).units_used).toBe(1620);
  });

  test("a success after a released attempt captures both, up to the hold", async () => {
    const { user, job, s } = await inSecondAttempt({ prompt: 100, completion: 500 });
    const r = await completed(job.id, s.job.attempts, addSeconds(T0, 6), {
      prompt: 100,
      completion: 400,
    });
    expect(r.job.captured).toBe(600 + 500);
    const big = await enqueued(user, addSeconds(T0, 7));
    await timedOut(big.id, addSeconds(T0, 7), { prompt: 100, completion: 2000 });
    const s2 = await rpc(svc, "start_job", { p_job_id: big.id, p_now: addSeconds(T0, 9) });
    const r2 = await completed(big.id, s2.job.attempts, addSeconds(T0, 9), {
      prompt: 100,
      completion: 2000,
    });
    expect(r2.job.captured).toBe(100 + OUTPUT);
  });

  test("provider_misconfigured (the operator's fault) captures nothing, whatever was consumed", async () => {
    const { user, job, s } = await inSecondAttempt({ prompt: 100, completion: 900 });
    const r = await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "provider_misconfigured",
      p_attempt: s.job.attempts,
      p_now: addSeconds(T0, 6),
      p_usage: { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
    });
    expect(r.job).toMatchObject({ status: "failed", captured: 0, refund_withheld: null });
    expect((await counter(user, "tokens")).units_used).toBe(0);
  });
});

describe("a job plan's refunds after provider spend share the running-cancel bound", () => {
  // free: 1 job a day, 1 refund after spend a day.
  test("a timed-out attempt then a queued cancel: refunded once a day and counted; the next such round keeps its unit", async () => {
    const user = await db.user("free");
    const r1 = await canceledAfterTimeout(user, { prompt: 20, completion: 300 });
    expect(r1).toMatchObject({ outcome: "canceled", refunded: true });
    expect(await counter(user)).toEqual({ units_used: 0, paid_refunds: 1 });

    const second = await enqueued(user, addSeconds(T0, 60));
    await timedOut(second.id, addSeconds(T0, 60), { prompt: 20, completion: 300 });
    const got = await rpc(svc, "get_job", { p_job_id: second.id, p_user_id: user });
    expect(got.job.cancel_refunds).toBe(false);
    const r2 = await rpc(svc, "cancel_job", {
      p_job_id: second.id,
      p_user_id: user,
      p_now: addSeconds(T0, 62),
    });
    expect(r2).toMatchObject({
      outcome: "canceled",
      refunded: false,
      job: { refunded_at: null, refund_withheld: "paid_refund_limit", captured: 1 },
    });
    expect(await counter(user)).toEqual({ units_used: 1, paid_refunds: 1 });
    const again = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "round three",
      p_now: addSeconds(T0, 63),
    });
    expect(again.outcome).toBe("quota_exceeded");
  });

  test("a prompt that times the model out on every delivery (→ delivery_failed): refunded once a day, then failed with the unit kept", async () => {
    const user = await db.user("free");
    const ends: Json[] = [];
    for (let round = 0; round < 2; round++) {
      const t = addSeconds(T0, round * 100);
      const job = await enqueued(user, t);
      await timedOut(job.id, t, { prompt: 20, completion: 500 });
      await timedOut(job.id, addSeconds(t, 10), { prompt: 20, completion: 500 });
      const r = await rpc(svc, "fail_job", {
        p_job_id: job.id,
        p_reason: "delivery_failed",
        p_now: addSeconds(t, 20),
        p_seq: 1,
      });
      expect(r.outcome).toBe("failed");
      ends.push(r.job);
    }
    expect(ends.map((j) => [j.refunded_at !== null, j.refund_withheld, j.captured])).toEqual([
      [true, null, 0],
      [false, "paid_refund_limit", 1],
    ]);
    expect(await counter(user)).toEqual({ units_used: 1, paid_refunds: 1 });
    const events = await admin.query(
      "select detail from public.job_events where user_id = $1 and event = 'failed' order by id",
      [user],
    );
    expect(events.rows.map((r) => r.detail)).toMatchObject([
      { reason: "delivery_failed", refunded: true, counted: true, captured: 0, released: 1 },
      {
        reason: "delivery_failed",
        refunded: false,
        withheld: "paid_refund_limit",
        captured: 1,
        released: 0,
      },
    ]);
    // The next day the bound is fresh.
    const tomorrow = addSeconds(T0, 86_400);
    const next = await enqueued(user, tomorrow);
    await timedOut(next.id, tomorrow, { prompt: 20, completion: 500 });
    const r3 = await rpc(svc, "fail_job", {
      p_job_id: next.id,
      p_reason: "delivery_failed",
      p_now: addSeconds(tomorrow, 5),
    });
    expect(r3.job.refunded_at).not.toBeNull();
  });

  test("one bound for both: a refunded running cancel uses it, and a failure after spend is then withheld", async () => {
    const user = await db.user("free");
    const a = await enqueued(user);
    await rpc(svc, "start_job", { p_job_id: a.id, p_now: T0 });
    expect(
      (await rpc(svc, "cancel_job", { p_job_id: a.id, p_user_id: user, p_now: T0 })).refunded,
    ).toBe(true);
    const b = await enqueued(user, addSeconds(T0, 10));
    await timedOut(b.id, addSeconds(T0, 10), { prompt: 20, completion: 100 });
    const r = await rpc(svc, "fail_job", {
      p_job_id: b.id,
      p_reason: "delivery_failed",
      p_now: addSeconds(T0, 20),
    });
    expect(r.job.refund_withheld).toBe("paid_refund_limit");
    expect(await counter(user)).toEqual({ units_used: 1, paid_refunds: 1 });
  });

  test("failures with nothing consumed and operator faults refund freely past the bound, uncounted", async () => {
    const user = await db.user("pro");
    await admin.query(
      `insert into public.quota_usage (user_id, period_start, meter, units_used, paid_refunds)
       values ($1, '2026-12-01T00:00:00Z', 'jobs', 0, 20)`,
      [user],
    );
    // The worker's own 400: its usage says nothing was billed.
    const refused = await enqueued(user);
    const s = await rpc(svc, "start_job", { p_job_id: refused.id, p_now: T0 });
    const r1 = await rpc(svc, "fail_job", {
      p_job_id: refused.id,
      p_reason: "model_refused",
      p_attempt: s.job.attempts,
      p_now: T0,
      p_usage: { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
    });
    // Never started.
    const lost = await enqueued(user);
    const r2 = await rpc(svc, "fail_job", {
      p_job_id: lost.id,
      p_reason: "publish_failed",
      p_now: T0,
    });
    // A revoked key after attempts that streamed.
    const broken = await enqueued(user);
    await timedOut(broken.id, T0, { prompt: 20, completion: 300 });
    const r3 = await rpc(svc, "fail_job", {
      p_job_id: broken.id,
      p_reason: "provider_misconfigured",
      p_now: addSeconds(T0, 5),
    });
    // A queued cancel of a job no attempt ran.
    const idle = await enqueued(user);
    const r4 = await rpc(svc, "cancel_job", { p_job_id: idle.id, p_user_id: user, p_now: T0 });
    for (const r of [r1, r2, r3, r4]) {
      expect(r.job.refunded_at).not.toBeNull();
      expect(r.job.refund_withheld).toBeNull();
    }
    expect(await counter(user)).toEqual({ units_used: 0, paid_refunds: 20 });
  });

  test("the table allows a withheld refund on a failed job, but running_cancel_limit only on a canceled one", async () => {
    const user = await db.user("free");
    const job = await enqueued(user);
    await expect(
      admin.query(
        `update public.generation_jobs set status = 'failed', failure_reason = 'delivery_failed',
           finished_at = now(), refund_withheld = 'running_cancel_limit', captured = 1 where id = $1`,
        [job.id],
      ),
    ).rejects.toThrow(/running_cancel_limit_only_when_canceled/);
  });
});

describe("the account and the meter", () => {
  test("a token for a user with no auth.users row (never created, or deleted) enqueues nothing: user_not_found", async () => {
    const never = crypto.randomUUID();
    const r1 = await rpc(svc, "enqueue_job", { p_user_id: never, p_prompt: "hi", p_now: T0 });
    expect(r1).toEqual({ outcome: "user_not_found" });
    const deleted = await db.user("pro");
    await admin.query("delete from auth.users where id = $1", [deleted]);
    const r2 = await rpc(svc, "enqueue_job", { p_user_id: deleted, p_prompt: "hi", p_now: T0 });
    expect(r2).toEqual({ outcome: "user_not_found" });
    const held = await admin.query(
      `select (select count(*)::int from public.quota_usage where user_id = any($1)) as counters,
              (select count(*)::int from public.generation_jobs where user_id = any($1)) as jobs`,
      [[never, deleted]],
    );
    expect(held.rows[0]).toEqual({ counters: 0, jobs: 0 });
  });

  test("a plan change inside a period does not reinterpret the counter: jobs stay jobs, tokens stay tokens", async () => {
    // pro and team are both monthly: the same period_start.
    const user = await db.user("pro");
    for (let i = 0; i < 2; i++) {
      const job = await enqueued(user, addSeconds(T0, i));
      const s = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, i) });
      await rpc(svc, "complete_job", {
        p_job_id: job.id,
        p_attempt: s.job.attempts,
        p_output: "x",
        p_now: addSeconds(T0, i),
      });
    }
    await admin.query("update public.user_plans set plan_id = 'team' where user_id = $1", [user]);
    const asTeam = await rpc(svc, "get_usage", { p_user_id: user, p_now: addSeconds(T0, 10) });
    expect(asTeam.usage).toMatchObject({ meter: "tokens", used: 0 });
    const t = await enqueued(user, addSeconds(T0, 11));
    const s = await rpc(svc, "start_job", { p_job_id: t.id, p_now: addSeconds(T0, 11) });
    await rpc(svc, "complete_job", {
      p_job_id: t.id,
      p_attempt: s.job.attempts,
      p_output: "x",
      p_now: addSeconds(T0, 12),
      p_usage: { prompt_tokens: 81, completion_tokens: 1400, source: "provider" },
    });
    expect(
      (await rpc(svc, "get_usage", { p_user_id: user, p_now: addSeconds(T0, 13) })).usage,
    ).toMatchObject({ meter: "tokens", used: 1481 });
    // Back on pro: 1,481 tokens are not 1,481 jobs.
    await admin.query("update public.user_plans set plan_id = 'pro' where user_id = $1", [user]);
    const back = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "after the change",
      p_now: addSeconds(T0, 14),
    });
    expect(back).toMatchObject({ outcome: "enqueued", usage: { meter: "jobs", used: 3 } });
    expect([await counter(user, "jobs"), await counter(user, "tokens")]).toMatchObject([
      { units_used: 3 },
      { units_used: 1481 },
    ]);
    await expectNoDrift(admin, [user]);
  });

  test("a token plan's usage shows no running-cancel bound (it has none); a job plan's shows its own", async () => {
    const team = await db.user("team");
    const free = await db.user("free");
    const t = await rpc(svc, "get_usage", { p_user_id: team, p_now: T0 });
    expect(t.usage.max_paid_refunds).toBeNull();
    expect(t.usage.paid_refunds).toBeNull();
    const f = await rpc(svc, "get_usage", { p_user_id: free, p_now: T0 });
    expect(f.usage).toMatchObject({ paid_refunds: 0, max_paid_refunds: 1 });
  });
});
