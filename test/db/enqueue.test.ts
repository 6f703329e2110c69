import { describe, expect, test } from "vitest";
import { addSeconds, at, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const T0 = at("2026-03-10T12:00:00Z");
const db = dbFixture({ now: T0 });
const { svc, admin } = db;

/** The job claimed and completed with `output` at `now`: its unit spent for good. */
async function succeeded(jobId: string, output: string, now = T0): Promise<void> {
  await db.started(jobId, { now });
  const c = await rpc(svc, "complete_job", {
    p_job_id: jobId,
    p_attempt: 1,
    p_output: output,
    p_now: now,
  });
  expect(c.outcome).toBe("completed");
}

/** enqueue_job with an Idempotency-Key, at T0 unless told. */
const enqueueKeyed = (user: string, prompt: string, key: string, now = T0) =>
  rpc(svc, "enqueue_job", {
    p_user_id: user,
    p_prompt: prompt,
    p_idempotency_key: key,
    p_now: now,
  });

describe("enqueue_job", () => {
  test("reserves one unit and inserts a queued job, logged as enqueued", async () => {
    const user = await db.user();
    const r = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "a report", p_now: T0 });
    expect(r.outcome).toBe("enqueued");
    expect(r.job).toMatchObject({
      status: "queued",
      user_id: user,
      plan_id: "free",
      attempts: 0,
      publish_seq: 1,
    });
    expect(r.job).not.toHaveProperty("request_hash");
    expect(r.usage).toMatchObject({ plan: "free", used: 1, limit: 1, active: 1, max_active: 1 });
    expect(new Date(r.usage.period_start).toISOString()).toBe("2026-03-10T00:00:00.000Z");
    expect(new Date(r.usage.resets_at).toISOString()).toBe("2026-03-11T00:00:00.000Z");
    const events = await admin.query(
      "select event, from_status, to_status from public.job_events where job_id = $1",
      [r.job.id],
    );
    expect(events.rows).toEqual([{ event: "enqueued", from_status: null, to_status: "queued" }]);
  });

  test("quota_exceeded with the reset time reserves nothing", async () => {
    const user = await db.user();
    const first = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "one", p_now: T0 });
    await rpc(svc, "cancel_job", { p_job_id: first.job.id, p_user_id: user, p_now: T0 });
    // canceled: the unit came back, so a second one fits; then the day is used up
    const second = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "two", p_now: T0 });
    expect(second.outcome).toBe("enqueued");
    await succeeded(second.job.id, "x");
    const third = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "three",
      p_now: addSeconds(T0, 60),
    });
    expect(third.outcome).toBe("quota_exceeded");
    expect(new Date(third.resets_at).toISOString()).toBe("2026-03-11T00:00:00.000Z");
    expect(third.usage).toMatchObject({ used: 1, limit: 1, active: 0 });
    const jobs = await admin.query(
      "select count(*)::int as n from public.generation_jobs where user_id = $1",
      [user],
    );
    expect(jobs.rows[0].n).toBe(2);
  });

  test("too_many_active_jobs reserves nothing (pro: 3 active)", async () => {
    const user = await db.user("pro");
    for (const prompt of ["a", "b", "c"]) {
      expect(
        (await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: prompt, p_now: T0 })).outcome,
      ).toBe("enqueued");
    }
    const fourth = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "d", p_now: T0 });
    expect(fourth.outcome).toBe("too_many_active_jobs");
    expect(fourth.usage).toMatchObject({
      plan: "pro",
      used: 3,
      limit: 100,
      active: 3,
      max_active: 3,
    });
    expect(new Date(fourth.usage.period_start).toISOString()).toBe("2026-03-01T00:00:00.000Z");
    expect(new Date(fourth.usage.resets_at).toISOString()).toBe("2026-04-01T00:00:00.000Z");
  });

  test("a replay with the same key and prompt returns the same job and reserves nothing", async () => {
    const user = await db.user("pro");
    const a = await enqueueKeyed(user, "same", "k1");
    const b = await enqueueKeyed(user, "same", "k1", addSeconds(T0, 5));
    expect(a.outcome).toBe("enqueued");
    expect(b.outcome).toBe("replayed");
    expect(b.job.id).toBe(a.job.id);
    expect(b.usage.used).toBe(1);
  });

  test("a replay is served even after the job ended and the quota is used up", async () => {
    const user = await db.user();
    const a = await enqueueKeyed(user, "same", "k");
    await succeeded(a.job.id, "done");
    const b = await enqueueKeyed(user, "same", "k");
    expect(b).toMatchObject({
      outcome: "replayed",
      job: { id: a.job.id, status: "succeeded", output: "done" },
    });
  });

  test("the same key with another prompt is idempotency_key_reused", async () => {
    const user = await db.user("pro");
    const a = await enqueueKeyed(user, "one", "k");
    const b = await enqueueKeyed(user, "two", "k");
    expect(b).toEqual({ outcome: "idempotency_key_reused", job_id: a.job.id });
    const usage = await rpc(svc, "get_usage", { p_user_id: user, p_now: T0 });
    expect(usage.usage.used).toBe(1);
  });

  test("keys are per user: another user's key does not collide", async () => {
    const [u1, u2] = [await db.user(), await db.user()];
    const a = await enqueueKeyed(u1, "p", "shared");
    const b = await enqueueKeyed(u2, "p", "shared");
    expect(a.outcome).toBe("enqueued");
    expect(b.outcome).toBe("enqueued");
    expect(b.job.id).not.toBe(a.job.id);
  });

  test.each([
    ["empty", ""],
    ["whitespace only", " \n\t "],
    ["over 8,000 characters", "x".repeat(8001)],
  ])("an invalid prompt (%s) is refused and reserves nothing", async (_name, prompt) => {
    const user = await db.user();
    const r = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: prompt, p_now: T0 });
    expect(r).toEqual({ outcome: "invalid_prompt" });
    expect((await rpc(svc, "get_usage", { p_user_id: user, p_now: T0 })).usage.used).toBe(0);
  });

  test("8,000 characters (of any script) is accepted", async () => {
    const user = await db.user();
    const r = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "日".repeat(8000),
      p_now: T0,
    });
    expect(r.outcome).toBe("enqueued");
  });

  test("an over-long idempotency key is refused", async () => {
    const user = await db.user();
    const r = await enqueueKeyed(user, "p", "k".repeat(256));
    expect(r).toEqual({ outcome: "invalid_idempotency_key" });
  });
});

