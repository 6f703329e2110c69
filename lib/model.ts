/**
 * The model port: one bounded, streamed call, and the classification of its failures. Only the
 * worker imports this. The call goes through one of two APIs (`OPENAI_API`): the Responses API
 * (the default, lib/model/responses.ts) or Chat Completions (lib/model/chat-completions.ts, for
 * OpenAI-compatible endpoints that speak only it); both give the worker the same `Generation`.
 */
import OpenAI, {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
} from "openai";
import { chatCompletionsAdapter } from "./model/chat-completions.ts";
import {
  faultMessage,
  inStreamQuota,
  type OperatorFault,
  operatorFault,
  PROMPT_CODES,
  quotaReason,
  retryAfterSeconds,
  safeMessage,
  waitInMessage,
  word,
} from "./model/classify.ts";
import { responsesAdapter } from "./model/responses.ts";
import type { Adapter, CallRequest, OutputFormat } from "./model/steps.ts";
import { tokenCounter } from "./tokens.ts";

export type { OperatorFault } from "./model/classify.ts";
export { retryAfterSeconds } from "./model/classify.ts";
export type { OutputFormat } from "./model/steps.ts";

/** The OpenAI API a model call goes through (`OPENAI_API`). */
export type ModelApi = "responses" | "chat_completions";

/** Options of {@link createModel}. */
export type ModelOptions = {
  apiKey: string;
  /** An OpenAI-compatible endpoint. @default "https://api.openai.com/v1" */
  baseURL?: string | undefined;
  model: string;
  /** @default "responses" */
  api?: ModelApi | undefined;
  /**
   * Abort the whole call (the request and every chunk of the stream) after this long; keep it
   * below the worker's `maxDuration`.
   */
  timeoutMs: number;
  fetch?: typeof fetch;
};

/** What the worker does next, decided by {@link classifyModelError}. */
export type ModelFailure =
  | {
      kind: "provider_quota";
      reason: "rate_limit_exceeded" | "insufficient_quota";
      retryAfterSeconds: number | null;
    }
  | { kind: "capacity_unavailable"; retryAfterSeconds: number | null }
  | { kind: "transient"; message: string; status: number | null }
  | { kind: "refused"; status: number; message: string }
  | {
      kind: "operator_fault";
      /** What of OUR configuration the provider refused; see {@link OperatorFault}. */
      fault: OperatorFault;
      status: number;
      code: string | null;
      message: string;
    };

/**
 * What one model call consumed. `provider`: the usage the provider sent at the end of the stream
 * (what it bills). `counted`: the stream ended early (our abort, a timeout, a cut connection),
 * so the completion tokens are those streamed so far, counted with the model's tokenizer by a
 * counter that cannot throw (lib/tokens.ts), plus the reasoning tokens the provider had reported
 * (none, as OpenAI streams today: hidden reasoning cut short is billed but not seen), and the
 * prompt tokens are counted the same way once the provider accepted the request (zero when it
 * refused it).
 */
export interface ModelUsage {
  promptTokens: number;
  completionTokens: number;
  /** Output tokens spent on hidden reasoning, included in completionTokens (billed as output). 0 when none were reported. */
  reasoningTokens?: number;
  /** Of the prompt tokens, those the provider served from its prompt cache (billed lower). Provider usage only. */
  cachedTokens?: number;
  source: "provider" | "counted";
}

