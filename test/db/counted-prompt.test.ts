/**
 * A running attempt's prompt is charged at what the worker counts, not at the hold's bound:
 * enqueue holds the prompt's UTF-8 bytes + 8 (no tokenizer on the request path), and the
 * worker's progress writes carry the prompt as the model's tokenizer counts it, which lowers
 * `prompt_tokens` (never raises it). A running cancel on a token plan then captures the counted
 * prompt plus the streamed tokens, where it captured the byte bound (about 4× an English prompt).
 */
import { describe, expect, test } from "vitest";
import { at, type Json, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { progressWriter } from "../support/db-progress.ts";

const T0 = at("2026-12-01T10:00:00Z");
const db = dbFixture({ fresh: true, service: 4, noDrift: "file", now: T0 });
const { svc, admin } = db;
const progressed = progressWriter(db.svc, T0);

/** A team job held at `bound` prompt tokens, claimed, with one progress write. */
async function runningWithProgress(user: string, bound: number, counted?: number): Promise<Json> {
  const job = await db.enqueued(user, { promptTokens: bound });
  await db.started(job.id);
  await progressed(job.id, { tokens: 30, promptTokens: counted });
  return job;
}

describe("the counted prompt of a running attempt", () => {
  test("a running cancel captures the worker's count of the prompt, not the byte bound", async () => {
    const user = await db.user("team");
    const job = await runningWithProgress(user, 400, 110);
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r).toMatchObject({ outcome: "canceled", refunded: true });
    expect({ captured: r.job.captured, hold: r.job.hold }).toEqual({
      captured: 110 + 30,
      hold: 400 + 2048,
    });
  });

  test("a count above the bound is ignored: the charge can only go down", async () => {
    const user = await db.user("team");
    const job = await runningWithProgress(user, 100, 5_000);
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r.job.captured).toBe(100 + 30);
  });

  test("a progress write without a count (an older worker) keeps the bound", async () => {
    const user = await db.user("team");
    const job = await runningWithProgress(user, 100);
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r.job.captured).toBe(100 + 30);
  });

  test("a write of a claim that is no longer running changes nothing", async () => {
    const user = await db.user("team");
    const job = await runningWithProgress(user, 300);
    await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    const late = await rpc(svc, "record_progress", {
      p_job_id: job.id,
      p_attempt: 1,
      p_offset: 0,
      p_text: "late",
      p_completion_tokens: 1,
      p_prompt_tokens: 1,
      p_now: T0,
    });
    expect(late).toEqual({ outcome: "not_running", status: "canceled" });
    const row = await admin.query(
      "select prompt_tokens, captured from public.generation_jobs where id = $1",
      [job.id],
    );
    expect(row.rows[0]).toEqual({ prompt_tokens: 300, captured: 330 });
  });
});
