import { describe, expect, test } from "vitest";
import { addSeconds, at, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const T0 = at("2026-03-10T12:00:00Z");
const db = dbFixture({ now: T0 });
const { svc, admin } = db;

async function queuedJob(plan: "free" | "pro" = "pro", now = T0) {
  const user = await db.user(plan);
  const job = await db.enqueued(user, { prompt: "write it", now });
  return { user, id: job.id as string };
}

async function runningJob(now = T0) {
  const job = await queuedJob("pro", now);
  const s = await db.started(job.id, { leaseSeconds: 90, now });
  return { ...job, attempt: s.job.attempts as number };
}

async function usedUnits(user: string) {
  const r = await admin.query(
    "select coalesce(sum(units_used), 0)::int as n from public.quota_usage where user_id = $1",
    [user],
  );
  return r.rows[0].n as number;
}

/** requeue_job of claim `attempt` until `resumeAt`, at `now`; `extra` adds other arguments. */
const requeue = (
  jobId: string,
  attempt: number,
  resumeAt: Date,
  now: Date,
  extra: Record<string, unknown> = {},
) =>
  rpc(svc, "requeue_job", {
    p_job_id: jobId,
    p_attempt: attempt,
    p_resume_at: resumeAt,
    p_now: now,
    ...extra,
  });

/** complete_job of claim `attempt` with `output`, at `now`. */
const complete = (jobId: string, attempt: number, output: string, now: Date) =>
  rpc(svc, "complete_job", { p_job_id: jobId, p_attempt: attempt, p_output: output, p_now: now });

/** The job's row as stored (an ending answers with its state only: private.ending_json). */
async function stored(id: string) {
  const r = await admin.query("select * from public.generation_jobs where id = $1", [id]);
  return r.rows[0];
}

async function events(id: string) {
  const r = await admin.query("select event from public.job_events where job_id = $1 order by id", [
    id,
  ]);
  return r.rows.map((e) => e.event as string);
}

describe("start_job", () => {
  test("claims a queued job: running, attempts + 1, a lease", async () => {
    const job = await queuedJob();
    const s = await rpc(svc, "start_job", { p_job_id: job.id, p_lease_seconds: 90, p_now: T0 });
    expect(s.outcome).toBe("started");
    expect(s.job).toMatchObject({ status: "running", attempts: 1, prompt: "write it" });
    expect(new Date(s.job.lease_expires_at).getTime()).toBe(addSeconds(T0, 90).getTime());
  });

  test("a second claim while the lease holds is already_running (no second model call)", async () => {
    const job = await runningJob();
    const again = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 89) });
    expect(again.outcome).toBe("already_running");
    expect(again.job.attempts).toBe(1);
  });

  test("after the lease expired, a delivery reclaims it (attempts 2) and the old claim can no longer finish", async () => {
    const job = await runningJob();
    const re = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 90) });
    expect(re).toMatchObject({ outcome: "started", job: { attempts: 2, status: "running" } });
    const stale = await complete(job.id, 1, "late", addSeconds(T0, 91));
    expect(stale.outcome).toBe("not_running");
    const fresh = await complete(job.id, 2, "ok", addSeconds(T0, 92));
    expect(fresh).toMatchObject({
      outcome: "completed",
      job: { status: "succeeded", attempts: 2 },
    });
    expect(await stored(job.id)).toMatchObject({ output: "ok" });
    expect(await events(job.id)).toEqual(["enqueued", "started", "reclaimed", "completed"]);
  });

  test("respects resume_at: not_ready before it, started at it", async () => {
    const job = await runningJob();
    const resumeAt = addSeconds(T0, 120);
    await db.requeued(job.id, { resumeAt, now: T0 });
    expect(
      (await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 119) })).outcome,
    ).toBe("not_ready");
    expect((await rpc(svc, "start_job", { p_job_id: job.id, p_now: resumeAt })).outcome).toBe(
      "started",
    );
  });

  test("already_final and not_found", async () => {
    const job = await queuedJob();
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    expect(await rpc(svc, "start_job", { p_job_id: job.id, p_now: T0 })).toMatchObject({
      outcome: "already_final",
      job: { status: "canceled" },
    });
    expect(await rpc(svc, "start_job", { p_job_id: crypto.randomUUID(), p_now: T0 })).toEqual({
      outcome: "not_found",
    });
  });
});

