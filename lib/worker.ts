/**
 * One QStash delivery of one job. Claim first (one SQL call); only a claim calls the model; the
 * result is written with a guarded transition that names the claim. The result says whether a
 * redelivery can help (`retry`): not for success, duplicates, late deliveries and failures already
 * recorded; yes for a transient model error. A database error throws. The edge (api/worker.ts)
 * turns that into QStash's language: 503 with Retry-After for a retry (and for a throw), else 200.
 */

import type { AttemptUsage, JobRow, JobStatus, RequeueResult, StartResult } from "./jobs.ts";
import { loadKind } from "./kinds/index.ts";
import type { Kind, ModelRequest, OutputRead } from "./kinds/kind.ts";
import { log } from "./log.ts";
import { deliveryDedupId, messageOf } from "./message.ts";
import {
  classifyModelError,
  countOutputTokens,
  type Generation,
  type ModelUsage,
  type OperatorFault,
  usageOfFailure,
} from "./model.ts";
import { storable, textCursor } from "./partial-text.ts";
import type { WorkerDeps } from "./ports.ts";
import { safetyIdentifier } from "./safety-identifier.ts";
import { countBytes, tokenCounter, utf8Bytes } from "./tokens.ts";
import { annotate, annotateSpan, traced, tracedPort, traceEvent } from "./trace.ts";

export type { WorkerDeps } from "./ports.ts";

/** What one delivery came to. The flow says whether to retry; the edge picks the status. */
export interface WorkerResult {
  /** A redelivery may help (a transient model error): the queue should deliver it again. */
  retry: boolean;
  outcome: string;
}

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
  const done = await completeWithRetry(deps, job.id, attempt, storable(read.output), usage);
  await alertIfAboveHold(deps, job, attempt, usage);
  if (done.outcome === "completed") {
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
 * The kind's reading of a generation. A throw from it (a bug, or a schema its checks let
 * through that the validator cannot handle) is the model's answer refused, `output_invalid`:
 * the attempt was billed, so it ends through the usual path with its usage, never a 500 that
 * QStash would retry into `already_running` while the job waits for the sweeper. The log names
 * the error's class only: its message can quote the output.
 */