export interface GenerateOptions {
  /** The output bound (the plan's `max_output_tokens`), sent as `max_output_tokens` / `max_completion_tokens`. */
  maxOutputTokens: number;
  /** Aborting it cuts the stream at once (the provider stops generating, and billing). */
  signal?: AbortSignal;
  /** Called with the whole text so far after each chunk that added text. */
  onText?: (textSoFar: string) => void;
  /** OpenAI's service tier: "flex" is priced at Batch rates, slower, and may answer 429 resource unavailable; "priority" costs more. Omitted = the project's default tier. */
  serviceTier?: "flex" | "default" | "priority" | undefined;
  /** The model of this call (the job's plan's). Omitted = the port's model (OPENAI_MODEL). */
  model?: string | undefined;
  /** The plan's reasoning effort (`reasoning.effort` / `reasoning_effort`). Omitted = the model's default. */
  reasoningEffort?: string | undefined;
  /** A stable, non-identifying id of the end user (OpenAI's abuse attribution); never an email or the raw user id. */
  safetyIdentifier?: string | undefined;
  /** Called while the model streams no visible text but reports it is working (reasoning): with the reasoning tokens reported so far, or null when the provider has not reported a count yet. */
  onThinking?: ((reasoningTokens: number | null) => void) | undefined;
  /**
   * What the model is told to do with the prompt: the Responses API's `instructions`, a leading
   * system message on Chat Completions. Omitted = the prompt alone (nothing is sent).
   */
  instructions?: string | undefined;
  /**
   * The output's shape (Structured Outputs): the answer is JSON that conforms to `schema`. The
   * Responses API's `text.format`, Chat Completions' `response_format`. Omitted = plain text.
   */
  format?: OutputFormat | undefined;
}

export interface Generation {
  text: string;
  usage: ModelUsage;
  finishReason: string | null;
  /**
   * The tier that served the call, as the provider's final usage says (`default`, `flex`,
   * `priority`; flex may be served at another tier): price by it, not by what was asked. Null
   * when the provider did not say.
   */
  serviceTier?: string | null;
}

/** The worker's port: one bounded, streamed call. */
export interface Model {
  generate(prompt: string, options: GenerateOptions): Promise<Generation>;
}

/**
 * The provider answered 200 but gave nothing usable (a refusal, a content filter, an empty or
 * truncated answer). Retrying the same prompt will not help, so it classifies as `refused`.
 */
export class ModelOutputError extends Error {
  override readonly name = "ModelOutputError";
}

/**
 * A failed call with what it consumed: `cause` is what the SDK threw (or a ModelOutputError),
 * `usage` what the provider will bill for it, `serviceTier` the tier the call asked for (a 429
 * means something else on flex). {@link classifyModelError} looks at `cause` and the tier.
 */
export class ModelCallError extends Error {
  override readonly name = "ModelCallError";
  constructor(
    override readonly cause: unknown,
    readonly usage: ModelUsage,
    readonly serviceTier: "flex" | "default" | "priority" | undefined = undefined,
  ) {
    super(cause instanceof Error ? cause.message : String(cause));
  }
}

/** The usage a failed call reported, or null when the failure carries none. */
export const usageOfFailure = (err: unknown): ModelUsage | null =>
  err instanceof ModelCallError ? err.usage : null;

const ADAPTERS: Record<ModelApi, Adapter> = {
  responses: responsesAdapter,
  chat_completions: chatCompletionsAdapter,
};

/**
 * A client with SDK retries OFF (`maxRetries: 0`): the queue owns retries, so one delivery makes
 * at most one model call (docs/DESIGN.md#invariant-7-one-model-call-per-claim), and a 429 comes
 * back to us at once instead of being retried inside a function that will be killed at
 * `maxDuration`.
 *
 * Every call streams and is bounded by the plan's output bound: a stream can be cut the moment
 * the job stops being ours (a cancel), and the provider stops generating, and billing, when the
 * connection closes. A call that does not stream runs to its end whatever happens to the job.
 *
 * @example
 * const model = createModel({ apiKey, model: "gpt-4o-mini", timeoutMs: 45_000 });
 * const { text, usage } = await model.generate("Write a haiku about queues", { maxOutputTokens: 512 });
 */