describe("quota periods", () => {
  test("a new UTC day gives the free plan a new unit", async () => {
    const user = await db.user();
    const a = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "a",
      p_now: at("2026-03-10T23:59:59Z"),
    });
    await succeeded(a.job.id, "o", at("2026-03-10T23:59:59Z"));
    const b = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "b",
      p_now: at("2026-03-11T00:00:00Z"),
    });
    expect(b.outcome).toBe("enqueued");
    expect(b.usage).toMatchObject({ used: 1 });
  });

  test("a refund returns to the period the unit was reserved from, not the current one", async () => {
    const user = await db.user();
    const day1 = at("2026-03-10T23:00:00Z");
    const day2 = at("2026-03-11T01:00:00Z");
    const a = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "a", p_now: day1 });
    // the next day, a new job fills day 2
    const b = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "b", p_now: day2 });
    expect(b.outcome).toBe("too_many_active_jobs"); // a is still active (free: 1 active)
    const canceled = await rpc(svc, "cancel_job", {
      p_job_id: a.job.id,
      p_user_id: user,
      p_now: day2,
    });
    expect(canceled.job).toMatchObject({ status: "canceled" });
    const c = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "c", p_now: day2 });
    expect(c.outcome).toBe("enqueued");
    const rows = await admin.query(
      "select period_start, units_used from public.quota_usage where user_id = $1 order by period_start",
      [user],
    );
    expect(rows.rows.map((r) => [r.period_start.toISOString(), r.units_used])).toEqual([
      ["2026-03-10T00:00:00.000Z", 0],
      ["2026-03-11T00:00:00.000Z", 1],
    ]);
  });

  test("periods are UTC whatever the session time zone", async () => {
    const user = await db.user();
    const client = await svc.connect();
    try {
      await client.query("set time zone 'Asia/Tokyo'");
      const r = await rpc(client, "enqueue_job", {
        p_user_id: user,
        p_prompt: "tz",
        p_now: at("2026-03-10T20:00:00Z"),
      });
      expect(new Date(r.usage.period_start).toISOString()).toBe("2026-03-10T00:00:00.000Z");
      expect(new Date(r.usage.resets_at).toISOString()).toBe("2026-03-11T00:00:00.000Z");
    } finally {
      await client.query("reset time zone");
      client.release();
    }
  });
});