describe("complete_job", () => {
  test("stores the output; the unit stays spent", async () => {
    const job = await runningJob();
    const c = await complete(job.id, 1, "the doc", addSeconds(T0, 3));
    expect(c.job).toMatchObject({ status: "succeeded", refunded_at: null });
    expect(c.job.finished_at).not.toBeNull();
    expect(c.job).not.toHaveProperty("output");
    expect(await stored(job.id)).toMatchObject({
      status: "succeeded",
      output: "the doc",
      refunded_at: null,
      lease_expires_at: null,
    });
    expect(await usedUnits(job.user)).toBe(1);
  });

  test("a completion after a cancel is dropped: the job stays canceled and refunded", async () => {
    const job = await runningJob();
    await rpc(svc, "cancel_job", {
      p_job_id: job.id,
      p_user_id: job.user,
      p_now: addSeconds(T0, 1),
    });
    const c = await complete(job.id, 1, "late", addSeconds(T0, 2));
    expect(c).toMatchObject({ outcome: "not_running", job: { status: "canceled", output: null } });
    expect(await usedUnits(job.user)).toBe(0);
  });

  test("not_found for an unknown job", async () => {
    expect(
      await rpc(svc, "complete_job", {
        p_job_id: crypto.randomUUID(),
        p_attempt: 1,
        p_output: "x",
      }),
    ).toEqual({
      outcome: "not_found",
    });
  });
});

describe("requeue_job (provider quota)", () => {
  test("counts the hit and waits until resume_at; a new message is due (publish_seq grows)", async () => {
    const job = await runningJob();
    const r = await requeue(job.id, 1, addSeconds(T0, 30), T0, {
      p_error: "429 rate_limit_exceeded",
    });
    expect(r.outcome).toBe("requeued");
    expect(r.job).toMatchObject({
      status: "queued",
      provider_quota_hits: 1,
      publish_seq: 2,
      lease_expires_at: null,
      last_error: "429 rate_limit_exceeded",
    });
    expect(new Date(r.job.resume_at).getTime()).toBe(addSeconds(T0, 30).getTime());
    expect(await usedUnits(job.user)).toBe(1);
  });

  test("gives up by hits: the third hit fails and refunds (default max 3)", async () => {
    const job = await runningJob();
    let now = T0;
    for (let hit = 1; hit <= 3; hit++) {
      const r = await requeue(job.id, hit, addSeconds(now, 10), now);
      if (hit < 3) {
        expect(r.outcome).toBe("requeued");
        now = addSeconds(now, 10);
        expect((await rpc(svc, "start_job", { p_job_id: job.id, p_now: now })).job.attempts).toBe(
          hit + 1,
        );
      } else {
        expect(r).toMatchObject({
          outcome: "gave_up",
          by: "hits",
          job: {
            status: "failed",
            failure_reason: "provider_quota_exhausted",
            provider_quota_hits: 3,
          },
        });
        expect(r.job.refunded_at).not.toBeNull();
      }
    }
    expect(await usedUnits(job.user)).toBe(0);
    expect(await events(job.id)).toEqual([
      "enqueued",
      "started",
      "requeued",
      "started",
      "requeued",
      "started",
      "gave_up",
    ]);
  });

  test("gives up by age even on the first hit (no 39-hour wait)", async () => {
    const job = await runningJob();
    const late = addSeconds(T0, 3 * 3600 + 1);
    const re = await rpc(svc, "start_job", { p_job_id: job.id, p_now: late }); // lease long expired
    const r = await requeue(job.id, re.job.attempts, addSeconds(late, 10), late);
    expect(r).toMatchObject({
      outcome: "gave_up",
      by: "age",
      job: { status: "failed", provider_quota_hits: 1 },
    });
    expect(await usedUnits(job.user)).toBe(0);
  });

  test("gives up when the provider's resume time lies past the max age", async () => {
    const job = await runningJob();
    const r = await requeue(job.id, 1, addSeconds(T0, 4 * 3600), T0);
    expect(r).toMatchObject({ outcome: "gave_up", by: "age" });
  });

  test("limits are parameters: max hits 1 gives up at once", async () => {
    const job = await runningJob();
    const r = await requeue(job.id, 1, addSeconds(T0, 5), T0, { p_max_hits: 1 });
    expect(r.outcome).toBe("gave_up");
  });

  test("not_running for a stale claim or a canceled job; not_found", async () => {
    const job = await runningJob();
    expect((await requeue(job.id, 7, T0, T0)).outcome).toBe("not_running");
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    expect((await requeue(job.id, 1, T0, T0)).outcome).toBe("not_running");
    expect(
      await rpc(svc, "requeue_job", {
        p_job_id: crypto.randomUUID(),
        p_attempt: 1,
        p_resume_at: T0,
      }),
    ).toEqual({ outcome: "not_found" });
  });
});

