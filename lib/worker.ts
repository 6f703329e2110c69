/**
 * One QStash delivery of one job. Claim first (one SQL call); only a claim calls the model; the
 * result is written with a guarded transition that names the claim. The answer tells QStash
 * whether a retry can help: 200 for success, duplicates, late deliveries and failures already
 * recorded; 503 for a transient model error or any database error.
 */

import { dedupId, type JobRow, type RequeueResult } from "./jobs.ts";
import { log } from "./log.ts";
import { classifyModelError } from "./model.ts";
import type { Deps } from "./ports.ts";

export interface WorkerDeps
  extends Pick<Deps, "jobs" | "queue" | "gate" | "alerts" | "now" | "config"> {
  model: { generate(prompt: string): Promise<string> };
  settings: {
    leaseSeconds: number;
    providerQuotaMaxHits: number;
    jobMaxAgeSeconds: number;
    providerBackoffSeconds: number;
  };
}

export interface WorkerResult {
  status: 200 | 503;
  outcome: string;
}

/**
 * @param delivery an id of this delivery attempt that the sender cannot choose: derived from
 *   the verified signature (`verifyDelivery`), never from an unsigned header such as
 *   `Upstash-Message-Id`, because it ends up in a deduplication id that decides whether we
 *   publish.
 */
export async function runJob(
  deps: WorkerDeps,
  jobId: string,
  delivery: { deliveryId: string | null } = { deliveryId: null },
): Promise<WorkerResult> {
  const claim = await deps.jobs.start(jobId, { leaseSeconds: deps.settings.leaseSeconds });
  if (claim.outcome === "not_ready") {
    // Delivered before its resume time: the requeue's own publish failed (this is QStash's
    // retry of the message that found the provider busy), or QStash's clock runs ahead of the
    // database's. Either way this message is spent once we answer, so publish one for the
    // resume time under an id of its own: the job's id would be dropped as a duplicate if the
    // requeue's publish did happen, leaving the job to the sweeper. The id names this delivery
    // attempt by its signature, so a retry or a replay of the same signed request publishes
    // once, and no header a sender controls can mint new ids (each would be a new publish);
    // a second message for the job would only find it claimed.
    await deps.queue.publishJob({
      jobId,
      dedupId: `${dedupId(claim.job)}-after-${(delivery.deliveryId ?? "unknown").replace(/[^\w-]/g, "_")}`,
      notBefore: new Date(claim.job.resume_at ?? Date.now()),
    });
    return { status: 200, outcome: "not_ready" };
  }
  if (claim.outcome !== "started") {
    log.info("delivery_ignored", { jobId, outcome: claim.outcome });
    return { status: 200, outcome: claim.outcome };
  }
  const job = claim.job;
  const attempt = job.attempts;

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

  let output: string;
  try {
    output = await deps.model.generate(job.prompt);
  } catch (error) {
    return await onModelError(deps, job, attempt, error);
  }

  const done = await completeWithRetry(deps, job.id, attempt, output);
  if (done.outcome === "completed") {
    log.info("job_succeeded", { jobId, attempt });
    return { status: 200, outcome: "completed" };
  }
  // Canceled, failed or reclaimed while the model ran: that caller owns the job's fate.
  log.warn("late_output_dropped", {
    jobId,
    attempt,
    status: "job" in done ? done.job.status : null,
  });
  return { status: 200, outcome: "late_output_dropped" };
}

/**
 * The model's answer is the expensive part: a database blip at this point is worth two quick
 * retries before we give up and answer 503 (after which the lease and the sweeper decide).
 * Repeating the guarded write is safe; if an earlier try committed and only its response was
 * lost, the job reads back as succeeded under our own claim, which is our success.
 */
