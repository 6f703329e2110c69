/**
 * What one attempt reads: the claim's tier, output bound and model, and the kind's reading of the
 * answer (with the page when the provider billed above the hold).
 */

import type { AttemptUsage, JobRow, StartResult } from "../jobs.ts";
import type { Kind, OutputRead } from "../kinds/kind.ts";
import { log } from "../log.ts";
import type { Generation, ModelUsage } from "../model.ts";
import type { WorkerDeps } from "../ports.ts";

/**
 * The kind's reading of a generation. A throw from it (a bug, or a schema its checks let
 * through that the validator cannot handle) is the model's answer refused, `output_invalid`:
 * the attempt was billed, so it ends through the usual path with its usage, never a 500 that
 * QStash would retry into `already_running` while the job waits for the sweeper. The log names
 * the error's class only: its message can quote the output.
 */
export async function readOutput(
  kind: Kind,
  result: Generation,
  input: object,
  jobId: string,
  attempt: number,
): Promise<OutputRead> {
  try {
    return await kind.readOutput(result.text, result.finishReason, input);
  } catch (error) {
    const name = error instanceof Error ? error.name : typeof error;
    log.error("job_output_unreadable", { jobId, attempt, kind: kind.id, error: name });
    return {
      ok: false,
      reason: "output_invalid",
      problem: `the output could not be checked (${name})`,
    };
  }
}

/**
 * A token plan's hold is the most the job can cost (docs/DESIGN.md#metering-hold-and-capture):
 * a provider that reports more broke that proof (a tokenizer that is not byte-level, framing
 * above the allowance, a bound not applied). complete_job still clamps the capture to the hold,
 * so the operator pays the difference: page once per window, not once per job.
 */
export async function alertIfAboveHold(
  deps: WorkerDeps,
  job: JobRow,
  attempt: number,
  usage: AttemptUsage,
): Promise<void> {
  const reported = usage.prompt_tokens + usage.completion_tokens;
  if (job.meter !== "tokens" || usage.source !== "provider" || reported <= job.hold) return;
  log.error("usage_above_hold", { jobId: job.id, attempt, hold: job.hold, ...usage });
  await deps.alerts.send({
    kind: "usage_above_hold",
    dedupKey: "provider:usage_above_hold",
    title: "The provider billed a job more tokens than its hold: the hold's bound is broken",
    fields: {
      job: job.id,
      hold: job.hold,
      prompt: usage.prompt_tokens,
      completion: usage.completion_tokens,
      model: modelOf(deps, job),
    },
  });
}

/** The job's model (its plan's, as enqueue resolved it), else the deployment's. */
export const modelOf = (deps: WorkerDeps, job: JobRow): string =>
  job.model ?? deps.config.openaiModel;

/**
 * The plan's bound from start_job. A claim without one (a database older than this code, during
 * a deploy) still gets a bound: the free plan's, the smallest, rather than none.
 */
const FALLBACK_OUTPUT_TOKENS = 512;
export function outputBound(value: unknown, jobId: string): number {
  if (typeof value === "number" && Number.isInteger(value) && value > 0) return value;
  log.warn("output_bound_missing", { jobId, fallback: FALLBACK_OUTPUT_TOKENS });
  return FALLBACK_OUTPUT_TOKENS;
}

/**
 * The service tier of this attempt, as start_job chose it: the plan's, or the standard tier once
 * a flex plan's job waited for capacity past the plan's fallback. A plan on the default tier
 * sends none (the project's tier, as before); a fallback names `default` (standard pricing)
 * whatever the project's setting.
 */
export interface AttemptTier {
  serviceTier: "flex" | "default" | "priority" | undefined;
  /** The plan's flex fallback in seconds, or null: never. */
  fallbackAfterSeconds: number | null;
}
export function attemptTier(claim: Extract<StartResult, { outcome: "started" }>): AttemptTier {
  const fallback = claim.flex_fallback_after_seconds;
  const fallbackAfterSeconds =
    typeof fallback === "number" && Number.isInteger(fallback) && fallback >= 0 ? fallback : null;
  if (claim.service_tier === "flex") return { serviceTier: "flex", fallbackAfterSeconds };
  if (claim.service_tier === "priority") return { serviceTier: "priority", fallbackAfterSeconds };
  if (fallbackAfterSeconds !== null) {
    log.info("flex_fallback", { jobId: claim.job.id, attempt: claim.job.attempts });
    return { serviceTier: "default", fallbackAfterSeconds };
  }
  // A money plan's hold is priced at the standard tier at most: name it, so a project whose
  // default tier is priority cannot bill above the hold.
  if (claim.job.meter === "money") return { serviceTier: "default", fallbackAfterSeconds };
  return { serviceTier: undefined, fallbackAfterSeconds };
}

/** An attempt's usage as SQL prices it: cached input and the served tier when the provider said. */
export const toAttemptUsage = (u: ModelUsage, servedTier?: string | null): AttemptUsage => ({
  prompt_tokens: u.promptTokens,
  completion_tokens: u.completionTokens,
  source: u.source,
  ...(u.cachedTokens ? { cached_tokens: u.cachedTokens } : {}),
  ...(servedTier ? { service_tier: servedTier } : {}),
});