describe("release_job (transient error)", () => {
  test("puts the job back without counting a quota hit", async () => {
    const job = await runningJob();
    const r = await rpc(svc, "release_job", {
      p_job_id: job.id,
      p_attempt: 1,
      p_error: "timeout",
      p_now: addSeconds(T0, 45),
    });
    expect(r.job).toMatchObject({
      status: "queued",
      provider_quota_hits: 0,
      lease_expires_at: null,
      resume_at: null,
      publish_seq: 1,
      last_error: "timeout",
    });
    const again = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 60) });
    expect(again.job.attempts).toBe(2);
  });

  test("not_running for a stale claim, not_found for none", async () => {
    const job = await runningJob();
    expect(
      (await rpc(svc, "release_job", { p_job_id: job.id, p_attempt: 2, p_now: T0 })).outcome,
    ).toBe("not_running");
    expect(await rpc(svc, "release_job", { p_job_id: crypto.randomUUID(), p_attempt: 1 })).toEqual({
      outcome: "not_found",
    });
  });
});

describe("fail_job", () => {
  test("fails a running job with its claim and refunds once", async () => {
    const job = await runningJob();
    const r = await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "model_refused",
      p_error: "400",
      p_attempt: 1,
      p_now: T0,
    });
    expect(r.job).toMatchObject({ status: "failed", failure_reason: "model_refused" });
    expect(await stored(job.id)).toMatchObject({ status: "failed", last_error: "400" });
    expect(await usedUnits(job.user)).toBe(0);
    const again = await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "delivery_failed",
      p_now: T0,
    });
    expect(again).toMatchObject({
      outcome: "already_final",
      job: { failure_reason: "model_refused" },
    });
    expect(await usedUnits(job.user)).toBe(0);
  });

  test("without a claim (failure callback) it fails a queued or running job", async () => {
    const queued = await queuedJob();
    expect(
      (await rpc(svc, "fail_job", { p_job_id: queued.id, p_reason: "publish_failed", p_now: T0 }))
        .outcome,
    ).toBe("failed");
    const running = await runningJob();
    expect(
      (await rpc(svc, "fail_job", { p_job_id: running.id, p_reason: "delivery_failed", p_now: T0 }))
        .outcome,
    ).toBe("failed");
  });

  test("with a stale claim it is not_running and changes nothing", async () => {
    const job = await runningJob();
    expect(
      (
        await rpc(svc, "fail_job", {
          p_job_id: job.id,
          p_reason: "model_refused",
          p_attempt: 2,
          p_now: T0,
        })
      ).outcome,
    ).toBe("not_running");
    expect(await usedUnits(job.user)).toBe(1);
  });

  describe("the failure callback names its message (p_seq, the job's publish_seq when it was published)", () => {
    /** Running under attempt 2, its message seq 2: attempt 1 hit a 429, was requeued and a new message published. */
    async function requeuedAndClaimedAgain() {
      const job = await runningJob();
      const r = await requeue(job.id, 1, addSeconds(T0, 30), T0, {
        p_error: "429 rate_limit_exceeded",
      });
      expect(r.job).toMatchObject({ status: "queued", publish_seq: 2 });
      const s = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 30) });
      expect(s.job).toMatchObject({ status: "running", attempts: 2, publish_seq: 2 });
      return job;
    }
    const row = async (id: string) =>
      (
        await admin.query(
          `select status, failure_reason, attempts, publish_seq, lease_expires_at, refunded_at,
             updated_at from public.generation_jobs where id = $1`,
          [id],
        )
      ).rows[0];
    /** The failure callback of message `seq` (undefined: one published before the field). */
    const failureCallback = (jobId: string, seq: number | undefined, now: Date) =>
      rpc(svc, "fail_job", {
        p_job_id: jobId,
        p_reason: "delivery_failed",
        ...(seq === undefined ? {} : { p_seq: seq }),
        p_now: now,
      });

    test("from an older message than the job's: superseded, nothing changes, no refund, no event", async () => {
      const job = await requeuedAndClaimedAgain();
      const before = await row(job.id);
      const eventsBefore = await events(job.id);
      const r = await rpc(svc, "fail_job", {
        p_job_id: job.id,
        p_reason: "delivery_failed",
        p_error: "delivery failed: last status 503 after 1 retries",
        p_seq: 1,
        p_now: addSeconds(T0, 31),
      });
      expect(r).toMatchObject({
        outcome: "superseded",
        job: { status: "running", attempts: 2, publish_seq: 2 },
      });
      expect(await row(job.id)).toEqual(before);
      expect(await events(job.id)).toEqual(eventsBefore);
      expect(await usedUnits(job.user)).toBe(1);
      // The worker that holds the claim still owns the job's fate.
      const done = await complete(job.id, 2, "the doc", addSeconds(T0, 32));
      expect(done).toMatchObject({ outcome: "completed", job: { status: "succeeded" } });
      expect(await usedUnits(job.user)).toBe(1);
    });

    test("from an older message on a queued job: superseded too (its current message decides)", async () => {
      const job = await runningJob();
      await requeue(job.id, 1, addSeconds(T0, 30), T0);
      const r = await failureCallback(job.id, 1, addSeconds(T0, 1));
      expect(r).toMatchObject({ outcome: "superseded", job: { status: "queued" } });
      expect(await usedUnits(job.user)).toBe(1);
    });

    test("from the job's current message: fails and refunds, as before", async () => {
      const job = await requeuedAndClaimedAgain();
      const r = await failureCallback(job.id, 2, addSeconds(T0, 31));
      expect(r).toMatchObject({
        outcome: "failed",
        job: {
          status: "failed",
          failure_reason: "delivery_failed",
          refunded_at: expect.any(String),
        },
      });
      expect(await usedUnits(job.user)).toBe(0);
      expect((await events(job.id)).at(-1)).toBe("failed");
    });

    test("without a seq (a message published before the field existed): fails and refunds, as before", async () => {
      const job = await requeuedAndClaimedAgain();
      const r = await failureCallback(job.id, undefined, addSeconds(T0, 31));
      expect(r).toMatchObject({ outcome: "failed", job: { failure_reason: "delivery_failed" } });
      expect(await usedUnits(job.user)).toBe(0);
    });

    test("a seq newer than the job's is no known superseded message: treated as current", async () => {
      const job = await runningJob();
      const r = await failureCallback(job.id, 7, T0);
      expect(r.outcome).toBe("failed");
      expect(await usedUnits(job.user)).toBe(0);
    });

    test("on a final job an older message is already_final, as every caller is", async () => {
      const job = await requeuedAndClaimedAgain();
      await complete(job.id, 2, "ok", addSeconds(T0, 31));
      const r = await failureCallback(job.id, 1, addSeconds(T0, 32));
      expect(r).toMatchObject({ outcome: "already_final", job: { status: "succeeded" } });
      expect(await usedUnits(job.user)).toBe(1);
    });
  });

  test("an unknown reason is refused by the table, and nothing changes", async () => {
    const job = await runningJob();
    await expect(
      rpc(svc, "fail_job", { p_job_id: job.id, p_reason: "because", p_now: T0 }),
    ).rejects.toMatchObject({ code: "23514" });
    expect(await usedUnits(job.user)).toBe(1);
  });

  test("not_found", async () => {
    expect(
      await rpc(svc, "fail_job", { p_job_id: crypto.randomUUID(), p_reason: "delivery_failed" }),
    ).toEqual({ outcome: "not_found" });
  });
});

