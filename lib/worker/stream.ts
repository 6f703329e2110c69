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

import type { AttemptUsage, JobRow, JobStatus } from "../jobs.ts";
import type { Kind, ModelRequest } from "../kinds/kind.ts";
import { log } from "../log.ts";
import { classifyModelError, type Generation, usageOfFailure } from "../model.ts";
import { textCursor } from "../partial-text.ts";
import type { WorkerDeps } from "../ports.ts";
import { safetyIdentifier } from "../safety-identifier.ts";
import { countBytes, growingTextCounter, type TokenCounter, tokenCounter } from "../tokens.ts";
import { annotateSpan, traceEvent } from "../trace.ts";
import { modelOf, toAttemptUsage } from "./attempt.ts";

export type ModelCall =
  | { ok: true; result: Generation }
  | { ok: false; error: unknown; usage: AttemptUsage | null; stoppedBy: JobStatus | "gone" | null };

export async function streamModel(
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
  let counted: TokenCounter | undefined;
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
      // Counted as it grows: each write pays for what arrived, not for the whole answer again.
      counted ??= growingTextCounter(
        await tokenCounter(modelOf(deps, job)).catch(() => countBytes),
      );
      const visibleTokens = counted(streamed);
      const reasoned = reasoningTokens;
      const completionTokens = visibleTokens + (reasoned ?? 0);
      const delta = cursor.next(streamed);
      // The model input as the model's tokenizer counts it, with its framing (the kind knows
      // what it sends): what a cancel or a sweep of this attempt charges for it (enqueue held
      // the kind's bound, bytes + framing).
      // Cut as a growing text is, so an 8,000-character unspaced prompt costs milliseconds.
      promptTokens ??= kind.countedPromptTokens(
        request,
        growingTextCounter(await tokenCounter(modelOf(deps, job)).catch(() => countBytes)),
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
      if (r.outcome === "recorded") {
        cursor.stored(streamed, delta, r.stored);
        // What the database now holds of this write, to the watchers (unawaited: a hint).
        void deps.live?.progress(job.user_id, {
          job_id: job.id,
          attempt,
          offset: delta.offset,
          text: firstCodePoints(delta.text, r.stored - delta.offset),
          tokens: completionTokens,
          thinking: thinking && streamed === "",
          reasoning_tokens: reasoned,
        });
      }
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

/** The first `n` code points of `text` (none for n ≤ 0): the part of a delta the database stored. */
function firstCodePoints(text: string, n: number): string {
  if (n <= 0) return "";
  let units = 0;
  let seen = 0;
  for (const ch of text) {
    if (seen === n) break;
    units += ch.length;
    seen++;
  }
  return text.slice(0, units);
}