async function readOutput(
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
async function alertIfAboveHold(
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
const modelOf = (deps: WorkerDeps, job: JobRow): string => job.model ?? deps.config.openaiModel;

/**
 * The plan's bound from start_job. A claim without one (a database older than this code, during
 * a deploy) still gets a bound: the free plan's, the smallest, rather than none.
 */
const FALLBACK_OUTPUT_TOKENS = 512;
function outputBound(value: unknown, jobId: string): number {
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
interface AttemptTier {
  serviceTier: "flex" | "default" | "priority" | undefined;
  /** The plan's flex fallback in seconds, or null: never. */
  fallbackAfterSeconds: number | null;
}
function attemptTier(claim: Extract<StartResult, { outcome: "started" }>): AttemptTier {
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

type ModelCall =
  | { ok: true; result: Generation }
  | { ok: false; error: unknown; usage: AttemptUsage | null; stoppedBy: JobStatus | "gone" | null };

/** An attempt's usage as SQL prices it: cached input and the served tier when the provider said. */
const toAttemptUsage = (u: ModelUsage, servedTier?: string | null): AttemptUsage => ({
  prompt_tokens: u.promptTokens,
  completion_tokens: u.completionTokens,
  source: u.source,
  ...(u.cachedTokens ? { cached_tokens: u.cachedTokens } : {}),
  ...(servedTier ? { service_tier: servedTier } : {}),
});

/*
 * Why the worker streams and writes its progress on a timer.
 *
 * A cancel refunds the unit at once (cancel_job), but a model call that nobody listens to any
 * more runs to its end and is billed: enqueue, wait for running, cancel, repeat, and one free
 * unit a day buys an unbounded bill. The stream is what can be stopped: closing it stops the
 * provider generating. The worker learns that the job is no longer its own from the one write
 * it makes anyway, its progress: once as the first text arrives (what the page shows first), then
 * every `progressIntervalMs` (one second by default), on a timer and not on chunks, so a stalled
 * stream learns of a cancel as fast as a busy one. The write is
 * guarded on the claim (record_progress); `not_running` aborts the stream in the same tick. So a
 * canceled attempt streams at most about one interval (plus a round trip) past the cancel, and
 * every attempt is bounded by the plan's max_output_tokens anyway. A failed progress write
 * (the database is down) does not stop the stream: the answer may still be written, and the
 * bound and the timeout still hold.
 */
async function streamModel(
  deps: WorkerDeps,
  job: JobRow,
  attempt: number,
  maxOutputTokens: number,
  serviceTier: "flex" | "default" | "priority" | undefined,
  kind: Kind,
  request: ModelRequest,
  plan: { reasoningEffort: string | undefined },
): Promise<ModelCall> {
  const controller = new AbortController();
  let text = "";
  // What of `text` the database stores: each write sends only what follows it.
  const cursor = textCursor();
  // Reasoning streams no visible text: the progress write says "thinking" (with the provider's
  // count of reasoning tokens once it reports one) instead of an empty output that looks stuck.
  // Those tokens are billed output, so they are part of the completion tokens written.
  let thinking = false;
  let reasoningTokens: number | null = null;
  let stoppedBy: JobStatus | "gone" | null = null;
  let writing: Promise<void> | null = null;
  let promptTokens: number | undefined;
  const write = async () => {
    try {
      // The write is how the worker learns of a cancel: it is sent whatever the count does (a
      // count that fails is the bytes, an upper bound).
      const streamed = text;
      const visibleTokens = await countOutputTokens(streamed, modelOf(deps, job)).catch(() =>
        utf8Bytes(streamed),
      );
      const reasoned = reasoningTokens;
      const completionTokens = visibleTokens + (reasoned ?? 0);
      const delta = cursor.next(streamed);
      // The model input as the model's tokenizer counts it, with its framing (the kind knows
      // what it sends): what a cancel or a sweep of this attempt charges for it (enqueue held
      // the kind's bound, bytes + framing).
      promptTokens ??= kind.countedPromptTokens(
        request,
        await tokenCounter(modelOf(deps, job)).catch(() => countBytes),
      );
      const r = await deps.jobs.progress(job.id, {
        attempt,
        offset: delta.offset,
        text: delta.text,
        completionTokens,
        promptTokens,
        thinking: thinking && streamed === "",
        reasoningTokens: reasoned,
      });
      if (r.outcome === "recorded") cursor.stored(streamed, delta, r.stored);
      traceEvent("progress", {
        "gen_ai.usage.output_tokens": completionTokens,
        outcome: r.outcome,
      });
      if (r.outcome !== "recorded" && stoppedBy === null) {
        stoppedBy = r.outcome === "not_running" ? r.status : "gone";
        controller.abort();
      }
    } catch (error) {
      log.warn("progress_write_failed", { jobId: job.id, attempt, error });
    }
  };
  // The first write goes out on the first text, not a whole interval later: it is what the
  // page shows first. The timer then writes once per interval (a stalled stream included).
  let firstWritten = false;
  const writeNow = () => {
    if (writing === null && stoppedBy === null) writing = write().finally(() => (writing = null));
  };
  const onFirstText = () => {
    if (firstWritten) return;
    firstWritten = true;
    writeNow();
  };
  const timer = setInterval(() => {
    firstWritten = true;
    writeNow();
  }, deps.config.progressIntervalMs);
  try {
    const result = await deps.model.generate(request.prompt, {
      maxOutputTokens,
      instructions: request.instructions,
      format: request.format,
      signal: controller.signal,
      onText: (t) => {
        text = t;
        thinking = false;
        onFirstText();
      },
      onThinking: (tokens) => {
        thinking = text === "";
        if (tokens !== null && Number.isInteger(tokens) && tokens >= 0) reasoningTokens = tokens;
      },
      serviceTier,
      model: modelOf(deps, job),
      reasoningEffort: plan.reasoningEffort,
      safetyIdentifier: safetyIdentifier(job.user_id, deps.config.openaiSafetyIdentifierKey),
    });
    annotateSpan({
      "gen_ai.usage.input_tokens": result.usage.promptTokens,
      "gen_ai.usage.output_tokens": result.usage.completionTokens,
      "gen_ai.usage.source": result.usage.source,
      "gen_ai.response.finish_reasons": result.finishReason,
    });
    return { ok: true, result };
  } catch (error) {
    const usage = usageOfFailure(error);
    const failure = classifyModelError(error, deps.now());
    annotateSpan({
      "error.type": failure.kind,
      "http.response.status_code": "status" in failure ? failure.status : 429,
      "openai.error.reason": failure.kind === "provider_quota" ? failure.reason : null,
      "gen_ai.usage.input_tokens": usage?.promptTokens,
      "gen_ai.usage.output_tokens": usage?.completionTokens,
      "job.stopped_by": stoppedBy,
    });
    return { ok: false, error, usage: usage && toAttemptUsage(usage), stoppedBy };
  } finally {
    clearInterval(timer);
    await writing;
  }
}

/**
 * The usage of an attempt whose own transition was refused: an insert-only event, because the
 * job may be final. Best effort: losing this record must not turn a settled delivery into a
 * retry, so a failure is logged, not thrown.
 */
async function recordUsage(
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
async function completeWithRetry(
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

function requeueArgs(
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

async function onModelError(
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

async function afterRequeue(deps: WorkerDeps, r: RequeueResult): Promise<WorkerResult> {
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
