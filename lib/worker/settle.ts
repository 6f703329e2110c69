/** The endings every path of a delivery shares: usage recorded, the answer written, a requeue. */

import type { AttemptUsage, RequeueResult } from "../jobs.ts";
import { log } from "../log.ts";
import { messageOf } from "../message.ts";
import type { WorkerDeps } from "../ports.ts";

/** What one delivery came to. The flow says whether to retry; the edge picks the status. */
export interface WorkerResult {
  /** A redelivery may help (a transient model error): the queue should deliver it again. */
  retry: boolean;
  outcome: string;
}

/**
 * The usage of an attempt whose own transition was refused: an insert-only event, because the
 * job may be final. Best effort: losing this record must not turn a settled delivery into a
 * retry, so a failure is logged, not thrown.
 */
export async function recordUsage(
  deps: WorkerDeps,
  jobId: string,
  attempt: number,
  usage: AttemptUsage | null,
): Promise<void> {
  if (!usage) return;
  try {
    await deps.jobs.recordUsage(jobId, { attempt, usage });
  } catch (error) {
    log.warn("attempt_usage_not_recorded", { jobId, attempt, error, ...usage });
  }
}

/**
 * The model's answer is the expensive part: a database blip at this point is worth two quick
 * retries before we give up and answer 503 (after which the lease and the sweeper decide).
 * Repeating the guarded write is safe; if an earlier try committed and only its response was
 * lost, the job reads back as succeeded under our own claim, which is our success.
 */
export async function completeWithRetry(
  deps: WorkerDeps,
  jobId: string,
  attempt: number,
  output: string,
  usage: AttemptUsage,
) {
  for (let i = 0; ; i++) {
    try {
      const done = await deps.jobs.complete(jobId, { attempt, output, usage });
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

export function requeueArgs(
  deps: WorkerDeps,
  attempt: number,
  resumeAt: Date,
  error: string,
  countHit: boolean,
  usage: AttemptUsage | null = null,
) {
  return {
    attempt,
    resumeAt,
    error,
    countHit,
    usage,
    maxHits: deps.config.providerQuotaMaxHits,
    maxAgeSeconds: deps.config.jobMaxAgeSeconds,
  };
}

export async function afterRequeue(deps: WorkerDeps, r: RequeueResult): Promise<WorkerResult> {
  if (r.outcome === "requeued") {
    // If this publish fails we answer 503: QStash retries this delivery, whose claim then finds
    // the job not_ready and publishes a message for the resume time itself.
    await deps.queue.publishJob({
      ...messageOf(r.job),
      notBefore: new Date(r.job.resume_at ?? Date.now()),
    });
    log.info(
      r.job.waiting_for === "capacity" ? "job_waiting_for_capacity" : "job_waiting_for_provider",
      {
        jobId: r.job.id,
        resumeAt: r.job.resume_at,
        hits: r.job.provider_quota_hits,
      },
    );
    return { retry: false, outcome: "requeued" };
  }
  if (r.outcome === "gave_up") {
    log.warn("job_gave_up", { jobId: r.job.id, by: r.by, hits: r.job.provider_quota_hits });
    return { retry: false, outcome: "gave_up" };
  }
  return { retry: false, outcome: r.outcome };
}
