/**
 * One QStash delivery of one job. Claim first (one SQL call); only a claim calls the model; the
 * result is written with a guarded transition that names the claim. The result says whether a
 * redelivery can help (`retry`): not for success, duplicates, late deliveries and failures already
 * recorded; yes for a transient model error. A database error throws. The edge (api/worker.ts)
 * turns that into QStash's language: 503 with Retry-After for a retry (and for a throw), else 200.
 *
 * The parts: attempt.ts reads the claim (tier, bound, model) and the answer, stream.ts is the
 * model call with its progress writes, errors.ts maps a model error to the job's transition, and
 * settle.ts holds the endings every path shares.
 */

import type { JobRow } from "../jobs.ts";
import { loadKind } from "../kinds/index.ts";
import { log } from "../log.ts";
import { deliveryDedupId, messageOf } from "../message.ts";
import { storable } from "../partial-text.ts";
import type { WorkerDeps } from "../ports.ts";
import { annotate, traced, tracedPort } from "../trace.ts";
import { toJob } from "../view.ts";
import {
  alertIfAboveHold,
  attemptTier,
  modelOf,
  outputBound,
  readOutput,
  toAttemptUsage,
} from "./attempt.ts";
import { onModelError } from "./errors.ts";
import {
  afterRequeue,
  completeWithRetry,
  recordUsage,
  requeueArgs,
  type WorkerResult,
} from "./settle.ts";
import { streamModel } from "./stream.ts";

export type { WorkerDeps } from "../ports.ts";
export type { WorkerResult } from "./settle.ts";

/**
 * @param delivery an id of this delivery attempt that the sender cannot choose: derived from
 *   the verified signature (`verifyDelivery`), never from an unsigned header such as
 *   `Upstash-Message-Id`, because it ends up in a deduplication id that decides whether we
 *   publish.
 */