async function completeWithRetry(deps: WorkerDeps, jobId: string, attempt: number, output: string) {
  for (let i = 0; ; i++) {
    try {
      const done = await deps.jobs.complete(jobId, { attempt, output });
      if (
        i > 0 &&
        done.outcome === "not_running" &&
        done.job.status === "succeeded" &&
        done.job.attempts === attempt
      ) {
        return { outcome: "completed" as const, job: done.job };
      }
      return done;
    } catch (error) {
      if (i >= 2) throw error;
      log.warn("complete_retry", { jobId, attempt, error });
      await new Promise((resolve) => setTimeout(resolve, 250 * 3 ** i));
    }
  }
}

function requeueArgs(
  deps: WorkerDeps,
  attempt: number,
  resumeAt: Date,
  error: string,
  countHit: boolean,
) {
  return {
    attempt,
    resumeAt,
    error,
    countHit,
    maxHits: deps.settings.providerQuotaMaxHits,
    maxAgeSeconds: deps.settings.jobMaxAgeSeconds,
  };
}

async function onModelError(
  deps: WorkerDeps,
  job: JobRow,
  attempt: number,
  error: unknown,
): Promise<WorkerResult> {
  const failure = classifyModelError(error, deps.now());
  switch (failure.kind) {
    case "provider_quota": {
      const waitSeconds = failure.retryAfterSeconds ?? deps.settings.providerBackoffSeconds;
      const resumeAt = new Date(deps.now().getTime() + waitSeconds * 1000);
      await deps.gate.holdUntil(resumeAt);
      if (failure.reason === "insufficient_quota") {
        // Someone must add credits: page once per window, not once per job.
        await deps.alerts.send({
          kind: "provider_quota_exhausted",
          dedupKey: "provider:insufficient_quota",
          title: "AI provider quota exhausted (insufficient_quota): add credits",
          fields: { job: job.id, hits: job.provider_quota_hits + 1 },
        });
      }
      const r = await deps.jobs.requeue(
        job.id,
        requeueArgs(deps, attempt, resumeAt, `429 ${failure.reason}`, true),
      );
      return afterRequeue(deps, r);
    }
    case "transient": {
      log.warn("model_transient_error", {
        jobId: job.id,
        attempt,
        status: failure.status,
        message: failure.message,
      });
      const r = await deps.jobs.release(job.id, {
        attempt,
        error: `transient: ${failure.status ?? "no response"}`,
      });
      // Canceled, failed or reclaimed while the model ran: that caller owns the job's fate, and
      // a redelivery cannot help (it would only find the job final and count as a retry).
      if (r.outcome !== "released") return { status: 200, outcome: r.outcome };
      return { status: 503, outcome: "released" };
    }
    case "refused": {
      log.warn("model_refused", { jobId: job.id, attempt, status: failure.status });
      const r = await deps.jobs.fail(job.id, {
        reason: "model_refused",
        error: `${failure.status}: ${failure.message}`.slice(0, 500),
        attempt,
      });
      // A prompt can make the model refuse at will: counted into the window's summary, not paged.
      if (r.outcome === "failed")
        await deps.alerts.record({ reason: "model_refused", userId: job.user_id });
      return { status: 200, outcome: r.outcome === "failed" ? "failed" : r.outcome };
    }
  }
}

async function afterRequeue(deps: WorkerDeps, r: RequeueResult): Promise<WorkerResult> {
  if (r.outcome === "requeued") {
    // If this publish fails we answer 503: QStash retries this delivery, whose claim then finds
    // the job not_ready and publishes a message for the resume time itself.
    await deps.queue.publishJob({
      jobId: r.job.id,
      dedupId: dedupId(r.job),
      notBefore: new Date(r.job.resume_at ?? Date.now()),
    });
    log.info("job_waiting_for_provider", {
      jobId: r.job.id,
      resumeAt: r.job.resume_at,
      hits: r.job.provider_quota_hits,
    });
    return { status: 200, outcome: "requeued" };
  }
  if (r.outcome === "gave_up") {
    log.warn("job_gave_up", { jobId: r.job.id, by: r.by, hits: r.job.provider_quota_hits });
    return { status: 200, outcome: "gave_up" };
  }
  return { status: 200, outcome: r.outcome };
}
