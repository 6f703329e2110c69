/**
 * A user's erasure (public.erase_user, and the trigger when Supabase Auth deletes the user):
 * their active jobs canceled by the refund rules, then every row about them gone (the whole
 * database searched for a marker planted in all their text), the provider's bill kept only as an
 * anonymous aggregate, and the append-only rule still refusing everyone else.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { expectNoDrift, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { progressWriter } from "../support/db-progress.ts";
import { findMarker, newMarker, plantJobs, roomyPlan } from "../support/personal-data.ts";

const db = dbFixture({ fresh: true, service: 24 });
const { svc, admin } = db;
const progressed = progressWriter(db.svc);
const PLAN = "erasure_roomy";
const now = new Date();

async function userOnRoomyPlan(): Promise<string> {
  await roomyPlan(admin, PLAN);
  return db.user(PLAN);
}

async function rowsAbout(user: string) {
  const { rows } = await admin.query(
    `select (select count(*)::int from public.generation_jobs where user_id = $1) as jobs,
            (select count(*)::int from public.job_events where user_id = $1) as events,
            (select count(*)::int from public.quota_usage where user_id = $1) as usage,
            (select count(*)::int from public.user_plans where user_id = $1) as plans,
            (select count(*)::int from private.user_pseudonyms where user_id = $1) as pseudonyms,
            (select count(*)::int from auth.users where id = $1) as account`,
    [user],
  );
  return rows[0];
}

/** rowsAbout once the user is erased: no row of theirs anywhere. */
const NOTHING_LEFT = { jobs: 0, events: 0, usage: 0, plans: 0, pseudonyms: 0, account: 0 };