export async function runJob(
  untraced: WorkerDeps,
  jobId: string,
  delivery: { deliveryId: string | null } = { deliveryId: null },
): Promise<WorkerResult> {
  // Each database call and publish is a span of the delivery (lib/trace.ts); the progress writes
  // are events on the model call's span instead (one a second of streaming would be a flood).
  const deps: WorkerDeps = {
    ...untraced,
    jobs: tracedPort("db", untraced.jobs, ["progress"]),
    queue: tracedPort("qstash", untraced.queue),
  };
  const claim = await deps.jobs.start(jobId, { leaseSeconds: deps.config.jobLeaseSeconds });
  if (claim.outcome === "not_ready") {
    // Delivered before its resume time: the requeue's own publish failed (this is QStash's
    // retry of the message that found the provider busy), or QStash's clock runs ahead of the
    // database's. Either way this message is spent once we answer, so publish one for the
    // resume time under an id of its own: the job's id would be dropped as a duplicate if the
    // requeue's publish did happen, leaving the job to the sweeper. The id names this delivery
    // attempt by its signature, so a retry or a replay of the same signed request publishes
    // once, and no header a sender controls can mint new ids (each would be a new publish);
    // a second message for the job would only find it claimed. It carries the job's current
    // publish_seq: it stands in for the requeue's message, so its failure callback counts.
    await deps.queue.publishJob({
      ...messageOf(claim.job),
      dedupId: deliveryDedupId(claim.job, delivery.deliveryId),
      notBefore: new Date(claim.job.resume_at ?? Date.now()),
    });
    return { retry: false, outcome: "not_ready" };
  }
  if (claim.outcome === "budget_exhausted") {
    // A token plan's attempts reached what one job may consume (2 × hold): ended, not run.
    log.warn("job_budget_exhausted", { jobId, consumed: claim.job.consumed, hold: claim.job.hold });
    return { retry: false, outcome: claim.outcome };
  }
  if (claim.outcome !== "started") {
    log.info("delivery_ignored", { jobId, outcome: claim.outcome });
    return { retry: false, outcome: claim.outcome };
  }
  const job = claim.job;
  const attempt = job.attempts;
  annotate({ "job.attempt": attempt, "job.kind": job.kind, "job.plan": job.plan_id });

  const gateUntil = await deps.gate.resumeAt(deps.now());
  if (gateUntil) {
    // Another worker heard "wait until T" from the provider: wait too, without calling it and
    // without counting a hit against this job.
    const r = await deps.jobs.requeue(
      job.id,
      requeueArgs(deps, attempt, gateUntil, "provider gate closed", false),
    );
    return afterRequeue(deps, r);
  }

  // The claimed job's view to its watchers, so a page that hears the claim need not read it.
  void pushView(deps, job);
  // The job's kind says what the model is asked (docs/DESIGN.md#job-kinds); its input was checked
  // at enqueue.
  const kind = await loadKind(job.kind ?? "document");
  const request = kind.request(job.input ?? { prompt: job.prompt });
  const tier = attemptTier(claim);
  const maxOutputTokens = outputBound(claim.max_output_tokens, jobId);
  const call = await traced(
    "model generate",
    {
      "gen_ai.request.model": modelOf(deps, job),
      "gen_ai.request.max_tokens": maxOutputTokens,
      "openai.request.service_tier": tier.serviceTier,
      "job.attempt": attempt,
    },
    () =>
      streamModel(deps, job, attempt, maxOutputTokens, tier.serviceTier, kind, request, {
        reasoningEffort: claim.reasoning_effort ?? undefined,
      }),
  );
  if (!call.ok) {
    if (call.stoppedBy !== null) {
      // Someone else ended the job (or reclaimed it) while the model streamed: the stream was
      // cut at once, and only what it consumed until then is recorded.
      await recordUsage(deps, job.id, attempt, call.usage);
      log.info("model_stream_aborted", {
        jobId,
        attempt,
        status: call.stoppedBy,
        completionTokens: call.usage?.completion_tokens ?? null,
      });
      return { retry: false, outcome: "aborted" };
    }
    return await onModelError(deps, job, attempt, call.error, call.usage, tier);
  }

  const usage = toAttemptUsage(call.result.usage, call.result.serviceTier);
  const read = await readOutput(kind, call.result, job.input ?? {}, jobId, attempt);
  if (!read.ok) {
    // Not an answer of the kind (an extraction that does not parse or validate, or one cut at the
    // bound): the attempt fails through the usual path, with its usage, so the usual refund
    // rule decides what it costs (a token plan captures it; a job plan's refund after spend is
    // bounded). No retry: the provider billed it, and the same input may stray again.
    await alertIfAboveHold(deps, job, attempt, usage);
    log.warn("job_output_refused", {
      jobId,
      attempt,
      kind: kind.id,
      reason: read.reason,
      finishReason: call.result.finishReason,
    });
    const r = await deps.jobs.fail(job.id, {
      reason: read.reason,
      error: read.problem,
      attempt,
      usage,
    });
    if (r.outcome === "not_running") await recordUsage(deps, job.id, attempt, usage);
    // A user's input can make the model stray at will: counted into the window's summary.
    if (r.outcome === "failed")
      await deps.alerts.record({ reason: read.reason, userId: job.user_id });
    return { retry: false, outcome: r.outcome === "failed" ? "failed" : r.outcome };
  }
  const stored = storable(read.output);
  const done = await completeWithRetry(deps, job.id, attempt, stored, usage);
  await alertIfAboveHold(deps, job, attempt, usage);
  if (done.outcome === "completed") {
    // The ended job's view to its watchers: the page shows the answer without reading it back.
    // The ending answers the job's state, none of its text: the started row, the ending's state
    // and the output just stored make the row get_job would read, without reading it.
    void pushView(deps, { ...job, ...done.job, output: stored, partial_output: null });
    log.info("job_succeeded", {
      jobId,
      attempt,
      finishReason: call.result.finishReason,
      completionTokens: usage.completion_tokens,
    });
    return { retry: false, outcome: "completed" };
  }
  // Canceled, failed or reclaimed while the model ran: that caller owns the job's fate.
  await recordUsage(deps, job.id, attempt, usage);
  log.warn("late_output_dropped", {
    jobId,
    attempt,
    status: "job" in done ? done.job.status : null,
  });
  return { retry: false, outcome: "late_output_dropped" };
}

/**
 * A job's view as GET /api/jobs/<id> shows it, pushed (a claim's, a success's); never fails the
 * delivery. A claim's `cancelRefunds` is left out: on a job plan it depends on the period's
 * refunds, which the claim does not read (the page reads the job again before a cancel).
 */
async function pushView(deps: WorkerDeps, row: JobRow): Promise<void> {
  if (!deps.live) return;
  try {
    const view = await toJob(row, deps.now());
    if (row.status === "running") {
      const { cancelRefunds: _unknown, ...claim } = view;
      await deps.live.view(row.user_id, claim);
    } else await deps.live.view(row.user_id, view);
  } catch (error) {
    log.warn("live_push_failed", { event: "job_view", error });
  }
}