export function createModel(options: ModelOptions): Model {
  const client = new OpenAI({
    apiKey: options.apiKey,
    baseURL: options.baseURL,
    timeout: options.timeoutMs,
    maxRetries: 0,
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  const adapter = ADAPTERS[options.api ?? "responses"];
  return {
    async generate(prompt, o) {
      // Loaded before the call (once per instance): `consumed` counts synchronously when the
      // call fails, with a counter that cannot throw, so no failure loses the attempt's usage.
      const countTokens = await tokenCounter(o.model ?? options.model);
      // The SDK's own timeout stops at the response headers; this deadline covers the stream.
      const deadline = AbortSignal.timeout(options.timeoutMs);
      const signal = o.signal ? AbortSignal.any([o.signal, deadline]) : deadline;
      const request: CallRequest = {
        model: o.model ?? options.model,
        reasoningEffort: o.reasoningEffort,
        prompt,
        maxOutputTokens: o.maxOutputTokens,
        serviceTier: o.serviceTier,
        safetyIdentifier: o.safetyIdentifier,
        instructions: o.instructions,
        format: o.format,
      };
      let accepted = false;
      let text = "";
      let refusal = "";
      let finishReason: string | null = null;
      let reasoning = 0;
      let reported: ModelUsage | null = null;
      let servedTier: string | null = null;
      let failed: unknown = null;
      const consumed = (): ModelUsage =>
        reported ??
        (accepted
          ? {
              // The instructions are input too (the format's schema, which the provider also
              // bills as input, is left out: a lower bound, as the tokenizer's count is).
              promptTokens:
                countTokens(prompt) + (o.instructions ? countTokens(o.instructions) : 0),
              completionTokens: countTokens(text) + reasoning,
              reasoningTokens: reasoning,
              source: "counted",
            }
          : { promptTokens: 0, completionTokens: 0, reasoningTokens: 0, source: "counted" });
      const fail = (cause: unknown) => new ModelCallError(cause, consumed(), o.serviceTier);
      // Rejects when the signal fires: a read that waits on a stalled stream is left behind at
      // once, whether or not the fetch implementation cancels the body on abort.
      const stopped = new Promise<never>((_, reject) => {
        const stop = () => reject(signal.reason);
        if (signal.aborted) stop();
        else signal.addEventListener("abort", stop, { once: true });
      });
      stopped.catch(() => undefined);
      let closeConnection = () => {};
      try {
        const opened = await adapter(client, request, signal);
        closeConnection = opened.close;
        accepted = true;
        for (;;) {
          const next = await Promise.race([opened.steps.next(), stopped]);
          if (next.done) break;
          const step = next.value;
          switch (step.kind) {
            case "text":
              text += step.delta;
              o.onText?.(text);
              break;
            case "refusal":
              refusal += step.delta;
              break;
            case "thinking":
              if (step.reasoningTokens !== null)
                reasoning = Math.max(reasoning, step.reasoningTokens);
              if (text === "") o.onThinking?.(step.reasoningTokens);
              break;
            case "usage":
              reported = {
                promptTokens: step.promptTokens,
                completionTokens: step.completionTokens,
                reasoningTokens: step.reasoningTokens,
                cachedTokens: step.cachedTokens,
                source: "provider",
              };
              servedTier = step.serviceTier;
              break;
            case "finish":
              finishReason = step.reason;
              break;
            case "failed":
              failed = step.error;
              break;
          }
        }
      } catch (error) {
        if (deadline.aborted) throw fail(new APIConnectionTimeoutError());
        if (signal.aborted) throw fail(new APIUserAbortError());
        throw fail(error);
      } finally {
        // Close the connection if we stopped reading early: the provider stops generating.
        if (signal.aborted) closeConnection();
      }
      // An abort ends the SDK's stream quietly, as if it were complete: check for it.
      if (deadline.aborted) throw fail(new APIConnectionTimeoutError());
      if (signal.aborted) throw fail(new APIUserAbortError());
      if (failed !== null) throw fail(failed);
      if (refusal) throw fail(new ModelOutputError("the model refused the request"));
      if (finishReason === "content_filter")
        throw fail(new ModelOutputError("the output was filtered"));
      if (!text) throw fail(new ModelOutputError("the model returned no text"));
      if (finishReason === null)
        // No finish reason: the stream was cut without an error (a proxy, a dropped connection).
        throw fail(new APIConnectionError({ message: "the stream ended without a finish reason" }));
      return { text, usage: consumed(), finishReason, serviceTier: servedTier };
    },
  };
}

/**
 * Decide what a failed model call means:
 * - 429 → `provider_quota` (`insufficient_quota` or `rate_limit_exceeded`) or, for the flex
 *   tier's "resource unavailable", `capacity_unavailable`, with the wait the provider asked for
 *   (`retry-after-ms`, `retry-after` seconds or date) or `null` (lib/model/classify.ts says why);
 * - timeout, connection error, 408, 409, 5xx, an unknown throw → `transient` (retry);
 * - 401, 403, 404, `model_not_found`, a 400 about a parameter we set → `operator_fault` (our
 *   configuration is wrong: fail, refund and page now);
 * - any other 4xx, or a 200 without usable output → `refused` (fail and refund now);
 * - a failure inside a 200 stream (a Responses `error` or `response.failed` event, a Chat
 *   Completions error chunk): by its type and code, as the same error over HTTP (a quota or rate
 *   limit → `provider_quota` / `capacity_unavailable`; an `invalid_request_error` or a prompt's
 *   code → `operator_fault` or `refused`, status 200), else `transient`.
 *
 * @example
 * classifyModelError(new AuthenticationError(401, { code: "invalid_api_key" }, undefined, headers));
 * // → { kind: "operator_fault", fault: "api_key", status: 401, code: "invalid_api_key", message: "the provider refused the API key (invalid_api_key)" }
 */
export function classifyModelError(failure: unknown, now: Date = new Date()): ModelFailure {
  const err = failure instanceof ModelCallError ? failure.cause : failure;
  const flex = failure instanceof ModelCallError && failure.serviceTier === "flex";
  if (err instanceof ModelOutputError)
    return { kind: "refused", status: 200, message: err.message };
  // Connection, timeout and abort errors are APIErrors with no status: check them first.
  if (err instanceof APIConnectionError || err instanceof APIUserAbortError) {
    return { kind: "transient", status: null, message: safeMessage(err.message) };
  }
  if (err instanceof APIError && typeof err.status === "number") {
    const status = err.status;
    if (status === 429) {
      const reason = quotaReason(err, flex);
      const wait = retryAfterSeconds(err.headers, now);
      return reason === "capacity_unavailable"
        ? { kind: "capacity_unavailable", retryAfterSeconds: wait }
        : { kind: "provider_quota", reason, retryAfterSeconds: wait };
    }
    if (status === 408 || status === 409 || status >= 500) {
      return { kind: "transient", status, message: safeMessage(err.message) };
    }
    if (status >= 400) {
      const fault = operatorFault(err, status);
      if (fault !== null) {
        const code = word(err.code);
        return {
          kind: "operator_fault",
          fault,
          status,
          code,
          message: faultMessage(fault, code, err.message),
        };
      }
      return { kind: "refused", status, message: safeMessage(err.message) };
    }
  }
  if (err instanceof APIError) return streamFailure(err, flex, now);
  const message = err instanceof Error ? err.message : String(err);
  return { kind: "transient", status: null, message: safeMessage(message) };
}

/**
 * A failure the provider reported inside a stream it had accepted (HTTP 200, no status). It
 * carries the error object an HTTP answer would (OpenAI nests it under the event's `error`, with
 * its `type`), so it is classified as that answer would be: a quota or a rate limit as its 429
 * (the wait from the message, as no header comes with it), our request or the prompt as its 400,
 * with status 200 (what the provider answered); anything else (a server error) is transient.
 */
function streamFailure(err: APIError, flex: boolean, now: Date): ModelFailure {
  const code = word(err.code);
  if (inStreamQuota(err)) {
    const reason = quotaReason(err, flex);
    const wait = retryAfterSeconds(err.headers, now) ?? waitInMessage(err.message);
    return reason === "capacity_unavailable"
      ? { kind: "capacity_unavailable", retryAfterSeconds: wait }
      : { kind: "provider_quota", reason, retryAfterSeconds: wait };
  }
  const prompts =
    code !== null &&
    (PROMPT_CODES.has(code) || code.startsWith("image_") || code.startsWith("invalid_image"));
  if (word(err.type) === "invalid_request_error" || prompts || code === "model_not_found") {
    const fault = operatorFault(err, 400);
    if (fault !== null)
      return {
        kind: "operator_fault",
        fault,
        status: 200,
        code,
        message: faultMessage(fault, code, err.message),
      };
    return { kind: "refused", status: 200, message: safeMessage(err.message) };
  }
  return { kind: "transient", status: null, message: safeMessage(err.message) };
}