describe("cancel_job", () => {
  test("the owner cancels a queued job and gets the unit back", async () => {
    const job = await queuedJob("free");
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    expect(r.job).toMatchObject({ status: "canceled", failure_reason: null });
    expect(r.job.refunded_at).not.toBeNull();
    expect(await usedUnits(job.user)).toBe(0);
  });

  test("a finished job is already_finished, another user's job is not_found", async () => {
    const job = await queuedJob();
    const stranger = await db.user();
    expect(
      await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: stranger, p_now: T0 }),
    ).toEqual({ outcome: "not_found" });
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    expect(
      await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 }),
    ).toMatchObject({
      outcome: "already_finished",
    });
    expect(await usedUnits(job.user)).toBe(0);
  });
});

describe("cancel_job: a running job's refund is bounded by the plan", () => {
  async function startedFreeJob(user: string, now: Date) {
    const e = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "write it", p_now: now });
    expect(e.outcome).toBe("enqueued");
    const s = await rpc(svc, "start_job", { p_job_id: e.job.id, p_lease_seconds: 90, p_now: now });
    expect(s.outcome).toBe("started");
    return e.job.id as string;
  }
  async function counter(user: string) {
    const r = await admin.query(
      "select units_used, paid_refunds from public.quota_usage where user_id = $1",
      [user],
    );
    return r.rows[0];
  }
  async function cancelEvent(id: string) {
    const r = await admin.query(
      "select from_status, detail from public.job_events where job_id = $1 and event = 'canceled'",
      [id],
    );
    return r.rows;
  }

  test("a free user's first running cancel of the day refunds; the second keeps the unit spent", async () => {
    const user = await db.user("free");
    const first = await startedFreeJob(user, T0);
    const r1 = await rpc(svc, "cancel_job", { p_job_id: first, p_user_id: user, p_now: T0 });
    expect(r1).toMatchObject({
      outcome: "canceled",
      refunded: true,
      job: { refund_withheld: null },
    });
    expect(r1.job.refunded_at).not.toBeNull();
    expect(await counter(user)).toEqual({ units_used: 0, paid_refunds: 1 });

    const second = await startedFreeJob(user, addSeconds(T0, 60));
    const got = await rpc(svc, "get_job", { p_job_id: second, p_user_id: user });
    expect(got.job.cancel_refunds).toBe(false);
    const r2 = await rpc(svc, "cancel_job", {
      p_job_id: second,
      p_user_id: user,
      p_now: addSeconds(T0, 61),
    });
    expect(r2).toMatchObject({
      outcome: "canceled",
      refunded: false,
      job: { status: "canceled", refunded_at: null, refund_withheld: "running_cancel_limit" },
    });
    expect(await counter(user)).toEqual({ units_used: 1, paid_refunds: 1 });
    expect(await cancelEvent(second)).toEqual([
      {
        from_status: "running",
        detail: { refunded: false, reason: "running_cancel_limit", captured: 1, released: 0 },
      },
    ]);
    // The unit stays spent: the day's quota is used up.
    const third = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "again",
      p_now: addSeconds(T0, 62),
    });
    expect(third.outcome).toBe("quota_exceeded");
    // The next day the budget is fresh.
    const tomorrow = addSeconds(T0, 86_400);
    const next = await startedFreeJob(user, tomorrow);
    expect(
      (await rpc(svc, "get_job", { p_job_id: next, p_user_id: user })).job.cancel_refunds,
    ).toBe(true);
    const r3 = await rpc(svc, "cancel_job", { p_job_id: next, p_user_id: user, p_now: tomorrow });
    expect(r3.refunded).toBe(true);
  });

  test("a queued job's cancel refunds even when the running-cancel budget is spent", async () => {
    const job = await queuedJob("free");
    await admin.query("update public.quota_usage set paid_refunds = 1 where user_id = $1", [
      job.user,
    ]);
    const listed = await rpc(svc, "list_jobs", { p_user_id: job.user });
    expect(listed.jobs[0].cancel_refunds).toBe(true);
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    expect(r).toMatchObject({ outcome: "canceled", refunded: true });
    expect(await counter(job.user)).toEqual({ units_used: 0, paid_refunds: 1 });
    expect(await cancelEvent(job.id)).toEqual([
      { from_status: "queued", detail: { refunded: true, captured: 0, released: 1 } },
    ]);
  });

  test("a plan without a bound refunds as many running cancels as it has units", async () => {
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
       values ('two_a_day', 'Two', 'day', 2, 1) on conflict (id) do nothing`,
    );
    const user = await db.user("free");
    await admin.query("insert into public.user_plans (user_id, plan_id) values ($1, 'two_a_day')", [
      user,
    ]);
    const refunded: boolean[] = [];
    for (let i = 0; i < 3; i++) {
      const now = addSeconds(T0, i * 10);
      const id = await startedFreeJob(user, now);
      refunded.push(
        (await rpc(svc, "cancel_job", { p_job_id: id, p_user_id: user, p_now: now })).refunded,
      );
    }
    expect(refunded).toEqual([true, true, false]);
  });

  test("the table refuses a withheld refund on anything but a canceled job, and both at once", async () => {
    const job = await queuedJob();
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    const other = await queuedJob();
    await expect(
      svc.query(
        "update public.generation_jobs set refund_withheld = 'running_cancel_limit' where id = $1",
        [other.id],
      ),
    ).rejects.toThrow(/withheld_only_when_canceled|refunded_iff/);
    await expect(
      svc.query(
        `update public.generation_jobs set status = 'canceled', finished_at = now(), refunded_at = now(),
           refund_withheld = 'running_cancel_limit', lease_expires_at = null, resume_at = null,
           captured = 0 where id = $1`,
        [other.id],
      ),
    ).rejects.toThrow(/refunded_iff/);
  });
});

describe("the database itself refuses bad states", () => {
  test("a final job cannot be changed, even by a direct update as the service role", async () => {
    const job = await queuedJob();
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    await expect(
      svc.query(
        "update public.generation_jobs set status = 'succeeded', refunded_at = null, output = 'x' where id = $1",
        [job.id],
      ),
    ).rejects.toThrow(/final/);
    await expect(
      svc.query("update public.generation_jobs set refunded_at = now() where id = $1", [job.id]),
    ).rejects.toThrow(/final/);
  });

  test("a failed or canceled job without a refund, or a refunded success, is unrepresentable", async () => {
    const job = await runningJob();
    await expect(
      svc.query(
        "update public.generation_jobs set status = 'failed', failure_reason = 'model_refused', finished_at = now(), lease_expires_at = null where id = $1",
        [job.id],
      ),
    ).rejects.toMatchObject({ code: "23514" });
    await expect(
      svc.query(
        "update public.generation_jobs set status = 'succeeded', finished_at = now(), refunded_at = now(), lease_expires_at = null where id = $1",
        [job.id],
      ),
    ).rejects.toMatchObject({ code: "23514" });
  });

  test("job_events is append-only", async () => {
    const job = await queuedJob();
    await expect(
      svc.query("delete from public.job_events where job_id = $1", [job.id]),
    ).rejects.toThrow(/append-only/);
    await expect(
      svc.query("update public.job_events set event = 'x' where job_id = $1", [job.id]),
    ).rejects.toThrow(/append-only/);
  });
});

describe("requeue_job without a hit (the shared provider gate was closed)", () => {
  test("defers until the gate's time and counts nothing, however often", async () => {
    const job = await runningJob();
    let now = T0;
    for (let i = 1; i <= 5; i++) {
      const r = await requeue(job.id, i, addSeconds(now, 10), now, { p_count_hit: false });
      expect(r).toMatchObject({
        outcome: "requeued",
        job: { provider_quota_hits: 0, publish_seq: i + 1 },
      });
      now = addSeconds(now, 10);
      await rpc(svc, "start_job", { p_job_id: job.id, p_now: now });
    }
  });

  test("still gives up by age", async () => {
    const job = await runningJob();
    const r = await requeue(job.id, 1, addSeconds(T0, 4 * 3600), T0, { p_count_hit: false });
    expect(r).toMatchObject({
      outcome: "gave_up",
      by: "age",
      job: { provider_quota_hits: 0, status: "failed" },
    });
  });
});
