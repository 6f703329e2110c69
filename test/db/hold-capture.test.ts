import { describe, expect, test } from "vitest";
import { addSeconds, at, expectNoDrift, type Json, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { progressWriter } from "../support/db-progress.ts";

// Hold → capture on a token plan (docs/DESIGN.md#invariant-2-exactly-once-refund):
// each ending's capture, then racing real clients where the assertion is the invariant,
// counter = open holds + captures, and never more captured than held.
const T0 = at("2026-12-01T10:00:00Z");
const db = dbFixture({ fresh: true, service: 40, noDrift: "file", now: T0 });
const { svc, admin } = db;
const progressed = progressWriter(db.svc, T0);
const OUTPUT = 2048; // the team plan's max_output_tokens

const counter = async (user: string) => (await db.usage(user)).units_used;
const enqueued = (user: string, promptTokens = 100, now = T0): Promise<Json> =>
  db.enqueued(user, { promptTokens, now });
const running = async (user: string, promptTokens = 100, now = T0): Promise<Json> =>
  (await db.started((await enqueued(user, promptTokens, now)).id, { now })).job;
/** fail_job for `reason` at T0, the worker's usage unknown. */
const fail = (jobId: string, reason: string): Promise<Json> =>
  rpc(svc, "fail_job", { p_job_id: jobId, p_reason: reason, p_now: T0 });
/** complete_job on attempt 1 at T0, with the provider's usage when given. */
const complete = (
  jobId: string,
  output: string,
  usage?: { prompt_tokens: number; completion_tokens: number },
): Promise<Json> =>
  rpc(svc, "complete_job", {
    p_job_id: jobId,
    p_attempt: 1,
    p_output: output,
    p_now: T0,
    ...(usage ? { p_usage: { ...usage, source: "provider" } } : {}),
  });

/** The invariant per job: final jobs captured once, within the hold; active jobs captured nothing. */
async function expectCapturedWithinHold(users: string[]): Promise<void> {
  const { rows } = await admin.query(
    `select id from public.generation_jobs where user_id = any($1) and not (
       case when status in ('queued', 'running') then captured is null
            else captured between 0 and hold end)`,
    [users],
  );
  expect(rows).toEqual([]);
}

describe("a token plan holds the most a job can cost and captures what it consumed", () => {
  test("enqueue holds the prompt's tokens plus the plan's output bound; the usage says tokens", async () => {
    const user = await db.user("team");
    const r = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "a haiku about queues",
      p_prompt_tokens: 262,
      p_now: T0,
    });
    expect(r).toMatchObject({
      outcome: "enqueued",
      job: { meter: "tokens", prompt_tokens: 262, hold: 262 + OUTPUT, captured: null },
      usage: { meter: "tokens", used: 262 + OUTPUT, limit: 2_000_000 },
    });
    expect(await counter(user)).toBe(262 + OUTPUT);
    const u = await rpc(svc, "get_usage", { p_user_id: user, p_now: T0 });
    expect(u.usage).toMatchObject({ meter: "tokens", used: 2310, held: 2310, active: 1 });
  });

  test("without a count, enqueue holds the prompt's UTF-8 bytes plus the framing: never less than it costs", async () => {
    const user = await db.user("team");
    const r = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "héllo", p_now: T0 });
    expect(r.job).toMatchObject({ prompt_tokens: 6 + 8, hold: 6 + 8 + OUTPUT });
  });

  test("a negative count is refused as an invalid prompt, holding nothing", async () => {
    const user = await db.user("team");
    const r = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "x",
      p_prompt_tokens: -1,
      p_now: T0,
    });
    expect(r.outcome).toBe("invalid_prompt");
    expect(await counter(user)).toBe(0);
  });

  test("succeeded captures the provider's prompt + completion tokens and releases the rest", async () => {
    const user = await db.user("team");
    const job = await running(user, 100);
    const r = await complete(job.id, "done", { prompt_tokens: 97, completion_tokens: 400 });
    expect(r.job).toMatchObject({ status: "succeeded", hold: 100 + OUTPUT, captured: 497 });
    expect(await counter(user)).toBe(497);
  });

  test("succeeded never captures more than the hold, and captures the hold when no usage came", async () => {
    const user = await db.user("team");
    const over = await running(user, 10);
    const r1 = await complete(over.id, "long", { prompt_tokens: 50, completion_tokens: 5000 });
    expect(r1.job.captured).toBe(10 + OUTPUT);
    const bare = await running(user, 10, addSeconds(T0, 1));
    const r2 = await complete(bare.id, "x");
    expect(r2.job.captured).toBe(10 + OUTPUT);
    expect(await counter(user)).toBe(2 * (10 + OUTPUT));
  });

  test.each(["model_refused", "delivery_failed"])(
    "failed (%s) while running, without the worker's usage, captures the prompt and the last progress write",
    async (reason) => {
      const user = await db.user("team");
      const job = await running(user);
      await progressed(job.id, { tokens: 300, text: "half" });
      const r = await fail(job.id, reason);
      expect(r.job).toMatchObject({ status: "failed", captured: 400, refund_withheld: null });
      expect(r.job.refunded_at).not.toBeNull();
      expect(await counter(user)).toBe(400);
    },
  );

  test("failed by the worker with its usage captures that usage (a 400 bills nothing: 0)", async () => {
    const user = await db.user("team");
    const job = await running(user);
    const r = await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "model_refused",
      p_attempt: 1,
      p_now: T0,
      p_usage: { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
    });
    expect(r.job).toMatchObject({ status: "failed", captured: 0 });
    expect(await counter(user)).toBe(0);
  });

  test("a publish failure (never started) captures nothing", async () => {
    const user = await db.user("team");
    const job = await enqueued(user);
    const r = await fail(job.id, "publish_failed");
    expect(r.job).toMatchObject({ status: "failed", captured: 0 });
    expect(await counter(user)).toBe(0);
  });

  test("the sweeper's failure of a running job captures what SQL knows it consumed (its prompt)", async () => {
    const user = await db.user("team");
    const job = await running(user);
    await rpc(svc, "sweep_jobs", { p_now: addSeconds(T0, 3600), p_max_age_seconds: 600 });
    const got = await rpc(svc, "get_job", { p_job_id: job.id, p_user_id: user });
    expect(got.job).toMatchObject({ status: "failed", captured: 100 });
    expect(await counter(user)).toBe(100);
  });

  test("a queued cancel captures nothing", async () => {
    const user = await db.user("team");
    const job = await enqueued(user);
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r).toMatchObject({ outcome: "canceled", refunded: true, job: { captured: 0 } });
    expect(await counter(user)).toBe(0);
  });

  test("a running cancel captures the prompt and the tokens of the last progress write, with no bound", async () => {
    const user = await db.user("team");
    const captured: number[] = [];
    for (let i = 0; i < 5; i++) {
      const now = addSeconds(T0, i);
      const job = await running(user, 120, now);
      expect(
        (await rpc(svc, "get_job", { p_job_id: job.id, p_user_id: user })).job.cancel_refunds,
      ).toBe(true);
      await progressed(job.id, { tokens: 40 * (i + 1), now });
      const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: now });
      expect(r).toMatchObject({ outcome: "canceled", refunded: true });
      expect(r.job.refund_withheld).toBeNull();
      captured.push(r.job.captured);
    }
    expect(captured).toEqual([160, 200, 240, 280, 320]);
    expect(await counter(user)).toBe(160 + 200 + 240 + 280 + 320);
    const events = await admin.query(
      "select detail from public.job_events where user_id = $1 and event = 'canceled' order by at",
      [user],
    );
    expect(events.rows[0].detail).toEqual({
      refunded: true,
      captured: 160,
      released: 120 + OUTPUT - 160,
    });
  });

  test("a cancel never captures more than the hold", async () => {
    const user = await db.user("team");
    const job = await running(user, 10);
    await progressed(job.id, { tokens: 99_999, text: "x" });
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r.job.captured).toBe(10 + OUTPUT);
  });

  test("the table refuses a capture above the hold, or a final job without one", async () => {
    const user = await db.user("team");
    const job = await running(user, 10);
    await expect(
      admin.query(
        `update public.generation_jobs set status = 'succeeded', finished_at = now(),
           lease_expires_at = null, captured = hold + 1 where id = $1`,
        [job.id],
      ),
    ).rejects.toThrow(/captured_within_hold/);
    await expect(
      admin.query(
        `update public.generation_jobs set status = 'succeeded', finished_at = now(),
           lease_expires_at = null where id = $1`,
        [job.id],
      ),
    ).rejects.toThrow(/captured_iff_final/);
  });

  test("a job plan keeps today's rule: succeeded keeps 1, failed and canceled 0", async () => {
    const user = await db.user("pro");
    const a = await running(user);
    const b = await running(user);
    const c = await enqueued(user);
    expect(a.hold).toBe(1);
    await complete(a.id, "x");
    await fail(b.id, "delivery_failed");
    await rpc(svc, "cancel_job", { p_job_id: c.id, p_user_id: user, p_now: T0 });
    const { rows } = await admin.query(
      "select id, captured from public.generation_jobs where user_id = $1",
      [user],
    );
    expect(Object.fromEntries(rows.map((r) => [r.id, r.captured]))).toEqual({
      [a.id]: 1,
      [b.id]: 0,
      [c.id]: 0,
    });
    expect(await counter(user)).toBe(1);
  });
});

