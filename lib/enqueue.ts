/**
 * Starting a job: rate limit, one SQL call that reserves + checks + inserts, then publish.
 * The job row is the outbox: if this function dies between the commit and the publish, the
 * sweeper republishes the queued job (or fails and refunds it once it is too old).
 */

import type { JobRow, PlanKind, UsageRow } from "./jobs.ts";
import { log } from "./log.ts";
import { userPseudonym } from "./log-pseudonym.ts";
import { messageOf } from "./message.ts";
import type { Deps } from "./ports.ts";
import { annotate, joinJob, traced } from "./trace.ts";
import type { JobRequest } from "./validate.ts";

export type EnqueueOutcome =
  | { outcome: "enqueued" | "replayed"; job: JobRow; usage: UsageRow }
  | { outcome: "rate_limited"; retryAfterSeconds: number }
  /** `hold`: what this job would have held (1, or its prompt's tokens + the output bound). */
  | { outcome: "quota_exceeded"; resetsAt: Date; usage: UsageRow; hold: number }
  | { outcome: "too_many_active_jobs"; usage: UsageRow }
  /** The organization is not the caller's (or does not exist): nothing held. */
  | { outcome: "not_a_member" }
  /** The organization's pool, or the member's cap, cannot hold it until `resetsAt`. */
  | {
      outcome: "pool_exhausted" | "member_cap_reached";
      resetsAt: Date;
      usage: UsageRow;
      hold: number;
    }
  | { outcome: "idempotency_key_reused" }
  | { outcome: "invalid_prompt" }
  | { outcome: "invalid_input" }
  | { outcome: "invalid_idempotency_key" }
  | { outcome: "unknown_kind" }
  /** The plan does not offer the kind; what it offers. */
  | { outcome: "kind_not_in_plan"; kinds: PlanKind[] }
  /** The token's user has no account (deleted, or never created): nothing held. */
  | { outcome: "user_not_found" }
  /** The job's model is past its shutdown date: nothing held. */
  | { outcome: "model_retired"; model: string; shutdownDate: string }
  | { outcome: "unavailable"; jobId: string; refunded: boolean };

export async function enqueueJob(
  deps: Pick<Deps, "jobs" | "queue" | "rateLimiter">,
  /** The job's kind, input, text and hold bound as the edge checked them (lib/validate.ts). */
  input: JobRequest & {
    userId: string;
    idempotencyKey: string | null;
    /** The organization whose pool holds the job (docs/DESIGN.md#organizations); null: personal. */
    organizationId?: string | null;
  },
): Promise<EnqueueOutcome> {
  const limit = await traced("rate_limit", {}, () => deps.rateLimiter.check(input.userId));
  if (!limit.ok) return { outcome: "rate_limited", retryAfterSeconds: limit.retryAfterSeconds };

  const r = await traced("db enqueue_job", { "db.system.name": "postgresql" }, () =>
    deps.jobs.enqueue({
      userId: input.userId,
      prompt: input.text,
      kind: input.kind,
      input: input.input,
      idempotencyKey: input.idempotencyKey,
      // The kind's bound of its model input (bytes + framing: an upper bound on its tokens with no
      // tokenizer loaded, lib/tokens.ts); passed for every plan (the plan is known inside the SQL
      // call): a job plan ignores it.
      promptTokens: input.holdTokens,
      organizationId: input.organizationId ?? null,
    }),
  );
  // From here on the request is the first span of the job's trace (lib/trace.ts).
  if (r.outcome === "enqueued" || r.outcome === "replayed") {
    joinJob(r.job.id);
    annotate({ "job.kind": r.job.kind, "job.plan": r.job.plan_id, "job.status": r.job.status });
  }
  switch (r.outcome) {
    case "quota_exceeded":
      return {
        outcome: "quota_exceeded",
        resetsAt: new Date(r.resets_at),
        usage: r.usage,
        hold: r.hold ?? 1,
      };
    case "pool_exhausted":
    case "member_cap_reached":
      return {
        outcome: r.outcome,
        resetsAt: new Date(r.resets_at),
        usage: r.usage,
        hold: r.hold,
      };
    case "not_a_member":
      return { outcome: r.outcome };
    case "kind_not_in_plan":
      return { outcome: r.outcome, kinds: r.kinds };
    case "model_retired":
      // An operator's fault (the plan still names a model the provider no longer serves): the
      // log says which; the client is told it is not theirs.
      log.error("model_retired", { model: r.model, shutdownDate: r.shutdown_date });
      return { outcome: r.outcome, model: r.model, shutdownDate: r.shutdown_date };
    case "too_many_active_jobs":
    case "idempotency_key_reused":
    case "invalid_prompt":
    case "invalid_input":
    case "invalid_idempotency_key":
    case "unknown_kind":
    case "user_not_found":
      return r.outcome === "too_many_active_jobs"
        ? { outcome: r.outcome, usage: r.usage }
        : { outcome: r.outcome };
    case "replayed":
      // The first request may have died between commit and publish: publishing again under the
      // same deduplication id is free when the first publish did happen, and heals it when not.
      if (r.job.status === "queued" && r.job.resume_at === null) {
        await publish(deps, r.job).catch((error) => {
          log.warn("replay_republish_failed", { jobId: r.job.id, error });
        });
      }
      return r;
    case "enqueued":
      break;
  }

  // Read while the publish runs (a warm instance knows it): the line names the user by it.
  const user = userPseudonym(deps.jobs, input.userId);
  try {
    await publish(deps, r.job);
    log.info("job_enqueued", { jobId: r.job.id, user: await user });
    return r;
  } catch (error) {
    log.error("publish_failed", { jobId: r.job.id, error });
    // Nothing may stay reserved for a job no one will run: fail it, which refunds it.
    try {
      const failed = await deps.jobs.fail(r.job.id, {
        reason: "publish_failed",
        error: "could not publish to the queue",
      });
      return { outcome: "unavailable", jobId: r.job.id, refunded: failed.outcome === "failed" };
    } catch (failError) {
      // The sweeper ends it (republish, then fail + refund); the client is told to retry.
      log.error("publish_failed_fail_failed", { jobId: r.job.id, error: failError });
      return { outcome: "unavailable", jobId: r.job.id, refunded: false };
    }
  }
}

const publish = (deps: Pick<Deps, "queue">, job: JobRow) =>
  traced("qstash publish", { "job.id": job.id, "job.publish_seq": job.publish_seq }, () =>
    deps.queue.publishJob(messageOf(job)),
  );