describe("erase_user", () => {
  test("every job in every status, then nothing of the user anywhere in the database", async () => {
    const user = await userOnRoomyPlan();
    const marker = newMarker();
    const planted = await plantJobs(svc, user, marker, now);
    await rpc(svc, "user_pseudonym", { p_user_id: user });
    // The search can fail: before the erasure it finds the marker where the text lives.
    expect(await findMarker(admin, marker)).toEqual(
      expect.arrayContaining(["public.generation_jobs"]),
    );
    const { rows: before } = await admin.query(
      "select coalesce(sum(jobs), 0)::int as jobs from public.erased_usage where plan_id = $1",
      [PLAN],
    );

    const r = await rpc(svc, "erase_user", { p_user_id: user, p_now: now });

    expect(r).toMatchObject({ outcome: "erased", jobs: 7, canceled: 4, account_deleted: true });
    const { rows: superseded } = await admin.query(
      "select count(*)::int as n from public.superseded_callbacks where job_id = $1",
      [planted.jobs.requeued],
    );
    expect(superseded[0].n).toBe(0);
    expect(await findMarker(admin, marker)).toEqual([]);
    expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
    const { rows: after } = await admin.query(
      "select coalesce(sum(jobs), 0)::int as jobs from public.erased_usage where plan_id = $1",
      [PLAN],
    );
    expect(after[0].jobs - before[0].jobs).toBe(7);
  });

  test("a job with a superseded failure callback (after a requeue) is erased; the callback row stays, without its job id", async () => {
    const user = await userOnRoomyPlan();
    const job = await db.enqueued(user);
    await db.started(job.id);
    await db.requeued(job.id, { resumeAt: new Date(Date.now() + 60_000) });
    // The first message's callback, after its last retry: superseded by the requeue's message.
    expect(
      await rpc(svc, "fail_job", { p_job_id: job.id, p_reason: "delivery_failed", p_seq: 1 }),
    ).toMatchObject({ outcome: "superseded" });
    const { rows: before } = await admin.query(
      "select id from public.superseded_callbacks where job_id = $1",
      [job.id],
    );
    expect(before).toHaveLength(1);
    expect(await rpc(svc, "user_pseudonym", { p_user_id: user })).toMatchObject({
      outcome: "pseudonym",
    });

    // Before the fix: 23503, superseded_callbacks_job_id_fkey, on every retry.
    const r = await rpc(svc, "erase_user", { p_user_id: user });

    expect(r).toMatchObject({ outcome: "erased", jobs: 1, canceled: 1, account_deleted: true });
    expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
    const { rows: after } = await admin.query(
      "select job_id, message_seq, job_seq from public.superseded_callbacks where id = $1",
      [before[0].id],
    );
    expect(after).toEqual([{ job_id: null, message_seq: 1, job_seq: 2 }]);
    // A token outliving the user gets no new pseudonym: nothing of them is written again.
    expect(await rpc(svc, "user_pseudonym", { p_user_id: user })).toEqual({
      outcome: "user_not_found",
    });
  });

  test("a user's log pseudonym: one per user however many ask at once, random, none for a user without an account", async () => {
    const [one, two] = [await userOnRoomyPlan(), await userOnRoomyPlan()];
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => rpc(svc, "user_pseudonym", { p_user_id: one })),
    );
    const pseudonym = answers[0].pseudonym as string;
    expect(pseudonym).toMatch(/^u[0-9a-f]{32}$/);
    expect(answers.map((a) => a.pseudonym)).toEqual(Array(8).fill(pseudonym));
    expect(pseudonym).not.toContain(one.replaceAll("-", ""));
    expect((await rpc(svc, "user_pseudonym", { p_user_id: two })).pseudonym).not.toBe(pseudonym);
    expect(await rpc(svc, "user_pseudonym", { p_user_id: randomUUID() })).toEqual({
      outcome: "user_not_found",
    });
  });

  test("the anonymous aggregate keeps the bill: jobs, captures and tokens, no user", async () => {
    const user = await userOnRoomyPlan();
    const period = new Date("2031-02-01T00:00:00Z");
    const at = new Date("2031-02-10T12:00:00Z");
    const job = await db.enqueued(user, { now: at });
    await db.started(job.id, { now: at });
    await rpc(svc, "complete_job", {
      p_job_id: job.id,
      p_attempt: 1,
      p_output: "x",
      p_usage: { prompt_tokens: 30, completion_tokens: 70, source: "provider" },
      p_now: at,
    });
    const running = await db.enqueued(user, { now: at });
    await db.started(running.id, { now: at });
    await progressed(running.id, { tokens: 9, text: "y", now: at });

    await rpc(svc, "erase_user", { p_user_id: user, p_now: at });

    const { rows } = await admin.query(
      "select * from public.erased_usage where plan_id = $1 and period_start = $2",
      [PLAN, period],
    );
    expect(rows).toHaveLength(1);
    // The completed job captured its unit; the running cancel was refunded (under the bound).
    // Tokens: the completed job's usage, and the canceled running attempt as the cancel charged it
    // (its prompt as counted at enqueue, its last progress).
    expect(rows[0]).toMatchObject({ kind: "document", meter: "jobs", jobs: "2", captured: "1" });
    expect(Number(rows[0].prompt_tokens)).toBe(30 + running.prompt_tokens);
    expect(Number(rows[0].completion_tokens)).toBe(70 + 9);
    const { rows: cols } = await admin.query(
      `select column_name from information_schema.columns
       where table_schema = 'public' and table_name = 'erased_usage'`,
    );
    expect(cols.map((c) => c.column_name)).not.toEqual(
      expect.arrayContaining([expect.stringMatching(/user|job_id|email/)]),
    );
  });

  test("twice: the second erases nothing and says so", async () => {
    const user = await userOnRoomyPlan();
    await db.enqueued(user);
    expect(await rpc(svc, "erase_user", { p_user_id: user })).toMatchObject({
      jobs: 1,
      canceled: 1,
      account_deleted: true,
    });
    expect(await rpc(svc, "erase_user", { p_user_id: user })).toMatchObject({
      outcome: "erased",
      jobs: 0,
      canceled: 0,
      events: 0,
      account_deleted: false,
    });
  });

  test("deleting the auth user (as Supabase Auth does) erases exactly as erase_user does", async () => {
    const user = await userOnRoomyPlan();
    const marker = newMarker();
    await plantJobs(svc, user, marker, now);

    await admin.query("delete from auth.users where id = $1", [user]);

    expect(await findMarker(admin, marker)).toEqual([]);
    expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
  });

  test("a token that outlives its user cannot enqueue again (no fresh quota)", async () => {
    const user = await userOnRoomyPlan();
    await rpc(svc, "erase_user", { p_user_id: user });
    const r = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "again" });
    expect(r.outcome).toBe("user_not_found");
    expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
  });

  test("concurrent erasures of one user: all end cleanly, the jobs counted once", async () => {
    const user = await userOnRoomyPlan();
    await plantJobs(svc, user, newMarker(), now);
    const results = await Promise.all(
      Array.from({ length: 8 }, () => rpc(svc, "erase_user", { p_user_id: user })),
    );
    expect(results.map((r) => r.outcome)).toEqual(Array(8).fill("erased"));
    expect(results.reduce((n, r) => n + r.jobs, 0)).toBe(7);
    expect(results.filter((r) => r.account_deleted)).toHaveLength(1);
    expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
  });

  test("erasure racing a worker's completion and its usage record: one order or the other, never an error or a leftover", async () => {
    const outcomes = new Set<string>();
    for (let round = 0; round < 30; round++) {
      const user = await userOnRoomyPlan();
      const job = await db.enqueued(user);
      await db.started(job.id);
      const [done, erased, usage] = await Promise.all([
        rpc(svc, "complete_job", {
          p_job_id: job.id,
          p_attempt: 1,
          p_output: "late output",
          p_usage: { prompt_tokens: 5, completion_tokens: 5, source: "provider" },
        }),
        rpc(svc, "erase_user", { p_user_id: user }),
        rpc(svc, "record_attempt_usage", {
          p_job_id: job.id,
          p_attempt: 1,
          p_usage: { prompt_tokens: 5, completion_tokens: 5, source: "counted" },
        }),
      ]);
      outcomes.add(`${done.outcome}/${erased.canceled}`);
      expect(["completed", "not_found"]).toContain(done.outcome);
      expect(["recorded", "already_recorded", "not_found"]).toContain(usage.outcome);
      // The erasure canceled the job exactly when the completion did not get there first.
      expect(erased).toMatchObject({ outcome: "erased", jobs: 1 });
      expect(erased.canceled).toBe(done.outcome === "completed" ? 0 : 1);
      expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
    }
    await expectNoDrift(admin);
    // Reported, not asserted: which order won depends on the scheduler.
    console.info("erasure vs completion orders seen:", [...outcomes].join(", "));
  });

  test("an enqueue racing the erasure either lands before it (and is erased) or is refused user_not_found", async () => {
    for (let round = 0; round < 20; round++) {
      const user = await userOnRoomyPlan();
      const [enq, erased] = await Promise.all([
        rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "racing" }),
        rpc(svc, "erase_user", { p_user_id: user }),
      ]);
      expect(["enqueued", "user_not_found"]).toContain(enq.outcome);
      expect(erased.outcome).toBe("erased");
      // enqueue asks whether the user exists under the lock the erasure holds: a job it made
      // came first and was erased; none comes after.
      expect(erased.jobs).toBe(enq.outcome === "enqueued" ? 1 : 0);
      expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
    }
  });
});