describe("races on a token plan: counter = open holds + captures", () => {
  const ROUNDS = 50;

  test(`20 concurrent enqueues at the token limit never over-hold (${ROUNDS} rounds)`, async () => {
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_output_tokens, meter)
       values ('tokens_small', 'Small', 'day', 5000, 20, 1000, 'tokens') on conflict (id) do nothing`,
    );
    const users: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("tokens_small");
      users.push(user);
      // Each holds 1,200: four fit in 5,000, the fifth would not.
      const results = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          rpc(svc, "enqueue_job", {
            p_user_id: user,
            p_prompt: `p${i}`,
            p_prompt_tokens: 200,
            p_now: T0,
          }),
        ),
      );
      expect(results.filter((r) => r.outcome === "enqueued")).toHaveLength(4);
      expect(results.filter((r) => r.outcome === "quota_exceeded")).toHaveLength(16);
      expect(await counter(user)).toBe(4800);
    }
    await expectNoDrift(admin, users);
  });

  test(`cancel, complete and the failure callback racing one running job: exactly one capture (${ROUNDS} rounds)`, async () => {
    const users: string[] = [];
    const winners: Record<string, number> = {};
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("team");
      users.push(user);
      const job = await running(user, 50);
      await progressed(job.id, { tokens: 30, text: "p" });
      const results = await Promise.all([
        rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 }),
        complete(job.id, "o", { prompt_tokens: 50, completion_tokens: 700 }),
        fail(job.id, "delivery_failed"),
        rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 }),
      ]);
      const won = results.filter((r) => ["canceled", "completed", "failed"].includes(r.outcome));
      expect(won).toHaveLength(1);
      winners[won[0].outcome] = (winners[won[0].outcome] ?? 0) + 1;
      // Every ending captures what SQL knows was consumed: the cancel and the callback the prompt
      // and the last progress write, the completion the provider's usage.
      const expected = { canceled: 80, completed: 750, failed: 80 }[won[0].outcome as string];
      expect(await counter(user)).toBe(expected);
      const events = await admin.query(
        "select count(*)::int as n from public.job_events where job_id = $1 and detail ? 'captured'",
        [job.id],
      );
      expect(events.rows[0].n).toBe(1);
    }
    await expectNoDrift(admin, users);
    await expectCapturedWithinHold(users);
    console.log("token-plan race winners:", winners);
  });
});

describe("a retry cannot double the bill: at most 2 × hold across a token plan's attempts", () => {
  const usage = (completion: number) => ({
    prompt_tokens: 100,
    completion_tokens: completion,
    source: "counted",
  });

  test("releases count what each attempt consumed; the one that reaches the bound fails the job and captures all it consumed, up to the hold", async () => {
    const user = await db.user("team");
    const job = await running(user, 100); // hold 2,148
    const r1 = await rpc(svc, "release_job", {
      p_job_id: job.id,
      p_attempt: 1,
      p_error: "transient: no response",
      p_now: T0,
      p_usage: usage(500),
    });
    expect(r1.outcome).toBe("released");
    expect(r1.job.consumed).toBe(600);
    await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 10) });
    // The second attempt streams until the time budget: 600 + 1,700 + a hold > 2 × hold.
    const r2 = await rpc(svc, "release_job", {
      p_job_id: job.id,
      p_attempt: 2,
      p_error: "transient: no response",
      p_now: addSeconds(T0, 20),
      p_usage: usage(1600),
    });
    expect(r2.outcome).toBe("budget_exhausted");
    expect(r2.job).toMatchObject({
      status: "failed",
      failure_reason: "attempt_budget_exhausted",
      consumed: 2300,
      // All the job consumed (its earlier attempt too), up to the hold.
      captured: 100 + OUTPUT,
    });
    expect(await counter(user)).toBe(100 + OUTPUT);
  });

  test("a job plan's releases are not bounded by tokens", async () => {
    const user = await db.user("pro");
    const job = await running(user);
    const r = await rpc(svc, "release_job", {
      p_job_id: job.id,
      p_attempt: 1,
      p_now: T0,
      p_usage: usage(100_000),
    });
    expect(r.outcome).toBe("released");
  });

  test("a reclaim counts the dead attempt's last progress; a claim that could cross 2 × hold ends the job capturing what was consumed, up to the hold", async () => {
    const user = await db.user("team");
    const job = await running(user, 100); // hold 2,148
    await progressed(job.id, { tokens: 900, text: "x" });
    // The worker died; its lease expires and the next delivery reclaims: 1,000 consumed.
    const again = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 100) });
    expect(again).toMatchObject({ outcome: "started", job: { attempts: 2, consumed: 1000 } });
    await progressed(job.id, { tokens: 1100, text: "y", attempt: 2, now: addSeconds(T0, 101) });
    // It dies too: 1,000 + 1,200 + a hold > 2 × hold, so no third attempt.
    const third = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 200) });
    expect(third).toMatchObject({
      outcome: "budget_exhausted",
      job: { status: "failed", failure_reason: "attempt_budget_exhausted", captured: 100 + OUTPUT },
    });
    expect(await counter(user)).toBe(100 + OUTPUT);
  });
});
