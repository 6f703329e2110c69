/**
 * A model error mapped to the job's transition (lib/model.ts classifies it): wait for the
 * provider, wait for capacity, release for a redelivery, or fail, paging on-call when the fault
 * is our configuration.
 */

import type { AttemptUsage, JobRow } from "../jobs.ts";
import { log } from "../log.ts";
import { classifyModelError, type OperatorFault } from "../model.ts";
import type { WorkerDeps } from "../ports.ts";
import type { AttemptTier } from "./attempt.ts";
import { afterRequeue, recordUsage, requeueArgs, type WorkerResult } from "./settle.ts";

export async function onModelError(
  deps: WorkerDeps,
  job: JobRow,
  attempt: number,
  error: unknown,
  usage: AttemptUsage | null,
  tier: AttemptTier,
): Promise<WorkerResult> {
  const failure = classifyModelError(error, deps.now());
  // The transition that ends this attempt carries its usage; when someone else ended the job
  // first, the usage goes into an event of its own.
  const settled = async <R extends { outcome: string }>(r: R): Promise<R> => {
    if (r.outcome === "not_running") await recordUsage(deps, job.id, attempt, usage);
    return r;
  };
  switch (failure.kind) {
    case "provider_quota": {
      const waitSeconds = failure.retryAfterSeconds ?? deps.config.providerBackoffSeconds;
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
      const r = await settled(
        await deps.jobs.requeue(
          job.id,
          requeueArgs(deps, attempt, resumeAt, `429 ${failure.reason}`, true, usage),
        ),
      );
      return afterRequeue(deps, r);
    }
    case "capacity_unavailable": {
      // The flex tier had no capacity (429 resource unavailable): nothing was billed, and it says
      // nothing about our quota or about the other tiers. So the job waits and tries again
      // within its max age, without counting a provider quota hit (three would give it up) and
      // without touching the shared provider gate (it would hold back every plan's jobs, the
      // standard tier's too). When the plan falls back to the standard tier, the wait ends no
      // later than the fallback is due (start_job then chooses the default tier).
      const now = deps.now().getTime();
      const waitSeconds = failure.retryAfterSeconds ?? deps.config.providerBackoffSeconds;
      let resumeAt = now + waitSeconds * 1000;
      if (tier.fallbackAfterSeconds !== null) {
        const since = job.capacity_wait_since ? Date.parse(job.capacity_wait_since) : now;
        resumeAt = Math.max(now, Math.min(resumeAt, since + tier.fallbackAfterSeconds * 1000));
      }
      const r = await settled(
        await deps.jobs.requeue(job.id, {
          ...requeueArgs(
            deps,
            attempt,
            new Date(resumeAt),
            "429 capacity_unavailable",
            false,
            usage,
          ),
          capacity: true,
        }),
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
      const r = await settled(
        await deps.jobs.release(job.id, {
          attempt,
          error: `transient: ${failure.status ?? "no response"}`,
          usage,
        }),
      );
      // Canceled, failed or reclaimed while the model ran: that caller owns the job's fate, and
      // a redelivery cannot help (it would only find the job final and count as a retry).
      if (r.outcome !== "released") return { retry: false, outcome: r.outcome };
      return { retry: true, outcome: "released" };
    }
    case "refused": {
      log.warn("model_refused", { jobId: job.id, attempt, status: failure.status });
      const r = await settled(
        await deps.jobs.fail(job.id, {
          reason: "model_refused",
          error: `${failure.status}: ${failure.message}`.slice(0, 500),
          attempt,
          usage,
        }),
      );
      // A prompt can make the model refuse at will: counted into the window's summary, not paged.
      if (r.outcome === "failed")
        await deps.alerts.record({ reason: "model_refused", userId: job.user_id });
      return { retry: false, outcome: r.outcome === "failed" ? "failed" : r.outcome };
    }
    case "operator_fault": {
      // Our configuration is wrong (a revoked key, an unknown model, a region or a parameter the
      // provider refuses): no retry and no wait fixes it, and every job fails the same way until
      // someone changes it. The job fails with a reason of its own (refunded, like every failure
      // by us) and on-call is paged at once, once per window per status, not counted into the
      // user roll-up: no user caused it. The shared provider gate stays open: it is one Redis key
      // for every deployment, and the fault belongs to this deployment's configuration (an old
      // deployment still running with the revoked key, or a function in an unsupported region,
      // must not hold back a healthy one). Each job makes one unbilled call and ends; nothing
      // loops, so the provider sees at most one request per job submitted.
      log.error("model_operator_fault", {
        jobId: job.id,
        attempt,
        fault: failure.fault,
        status: failure.status,
        code: failure.code,
      });
      const r = await settled(
        await deps.jobs.fail(job.id, {
          reason: "provider_misconfigured",
          error: `${failure.status} ${failure.code ?? failure.fault}: ${failure.message}`.slice(
            0,
            500,
          ),
          attempt,
          usage,
        }),
      );
      // Paged whatever became of this job (a cancel may have ended it first): the fault is ours.
      await deps.alerts.send({
        kind: "provider_misconfigured",
        dedupKey: `provider:misconfigured:${failure.status}`,
        title: `AI provider refuses our configuration (${failure.status} ${failure.code ?? failure.fault}): ${FAULT_FIX[failure.fault]}`,
        fields: {
          fault: failure.fault,
          status: failure.status,
          code: failure.code,
          provider_message: failure.message,
          job: job.id,
        },
      });
      return { retry: false, outcome: r.outcome === "failed" ? "failed" : r.outcome };
    }
  }
}

/** What on-call does about each operator fault (docs/RUNBOOK.md, `provider_misconfigured`). */
const FAULT_FIX: Record<OperatorFault, string> = {
  api_key: "rotate OPENAI_API_KEY (revoked, wrong, or not allowed from this IP) and redeploy",
  region:
    "the functions run in a country, region or territory OpenAI does not serve: move the Vercel function region",
  permission:
    "the key's project lacks permission for OPENAI_MODEL or this endpoint: grant it, or use a key with access",
  model:
    "OPENAI_MODEL is unknown to this key's project (or OPENAI_BASE_URL is wrong): fix the variable and redeploy",
  request:
    "OPENAI_MODEL does not accept a parameter we send (streaming, max_completion_tokens): choose a chat model that does",
};
