/**
 * The streamed attempt's SQL: the bound start_job hands the worker, record_progress's guard
 * (the worker's only way to learn of a cancel while it streams), and each attempt's usage in
 * the event history, on the real database.
 */
import { describe, expect, test } from "vitest";
import { addSeconds, at, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const T0 = at("2026-03-10T12:00:00Z");
const db = dbFixture({ now: T0 });
const { svc, admin } = db;
const USAGE = { prompt_tokens: 12, completion_tokens: 34, source: "provider" };

async function runningJob(plan: "free" | "pro" = "pro") {
  const user = await db.user(plan);
  const job = await db.enqueued(user, { prompt: "write it" });
  const s = await db.started(job.id, { leaseSeconds: 90 });
  return { user, id: job.id as string, attempt: s.job.attempts as number, start: s };
}

/** record_progress's answer once `stored` characters of text are stored. */
const recorded = (stored: number) => ({ outcome: "recorded", stored });

/** A progress write of `text`, the attempt's text after its first `offset` characters. */
const progress = (
  id: string,
  attempt: number,
  offset: number,
  text: string,
  tokens: number,
  now = T0,
) =>
  rpc(svc, "record_progress", {
    p_job_id: id,
    p_attempt: attempt,
    p_offset: offset,
    p_text: text,
    p_completion_tokens: tokens,
    p_now: now,
  });

/** The job row, with its partial output as every reader sees it (private.job_json). */
async function row(id: string) {
  const { rows } = await admin.query(
    "select j.*, private.job_json(j) ->> 'partial_output' as partial_output from public.generation_jobs j where j.id = $1",
    [id],
  );
  return rows[0];
}

async function chunks(id: string) {
  const { rows } = await admin.query(
    "select attempt, end_char, text from public.job_output_chunks where job_id = $1 order by attempt, end_char",
    [id],
  );
  return rows;
}

const events = (id: string) => db.events(id);

describe("start_job hands the worker the plan's output bound", () => {
  test("free 512, pro 8000, beside the job", async () => {
    expect((await runningJob("free")).start.max_output_tokens).toBe(512);
    const pro = await runningJob("pro");
    expect(pro.start.max_output_tokens).toBe(8000);
    expect(pro.start.job).toMatchObject({ status: "running", attempts: 1 });
  });
});

describe("record_progress", () => {
  test("the running claim appends its new text and records its tokens", async () => {
    const job = await runningJob();
    expect(await progress(job.id, job.attempt, 0, "Once upon", 2)).toEqual(recorded(9));
    expect(await progress(job.id, job.attempt, 9, " a time", 4, addSeconds(T0, 1))).toEqual(
      recorded(16),
    );
    const r = await row(job.id);
    expect(r).toMatchObject({
      status: "running",
      partial_output: "Once upon a time",
      partial_tokens: 4,
    });
    expect(r.progress_at.getTime()).toBe(addSeconds(T0, 1).getTime());
    // Each write stored only what it brought; the job row holds no text.
    expect(await chunks(job.id)).toEqual([
      { attempt: 1, end_char: 9, text: "Once upon" },
      { attempt: 1, end_char: 16, text: " a time" },
    ]);
    expect(
      (
        await admin.query("select partial_output from public.generation_jobs where id = $1", [
          job.id,
        ])
      ).rows[0].partial_output,
    ).toBeNull();
    // Not a transition: no event per progress write.
    expect((await events(job.id)).map((e) => e.event)).toEqual(["enqueued", "started"]);
  });

  test("a retried or duplicated write stores nothing twice; an overlapping one only its new end", async () => {
    // Without the offset check a retry whose first try committed (its answer lost) would append
    // its text a second time.
    const job = await runningJob();
    await progress(job.id, job.attempt, 0, "Once upon", 2);
    expect(await progress(job.id, job.attempt, 0, "Once upon", 2)).toEqual(recorded(9));
    // The retry of a lost answer carries what arrived since, after the same offset.
    expect(await progress(job.id, job.attempt, 0, "Once upon a time", 4)).toEqual(recorded(16));
    expect(await progress(job.id, job.attempt, 9, " a time", 4)).toEqual(recorded(16));
    expect((await row(job.id)).partial_output).toBe("Once upon a time");
  });

  test("a write past what is stored stores no text and says where the text ends", async () => {
    const job = await runningJob();
    await progress(job.id, job.attempt, 0, "Once", 1);
    expect(await progress(job.id, job.attempt, 9, " a time", 4)).toEqual(recorded(4));
    expect(await row(job.id)).toMatchObject({ partial_output: "Once", partial_tokens: 4 });
    // The worker sends again from there.
    expect(await progress(job.id, job.attempt, 4, " upon a time", 4)).toEqual(recorded(16));
    expect((await row(job.id)).partial_output).toBe("Once upon a time");
  });

  test("characters are counted as Postgres counts them (code points), emoji and accents included", async () => {
    const job = await runningJob();
    expect(await progress(job.id, job.attempt, 0, "caf\u00e9 \u{1F600}", 3)).toEqual(recorded(6));
    expect(await progress(job.id, job.attempt, 5, "\u{1F600}!", 4)).toEqual(recorded(7));
    expect((await row(job.id)).partial_output).toBe("caf\u00e9 \u{1F600}!");
  });

  test("a first write with no text (thinking) makes the partial output empty, not null", async () => {
    const job = await runningJob();
    expect((await row(job.id)).partial_output).toBeNull();
    expect(await progress(job.id, job.attempt, 0, "", 5)).toEqual(recorded(0));
    expect((await row(job.id)).partial_output).toBe("");
    expect(await progress(job.id, job.attempt, 0, "", 6)).toEqual(recorded(0));
    expect(await chunks(job.id)).toHaveLength(1);
    await progress(job.id, job.attempt, 0, "Hi", 7);
    expect((await row(job.id)).partial_output).toBe("Hi");
  });

  test("after a cancel: not_running with the status, no error, nothing written; the text stays", async () => {
    // Without the status guard the update reaches the final-is-final trigger and raises: the
    // worker would see a database error instead of "stop streaming".
    const job = await runningJob();
    await progress(job.id, job.attempt, 0, "Once", 1);
    const c = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    expect(c.outcome).toBe("canceled");
    expect(c.job.partial_output).toBe("Once");
    expect(await progress(job.id, job.attempt, 4, " upon", 2)).toEqual({
      outcome: "not_running",
      status: "canceled",
    });
    expect(await row(job.id)).toMatchObject({ partial_output: "Once", partial_tokens: 1 });
    expect(await chunks(job.id)).toEqual([{ attempt: 1, end_char: 4, text: "Once" }]);
  });

  test("a stale claim cannot write over the new attempt's progress; the reclaim starts it afresh", async () => {
    // Without the attempts guard the old worker's text would be appended to the new attempt's.
    const job = await runningJob();
    await progress(job.id, job.attempt, 0, "old text", 2);
    const re = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 91) });
    expect(re.outcome).toBe("started");
    expect(re.job.partial_output).toBeNull();
    expect(await row(job.id)).toMatchObject({ partial_output: null, partial_tokens: 0 });
    expect(await chunks(job.id)).toEqual([]);
    expect(await progress(job.id, re.job.attempts, 0, "new", 1, addSeconds(T0, 92))).toEqual(
      recorded(3),
    );
    expect(await progress(job.id, job.attempt, 8, " more", 9, addSeconds(T0, 93))).toEqual({
      outcome: "not_running",
      status: "running",
    });
    expect(await row(job.id)).toMatchObject({ partial_output: "new", partial_tokens: 1 });
  });

  test("a release, a requeue and a completion clear the text as they did; the next attempt starts empty", async () => {
    for (const [fn, params, status] of [
      ["release_job", {}, "queued"],
      ["requeue_job", { p_resume_at: addSeconds(T0, 30) }, "queued"],
      ["complete_job", { p_output: "Once upon a time." }, "succeeded"],
    ] as const) {
      const job = await runningJob();
      await progress(job.id, job.attempt, 0, "Once upon", 2);
      const r = await rpc(svc, fn, {
        p_job_id: job.id,
        p_attempt: job.attempt,
        p_now: T0,
        ...params,
      });
      // An ending answers with its state only (private.ending_json), the others with the job.
      expect(r.job).toMatchObject(
        status === "succeeded" ? { status } : { status, partial_output: null },
      );
      expect(await row(job.id)).toMatchObject({ status, partial_output: null });
      expect(await chunks(job.id)).toEqual([]);
      if (status === "queued") {
        const next = await rpc(svc, "start_job", { p_job_id: job.id, p_now: addSeconds(T0, 31) });
        expect(next.outcome).toBe("started");
        await progress(job.id, next.job.attempts, 0, "Two", 1, addSeconds(T0, 32));
        expect((await row(job.id)).partial_output).toBe("Two");
      }
    }
  });

  test("get_job, list_jobs and export_user read the partial output from the chunks", async () => {
    const job = await runningJob();
    await progress(job.id, job.attempt, 0, "Once upon", 2);
    await progress(job.id, job.attempt, 9, " a time", 4);
    const got = await rpc(svc, "get_job", { p_job_id: job.id, p_user_id: job.user });
    expect(got.job.partial_output).toBe("Once upon a time");
    const listed = await rpc(svc, "list_jobs", { p_user_id: job.user });
    expect(listed.jobs[0].partial_output).toBe("Once upon a time");
    const exported = await rpc(svc, "export_user", { p_user_id: job.user });
    expect(exported.jobs[0].partial_output).toBe("Once upon a time");
  });

  test("a queued, requeued or unknown job is not written", async () => {
    const job = await runningJob();
    await rpc(svc, "release_job", { p_job_id: job.id, p_attempt: job.attempt, p_now: T0 });
    expect(await progress(job.id, job.attempt, 0, "x", 1)).toEqual({
      outcome: "not_running",
      status: "queued",
    });
    expect(await progress(crypto.randomUUID(), 1, 0, "x", 1)).toEqual({ outcome: "not_found" });
    expect(await chunks(job.id)).toEqual([]);
  });

  test("progress racing a cancel: after the cancel commits, no write succeeds", async () => {
    const job = await runningJob();
    const writes = Array.from({ length: 20 }, (_, i) =>
      progress(job.id, job.attempt, 0, `text ${i}`, i, addSeconds(T0, i)),
    );
    const cancel = rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    const results = await Promise.all([...writes, cancel]);
    expect((results.at(-1) as { outcome: string }).outcome).toBe("canceled");
    for (const r of results.slice(0, -1))
      expect(["recorded", "not_running"]).toContain((r as { outcome: string }).outcome);
    expect(await progress(job.id, job.attempt, 0, "late", 99)).toMatchObject({
      outcome: "not_running",
    });
    expect((await row(job.id)).status).toBe("canceled");
  });

  test("writes of one attempt racing each other: the text is stored once, in order", async () => {
    // Every write carries the whole text from 0 (the worst case: every answer lost); the row
    // lock orders them, each appends only what lies beyond the stored end.
    const job = await runningJob();
    const full = "abcdefghijklmnopqrstuvwxyz";
    const results = await Promise.all(
      Array.from({ length: 26 }, (_, i) =>
        progress(job.id, job.attempt, 0, full.slice(0, i + 1), i),
      ),
    );
    for (const r of results) expect(r.outcome).toBe("recorded");
    expect((await row(job.id)).partial_output).toBe(full);
  });
});

