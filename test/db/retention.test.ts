/**
 * Retention (public.retention_batch): the text of jobs finished before the cutoff is erased
 * (the whole database searched for a marker planted in all of it), recent and active jobs keep
 * theirs, accounting reads the same numbers after as before, batches are bounded, index-walked
 * and shared by concurrent runs.
 */
import { describe, expect, test } from "vitest";
import { expectNoDrift, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { findMarker, newMarker, plantJobs, roomyPlan } from "../support/personal-data.ts";

const db = dbFixture({ fresh: true, service: 12 });
const { svc, admin } = db;
const PLAN = "retention_roomy";
const DAY = 86_400_000;

/** Every job of the user ended at `now` (the planted active ones canceled). */
async function allFinished(user: string, now: Date) {
  const { rows } = await admin.query(
    "select id from public.generation_jobs where user_id = $1 and finished_at is null",
    [user],
  );
  for (const r of rows) {
    const c = await rpc(svc, "cancel_job", { p_job_id: r.id, p_user_id: user, p_now: now });
    expect(c.outcome).toBe("canceled");
  }
}

/** Everything accounting reads of the user's jobs, and their usage. */
async function accounting(user: string) {
  const { rows } = await admin.query(
    `select to_jsonb(j) - array['prompt', 'input', 'output', 'partial_output', 'last_error',
              'idempotency_key', 'request_hash', 'erased_at'] as row
     from public.generation_jobs j where user_id = $1 order by id`,
    [user],
  );
  const { rows: events } = await admin.query(
    "select * from public.job_events where user_id = $1 order by id",
    [user],
  );
  const { rows: usage } = await admin.query(
    "select * from public.quota_usage where user_id = $1 order by period_start, meter",
    [user],
  );
  return { jobs: rows.map((r) => r.row), events, usage };
}

/** A user of the roomy plan with `n` jobs canceled `daysAgo` days ago, waiting for retention. */
async function userWithCanceled(n: number, daysAgo: number): Promise<string> {
  await roomyPlan(admin, PLAN);
  const user = await db.user(PLAN);
  const at = new Date(Date.now() - daysAgo * DAY);
  for (let i = 0; i < n; i++) {
    const j = await db.enqueued(user, { now: at });
    await rpc(svc, "cancel_job", { p_job_id: j.id, p_user_id: user, p_now: at });
  }
  return user;
}

async function retainUntilDone(before: Date, limit = 1000): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await rpc(svc, "retention_batch", { p_before: before, p_limit: limit });
    total += n;
    if (n < limit) return total;
  }
}