describe("enqueue against an erasure in flight", () => {
  test("an enqueue that starts while an erasure holds the user is refused user_not_found once it commits, never a job for a user that is gone", async () => {
    const user = await userOnRoomyPlan();
    const eraser = await svc.connect();
    try {
      await eraser.query("begin");
      await eraser.query("select public.erase_user(p_user_id => $1)", [user]);
      // Asked while the erasure is uncommitted: the user still exists in that snapshot.
      const enqueue = rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "in flight" });
      // The enqueue is waiting on the user's lock (polled, not slept for).
      for (let i = 0; i < 200; i++) {
        const { rows } = await admin.query(
          "select count(*)::int as n from pg_locks where locktype = 'advisory' and not granted",
        );
        if (rows[0].n > 0) break;
        await new Promise((r) => setTimeout(r, 10));
      }
      await eraser.query("commit");
      expect((await enqueue).outcome).toBe("user_not_found");
    } finally {
      eraser.release();
    }
    expect(await rowsAbout(user)).toEqual(NOTHING_LEFT);
  });
});

describe("the append-only exception is the erasure's only", () => {
  test("the service role deleting events is refused, even with the erasure flag set", async () => {
    const user = await userOnRoomyPlan();
    const job = await db.enqueued(user);
    const c = await svc.connect();
    try {
      await c.query("begin");
      await c.query("select set_config('quota_jobs.erasing', 'on', true)");
      await expect(
        c.query("delete from public.job_events where job_id = $1", [job.id]),
      ).rejects.toThrow(/append-only/);
      await c.query("rollback");
      await expect(
        svc.query("delete from public.job_events where job_id = $1", [job.id]),
      ).rejects.toThrow(/append-only/);
    } finally {
      c.release();
    }
    // The owner too, without the flag.
    await expect(
      admin.query("delete from public.job_events where job_id = $1", [job.id]),
    ).rejects.toThrow(/append-only/);
    await expect(
      admin.query("update public.job_events set detail = '{}' where job_id = $1", [job.id]),
    ).rejects.toThrow(/append-only/);
    expect(await db.events(job.id)).toHaveLength(1);
  });

  test("a final job's text cannot be blanked by the service role with the flag set", async () => {
    const user = await userOnRoomyPlan();
    const job = await db.enqueued(user);
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user });
    const c = await svc.connect();
    try {
      await c.query("begin");
      await c.query("select set_config('quota_jobs.erasing', 'on', true)");
      await expect(
        c.query(
          `update public.generation_jobs set prompt = '', input = '{}', idempotency_key = null,
             request_hash = '', erased_at = now() where id = $1`,
          [job.id],
        ),
      ).rejects.toThrow(/final/);
      await c.query("rollback");
    } finally {
      c.release();
    }
  });
});