describe("each attempt's usage is in the event history", () => {
  test("complete, release, requeue and fail put it in their own event", async () => {
    const endings = [
      ["complete_job", { p_output: "done" }, "completed", { attempt: 1 }],
      ["release_job", {}, "released", {}],
      ["requeue_job", { p_resume_at: addSeconds(T0, 30) }, "requeued", {}],
      [
        "fail_job",
        { p_reason: "model_refused" },
        "failed",
        { attempt: 1, reason: "model_refused" },
      ],
    ] as const;
    for (const [fn, params, event, detail] of endings) {
      const job = await runningJob();
      await rpc(svc, fn, {
        p_job_id: job.id,
        p_attempt: job.attempt,
        p_now: T0,
        p_usage: USAGE,
        ...params,
      });
      expect((await events(job.id)).at(-1)).toMatchObject({
        event,
        detail: { ...detail, usage: USAGE },
      });
    }
  });

  test("without usage the event detail has no usage, only the capture", async () => {
    const a = await runningJob();
    await rpc(svc, "complete_job", {
      p_job_id: a.id,
      p_attempt: a.attempt,
      p_output: "x",
      p_now: T0,
    });
    expect((await events(a.id)).at(-1)?.detail).toEqual({ attempt: 1, captured: 1, released: 0 });
  });

  test("an attempt someone else ended: one attempt_usage event, appended to a final job", async () => {
    const job = await runningJob();
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: job.user, p_now: T0 });
    const late = await rpc(svc, "complete_job", {
      p_job_id: job.id,
      p_attempt: job.attempt,
      p_output: "late",
      p_now: T0,
      p_usage: USAGE,
    });
    expect(late.outcome).toBe("not_running");
    const record = (attempt: number) =>
      rpc(svc, "record_attempt_usage", {
        p_job_id: job.id,
        p_attempt: attempt,
        p_usage: USAGE,
        p_now: addSeconds(T0, 1),
      });
    expect(await record(job.attempt)).toEqual({ outcome: "recorded" });
    // A retried call does not count the attempt twice.
    expect(await record(job.attempt)).toEqual({ outcome: "already_recorded" });
    expect(await record(job.attempt + 1)).toEqual({ outcome: "no_such_attempt" });
    const evs = await events(job.id);
    expect(evs.map((e) => e.event)).toEqual(["enqueued", "started", "canceled", "attempt_usage"]);
    expect(evs.at(-1)).toMatchObject({
      from_status: "canceled",
      to_status: "canceled",
      detail: { attempt: 1, usage: USAGE },
    });
    expect((await row(job.id)).status).toBe("canceled");
  });

  test("an attempt whose own transition carried usage is not recorded again", async () => {
    const job = await runningJob();
    await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "model_refused",
      p_attempt: job.attempt,
      p_now: T0,
      p_usage: USAGE,
    });
    expect(
      await rpc(svc, "record_attempt_usage", {
        p_job_id: job.id,
        p_attempt: job.attempt,
        p_usage: USAGE,
      }),
    ).toEqual({ outcome: "already_recorded" });
  });
});
