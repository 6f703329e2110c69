/**
 * The job row's rules (one CHECK, private.generation_job_valid): each rule still refuses a row
 * that breaks it, with check_violation (23514) naming the rule as it was named when each was a
 * constraint of its own, and the row is left as it was. Each case writes one valid row of a job
 * in the state it names into one broken one, as the service role could with a direct UPDATE.
 */
import { describe, expect, test } from "vitest";
import { at, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const T0 = at("2026-03-10T12:00:00Z");
const db = dbFixture({ now: T0 });
const { svc, admin } = db;

type State = "queued" | "running" | "succeeded" | "failed";

async function jobIn(state: State): Promise<string> {
  const user = await db.user("pro");
  const id = (await db.enqueued(user, { prompt: "write it", now: T0 })).id as string;
  if (state === "queued") return id;
  await db.started(id, { now: T0, leaseSeconds: 90 });
  if (state === "succeeded")
    await rpc(svc, "complete_job", { p_job_id: id, p_attempt: 1, p_output: "ok", p_now: T0 });
  if (state === "failed")
    await rpc(svc, "fail_job", {
      p_job_id: id,
      p_reason: "model_refused",
      p_attempt: 1,
      p_now: T0,
    });
  return id;
}

/** A running job ended failed in one write, as fail_job would, before its refund columns. */
const FAILED =
  "status = 'failed', failure_reason = 'model_refused', lease_expires_at = null, finished_at = now()";

/**
 * [rule, the state of the job it starts from, the SET clause that breaks it]. A final job's row
 * is frozen by its own trigger, so the rules of final rows are broken by the write that ends it.
 * Where a row breaks several rules, the first by name is reported, as PostgreSQL did.
 */
const CASES: [string, State, string][] = [
  ["generation_jobs_attempts_check", "queued", "attempts = -1"],
  [
    "generation_jobs_captured_check",
    "running",
    "status = 'succeeded', lease_expires_at = null, finished_at = now(), captured = -1",
  ],
  ["generation_jobs_captured_iff_final", "running", "captured = 0"],
  ["generation_jobs_captured_within_hold", "queued", "status = 'canceled', captured = hold + 1"],
  ["generation_jobs_consumed_check", "queued", "consumed = -1"],
  ["generation_jobs_erased_is_empty", "queued", "erased_at = now()"],
  ["generation_jobs_failure_reason_check", "queued", "failure_reason = 'because'"],
  ["generation_jobs_finished_iff_terminal", "queued", "finished_at = now()"],
  ["generation_jobs_hold_check", "queued", "hold = 0"],
  ["generation_jobs_idempotency_key_check", "queued", "idempotency_key = ''"],
  ["generation_jobs_input_is_object", "queued", "input = '[]'"],
  ["generation_jobs_lease_iff_running", "running", "lease_expires_at = null"],
  ["generation_jobs_meter_check", "queued", "meter = 'credits'"],
  ["generation_jobs_output_only_when_succeeded", "queued", "output = 'early'"],
  ["generation_jobs_partial_output_in_chunks", "running", "partial_output = 'so far'"],
  ["generation_jobs_partial_tokens_check", "running", "partial_tokens = -1"],
  ["generation_jobs_prompt_check", "queued", "prompt = ''"],
  ["generation_jobs_prompt_tokens_check", "queued", "prompt_tokens = -1"],
  ["generation_jobs_provider_quota_hits_check", "queued", "provider_quota_hits = -1"],
  ["generation_jobs_publish_seq_check", "queued", "publish_seq = 0"],
  [
    "generation_jobs_reason_iff_failed",
    "running",
    "status = 'failed', lease_expires_at = null, finished_at = now(), captured = 0, refunded_at = now()",
  ],
  ["generation_jobs_reasoning_tokens_check", "running", "reasoning_tokens = -1"],
  ["generation_jobs_refund_withheld_check", "queued", "refund_withheld = 'kindness'"],
  ["generation_jobs_refunded_iff_failed_or_canceled", "running", `${FAILED}, captured = 0`],
  ["generation_jobs_republish_count_check", "queued", "republish_count = -1"],
  ["generation_jobs_resume_only_when_queued", "running", "resume_at = now()"],
  [
    "generation_jobs_running_cancel_limit_only_when_canceled",
    "running",
    `${FAILED}, captured = 1, refund_withheld = 'running_cancel_limit'`,
  ],
  ["generation_jobs_status_check", "queued", "status = 'paused'"],
  ["generation_jobs_waiting_for_check", "queued", "waiting_for = 'weather'"],
  [
    "generation_jobs_withheld_only_when_failed_or_canceled",
    "queued",
    "refunded_at = now(), refund_withheld = 'paid_refund_limit'",
  ],
];

describe("the job row's rules, one check", () => {
  test("the cases name every rule the function has, once each", async () => {
    const { rows } = await admin.query<{ d: string }>(
      "select pg_get_functiondef('private.generation_job_valid(public.generation_jobs)'::regprocedure) d",
    );
    const inFunction = [...(rows[0]?.d ?? "").matchAll(/then '(generation_jobs_\w+)'/g)]
      .map((m) => m[1])
      .sort();
    expect(CASES.map(([rule]) => rule).sort()).toEqual(inFunction);
    expect(inFunction).toHaveLength(30);
  });

  test.each(CASES)("%s refuses a row that breaks it (from %s)", async (rule, state, set) => {
    const id = await jobIn(state);
    const before = (await admin.query("select * from public.generation_jobs where id = $1", [id]))
      .rows[0];
    await expect(
      svc.query(`update public.generation_jobs set ${set} where id = $1`, [id]),
    ).rejects.toMatchObject({ code: "23514", constraint: rule, table: "generation_jobs" });
    const after = (await admin.query("select * from public.generation_jobs where id = $1", [id]))
      .rows[0];
    expect(after).toEqual(before);
  });
});
