/**
 * QStash's failure callback (the dead-letter path): the last retry of a delivery failed. Claim
 * the failure with one guarded transition that also refunds; whoever ended the job first (the
 * worker, a cancel, the sweeper) already owns its side effects, so an already-final job is a
 * no-op: no second refund and no second count.
 *
 * The callback names its message: `seq`, the job's `publish_seq` when the message was published.
 * A requeue (provider 429) or the sweeper's republish publishes a new message while the old one
 * may still be retrying; the old one's callback, due after its last retry, would otherwise fail
 * the job under the worker the new message started. fail_job answers `superseded` for a message
 * older than the job's current one: nothing changes, nothing is refunded or counted; the job's
 * current message, its lease and the sweeper decide its fate. A message without `seq` (published
 * before it existed) is treated as the current one, as before.
 *
 * A user can make every delivery of their job fail (a prompt that times the model out or makes
 * it answer 5xx), so this failure is counted into the window's summary (lib/alert-rollup.ts),
 * never paged per job: a page per job let one user page on-call at will and spend the kind's
 * budget that genuine pages need.
 */

import { log } from "./log.ts";
import type { Deps } from "./ports.ts";
import type { FailureCallback } from "./queue.ts";
import { tracedPort } from "./trace.ts";

export async function handleDeliveryFailure(
  deps: Pick<Deps, "jobs" | "alerts">,
  callback: FailureCallback,
): Promise<{
  outcome: "failed" | "already_final" | "not_running" | "superseded" | "not_found";
}> {
  const r = await tracedPort("db", deps.jobs).fail(callback.jobId, {
    reason: "delivery_failed",
    error: `delivery failed: last status ${callback.status} after ${callback.retried} retries`,
    seq: callback.seq,
  });
  if (r.outcome !== "failed") {
    log.info("failure_callback_noop", {
      jobId: callback.jobId,
      outcome: r.outcome,
      dlqId: callback.dlqId,
      messageSeq: callback.seq,
      ...(r.outcome === "not_found" ? {} : { jobSeq: r.job.publish_seq, status: r.job.status }),
    });
    return { outcome: r.outcome };
  }
  log.error("job_delivery_failed", {
    jobId: callback.jobId,
    status: callback.status,
    dlqId: callback.dlqId,
  });
  await deps.alerts.record({ reason: "delivery_failed", userId: r.job.user_id });
  return { outcome: "failed" };
}