describe("retention_batch", () => {
  test("old finished jobs lose every trace of their text; recent and active jobs keep theirs; accounting is unchanged", async () => {
    await roomyPlan(admin, PLAN);
    const now = new Date();
    const old = new Date(now.getTime() - 40 * DAY);
    const oldUser = await db.user(PLAN);
    const oldMarker = newMarker();
    await plantJobs(svc, oldUser, oldMarker, old);
    await allFinished(oldUser, old);
    const recentUser = await db.user(PLAN);
    const recentMarker = newMarker();
    const recent = await plantJobs(svc, recentUser, recentMarker, new Date(now.getTime() - DAY));
    const before = await accounting(oldUser);
    const recentBefore = await accounting(recentUser);
    // The failed job's streamed text is in its output chunks, as it kept its partial output.
    expect(await findMarker(admin, oldMarker)).toEqual([
      "public.generation_jobs",
      "public.job_output_chunks",
    ]);

    const erased = await retainUntilDone(new Date(now.getTime() - 30 * DAY));

    expect(erased).toBeGreaterThanOrEqual(7);
    expect(await findMarker(admin, oldMarker)).toEqual([]);
    expect(await accounting(oldUser)).toEqual(before);
    expect(await accounting(recentUser)).toEqual(recentBefore);
    const { rows } = await admin.query(
      `select prompt, input, output, private.job_json(j) ->> 'partial_output' as partial_output,
         last_error, idempotency_key, erased_at from public.generation_jobs j where user_id = $1`,
      [oldUser],
    );
    for (const r of rows) {
      expect(r).toMatchObject({ prompt: "", input: {}, output: null, partial_output: null });
      expect(r.erased_at).not.toBeNull();
    }
    // The recent user's text is all still there, finished and active alike.
    const { rows: kept } = await admin.query(
      `select id, prompt, output, private.job_json(j) ->> 'partial_output' as partial_output,
         last_error from public.generation_jobs j where user_id = $1`,
      [recentUser],
    );
    const byId = new Map(kept.map((k) => [k.id, k]));
    expect(byId.get(recent.jobs.succeeded)?.output).toContain(recentMarker);
    expect(byId.get(recent.jobs.failed)?.last_error).toContain(recentMarker);
    expect(byId.get(recent.jobs.running)?.partial_output).toContain(recentMarker);
    expect(byId.get(recent.jobs.released)?.last_error).toContain(recentMarker);
    for (const k of kept) expect(k.prompt).toContain(recentMarker);
    await expectNoDrift(admin);
    // Usage as the API reads it is the same number after.
    const usage = await rpc(svc, "get_usage", { p_user_id: oldUser, p_now: old });
    expect(usage.usage.used).toBe(before.usage[0].units_used);
  });

  test("an active job is never erased, however old", async () => {
    await roomyPlan(admin, PLAN);
    const user = await db.user(PLAN);
    const long = new Date(Date.now() - 400 * DAY);
    const job = await db.enqueued(user, { prompt: "still queued", now: long });
    await retainUntilDone(new Date());
    const { rows } = await admin.query(
      "select prompt, erased_at from public.generation_jobs where id = $1",
      [job.id],
    );
    expect(rows[0]).toEqual({ prompt: "still queued", erased_at: null });
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: long });
    // Ended now, it goes with the next run (and leaves nothing for the tests below).
    expect(await retainUntilDone(new Date())).toBe(1);
  });

  test("bounded: p_limit jobs a batch (at most 10000), a second run finds nothing", async () => {
    await userWithCanceled(5, 100);
    const cutoff = new Date(Date.now() - 99 * DAY);
    expect(await rpc(svc, "retention_batch", { p_before: cutoff, p_limit: 2 })).toBe(2);
    expect(await rpc(svc, "retention_batch", { p_before: cutoff, p_limit: 2 })).toBe(2);
    expect(await rpc(svc, "retention_batch", { p_before: cutoff, p_limit: 2 })).toBe(1);
    expect(await rpc(svc, "retention_batch", { p_before: cutoff, p_limit: 2 })).toBe(0);
    expect(await rpc(svc, "retention_batch", { p_before: cutoff, p_limit: 0 })).toBe(0);
  });

  test("walks its partial index, oldest first", async () => {
    const c = await admin.connect();
    try {
      await c.query("set enable_seqscan = off");
      const { rows } = await c.query(`explain select j.id from public.generation_jobs j
        where j.erased_at is null and j.finished_at is not null and j.finished_at < now()
        order by j.finished_at limit 1000 for update skip locked`);
      expect(rows.map((r) => r["QUERY PLAN"]).join("\n")).toMatch(
        /Index Scan using generation_jobs_finished_unerased/,
      );
    } finally {
      c.release();
    }
  });

  test("concurrent runs share the work: each job erased once", async () => {
    await userWithCanceled(40, 200);
    const cutoff = new Date(Date.now() - 199 * DAY);
    const counts = await Promise.all(Array.from({ length: 6 }, () => retainUntilDone(cutoff, 3)));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(40);
  });

  test("the service role cannot call the exception itself: only the function erases", async () => {
    const { rows } = await admin.query(
      `select has_function_privilege('authenticated', 'public.retention_batch(timestamptz, integer)', 'execute') as auth,
              has_function_privilege('anon', 'public.retention_batch(timestamptz, integer)', 'execute') as anon,
              has_function_privilege('service_role', 'public.retention_batch(timestamptz, integer)', 'execute') as svc`,
    );
    expect(rows[0]).toEqual({ auth: false, anon: false, svc: true });
  });
});