describe("reads", () => {
  test("get_usage for a user with no jobs", async () => {
    const user = await db.user("pro");
    const r = await rpc(svc, "get_usage", { p_user_id: user, p_now: at("2026-12-31T23:00:00Z") });
    expect(r.outcome).toBe("usage");
    expect(r.usage).toMatchObject({ plan: "pro", used: 0, limit: 100, active: 0, max_active: 3 });
    expect(new Date(r.usage.resets_at).toISOString()).toBe("2027-01-01T00:00:00.000Z");
  });

  test("get_job finds a job for its owner only", async () => {
    const [owner, other] = [await db.user(), await db.user()];
    const a = await rpc(svc, "enqueue_job", { p_user_id: owner, p_prompt: "mine", p_now: T0 });
    expect(await rpc(svc, "get_job", { p_job_id: a.job.id, p_user_id: owner })).toMatchObject({
      outcome: "found",
      job: { id: a.job.id, prompt: "mine" },
    });
    expect(await rpc(svc, "get_job", { p_job_id: a.job.id, p_user_id: other })).toEqual({
      outcome: "not_found",
    });
    expect(await rpc(svc, "get_job", { p_job_id: crypto.randomUUID(), p_user_id: owner })).toEqual({
      outcome: "not_found",
    });
  });

  test("list_jobs pages newest first with a keyset cursor", async () => {
    const user = await db.user("pro");
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await rpc(svc, "enqueue_job", {
        p_user_id: user,
        p_prompt: `p${i}`,
        p_now: addSeconds(T0, i),
      });
      if (r.outcome === "too_many_active_jobs") break;
      ids.push(r.job.id);
      await rpc(svc, "cancel_job", {
        p_job_id: r.job.id,
        p_user_id: user,
        p_now: addSeconds(T0, i),
      });
    }
    expect(ids).toHaveLength(5);
    // A page of 2, after `before` (the previous page's last job) when given.
    const pageOf2 = (before?: { created_at: string; id: string }) =>
      rpc(svc, "list_jobs", {
        p_user_id: user,
        p_limit: 2,
        ...(before ? { p_before_created_at: before.created_at, p_before_id: before.id } : {}),
      });
    const page1 = await pageOf2();
    expect(page1.jobs.map((j: { id: string }) => j.id)).toEqual([ids[4], ids[3]]);
    expect(page1.has_more).toBe(true);
    const last = page1.jobs[1];
    const page2 = await pageOf2(last);
    expect(page2.jobs.map((j: { id: string }) => j.id)).toEqual([ids[2], ids[1]]);
    const l2 = page2.jobs[1];
    const page3 = await pageOf2(l2);
    expect(page3.jobs.map((j: { id: string }) => j.id)).toEqual([ids[0]]);
    expect(page3.has_more).toBe(false);
    const other = await rpc(svc, "list_jobs", { p_user_id: await db.user() });
    expect(other).toEqual({ outcome: "listed", jobs: [], has_more: false });
  });
});

describe("idempotency after a failed publish", () => {
  test("a job failed publish_failed frees its key: the client's retry starts a new job", async () => {
    const user = await db.user();
    const a = await enqueueKeyed(user, "p", "retry-me");
    const failed = await rpc(svc, "fail_job", {
      p_job_id: a.job.id,
      p_reason: "publish_failed",
      p_now: T0,
    });
    expect(failed.job).toMatchObject({ status: "failed" });
    const { rows } = await admin.query(
      "select idempotency_key from public.generation_jobs where id = $1",
      [a.job.id],
    );
    expect(rows).toEqual([{ idempotency_key: null }]);
    const b = await enqueueKeyed(user, "p", "retry-me");
    expect(b.outcome).toBe("enqueued");
    expect(b.job.id).not.toBe(a.job.id);
    expect(b.usage.used).toBe(1);
  });

  test("any other failure keeps the key: a replay shows the failed job", async () => {
    const user = await db.user();
    const a = await enqueueKeyed(user, "p", "k");
    await rpc(svc, "fail_job", { p_job_id: a.job.id, p_reason: "delivery_failed", p_now: T0 });
    const b = await enqueueKeyed(user, "p", "k");
    expect(b).toMatchObject({ outcome: "replayed", job: { id: a.job.id, status: "failed" } });
  });
});
