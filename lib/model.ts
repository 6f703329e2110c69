/**
 * The model call and the classification of its failures. Only the worker imports this.
 */
import OpenAI, {
  APIConnectionError,
  APIConnectionTimeoutError,
  APIError,
  APIUserAbortError,
} from "openai";
import { redactSecrets } from "./redact.ts";
import { tokenCounter, utf8Bytes } from "./tokens.ts";

/** Options of {@link createModel}. */
export type ModelOptions = {
  apiKey: string;
  /** An OpenAI-compatible endpoint. @default "https://api.openai.com/v1" */
  baseURL?: string | undefined;
  model: string;
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
  | { kind: "transient"; message: string; status: number | null }
  | { kind: "refused"; status: number; message: string }
  | {
      kind: "operator_fault";
      /** What of OUR configuration the provider refused; see {@link OperatorFault}. */
      fault: OperatorFault;
      status: number;
      code: string | null;
      message: string;
    }
  | { kind: "capacity_unavailable"; retryAfterSeconds: number | null };

/**
 * The part of our configuration a provider refusal points at (never the prompt's fault):
 * - `api_key`: 401, the key is revoked, wrong, or not a member of an organization or allowed IP;
 * - `region`: 403 `unsupported_country_region_territory`, the function runs where OpenAI does not serve;
 * - `permission`: any other 403, the key's project may not use this model or endpoint;
 * - `model`: 404, or `model_not_found` under any status: OPENAI_MODEL (or OPENAI_BASE_URL) is wrong;
 * - `request`: a 400 about a parameter we set (`unsupported_parameter`, `unsupported_value`,
 *   `param` naming `max_completion_tokens`, `stream`, ...): our request does not fit OPENAI_MODEL.
 */
export type OperatorFault = "api_key" | "region" | "permission" | "model" | "request";

/**
 * What one model call consumed. `provider`: the usage chunk the provider sent at the end of
 * the stream (what it bills). `counted`: the stream ended early (our abort, a timeout, a cut
 * connection), so the completion tokens are those streamed so far, counted with the model's
 * tokenizer by a counter that cannot throw (lib/tokens.ts), and the prompt tokens are counted the
 * same way once the provider accepted the request (zero when it refused it).
 */
export interface ModelUsage {
  promptTokens: number;
  completionTokens: number;
  source: "provider" | "counted";
  /** Output tokens spent on hidden reasoning, included in completionTokens (billed as output). 0 when none were reported. */
  reasoningTokens?: number;
}

export interface GenerateOptions {
  /** The output bound sent as `max_completion_tokens` (the plan's `max_output_tokens`). */
  maxOutputTokens: number;
  /** Aborting it cuts the stream at once (the provider stops generating, and billing). */
  signal?: AbortSignal;
  /** Called with the whole text so far after each chunk that added text. */
  onText?: (textSoFar: string) => void;
  /** OpenAI's service tier: "flex" is priced at Batch rates, slower, and may answer 429 resource unavailable. Omitted = the project's default tier. */
  serviceTier?: "flex" | "default" | undefined;
  /** A stable, non-identifying id of the end user (OpenAI's abuse attribution); never an email or the raw user id. */
  safetyIdentifier?: string | undefined;
  /** Called while the model streams no visible text but reports it is working (reasoning): with the reasoning tokens reported so far, or null when the provider has not reported a count yet. */
  onThinking?: ((reasoningTokens: number | null) => void) | undefined;
}

export interface Generation {
  text: string;
  usage: ModelUsage;
  finishReason: string | null;
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
 * `usage` what the provider will bill for it. {@link classifyModelError} looks at `cause`.
 */
export class ModelCallError extends Error {
  override readonly name = "ModelCallError";
  constructor(
    override readonly cause: unknown,
    readonly usage: ModelUsage,
  ) {
    super(cause instanceof Error ? cause.message : String(cause));
  }
}

/** The usage a failed call reported, or null when the failure carries none. */
export const usageOfFailure = (err: unknown): ModelUsage | null =>
  err instanceof ModelCallError ? err.usage : null;

/**
 * A chat-completions client with SDK retries OFF (`maxRetries: 0`): the queue owns retries,
 * so one delivery makes at most one model call (docs/DESIGN.md#invariant-7-one-model-call-per-claim), and a 429 comes back to us at
 * once instead of being retried inside a function that will be killed at `maxDuration`.
 *
 * Every call streams (`stream: true` with `stream_options.include_usage`) and is bounded by
 * `max_completion_tokens`: a stream can be cut the moment the job stops being ours (a cancel),
 * and the provider stops generating, and billing, when the connection closes. A call that
 * does not stream runs to its end whatever happens to the job.
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
  return {
    async generate(prompt, o) {
      // Loaded before the call (once per instance): `consumed` counts synchronously when the
      // call fails, with a counter that cannot throw, so no failure loses the attempt's usage.
      const countTokens = await tokenCounter(options.model);
      // The SDK's own timeout stops at the response headers; this deadline covers the stream.
      const deadline = AbortSignal.timeout(options.timeoutMs);
      const signal = o.signal ? AbortSignal.any([o.signal, deadline]) : deadline;
      let accepted = false;
      let text = "";
      let refusal = "";
      let finishReason: string | null = null;
      let reported: ModelUsage | null = null;
      const consumed = (): ModelUsage =>
        reported ??
        (accepted
          ? {
              promptTokens: countTokens(prompt),
              completionTokens: countTokens(text),
              source: "counted",
            }
          : { promptTokens: 0, completionTokens: 0, source: "counted" });
      const fail = (cause: unknown) => new ModelCallError(cause, consumed());
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
        const created = await client.chat.completions.create(
          {
            model: options.model,
            messages: [{ role: "user", content: prompt }],
            max_completion_tokens: o.maxOutputTokens,
            stream: true,
            stream_options: { include_usage: true },
          },
          { signal },
        );
        closeConnection = () => created.controller.abort();
        accepted = true;
        const chunks = created[Symbol.asyncIterator]();
        for (;;) {
          const next = await Promise.race([chunks.next(), stopped]);
          if (next.done) break;
          const chunk = next.value;
          if (chunk.usage) {
            reported = {
              promptTokens: chunk.usage.prompt_tokens,
              completionTokens: chunk.usage.completion_tokens,
              source: "provider",
            };
          }
          const choice = chunk.choices[0];
          if (!choice) continue;
          if (choice.delta?.refusal) refusal += choice.delta.refusal;
          if (choice.delta?.content) {
            text += choice.delta.content;
            o.onText?.(text);
          }
          if (choice.finish_reason) finishReason = choice.finish_reason;
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
      if (refusal) throw fail(new ModelOutputError("the model refused the request"));
      if (finishReason === "content_filter")
        throw fail(new ModelOutputError("the output was filtered"));
      if (!text) throw fail(new ModelOutputError("the model returned no text"));
      if (finishReason === null)
        // No finish_reason: the stream was cut without an error (a proxy, a dropped connection).
        throw fail(new APIConnectionError({ message: "the stream ended without a finish reason" }));
      return { text, usage: consumed(), finishReason };
    },
  };
}

/*
 * Why a 429 is split in two.
 *
 * OpenAI answers HTTP 429 for two different situations, and the SDK maps both to the same
 * RateLimitError (and would retry both the same way):
 *
 * - `rate_limit_exceeded` (type "requests" or "tokens"): too many requests or tokens per
 *   minute. It clears by itself within seconds to a minute, and the response says when
 *   (`retry-after-ms` / `retry-after`). Waiting and trying again is the right answer.
 * - `insufficient_quota` (code or type; also seen with code "credit_balance_exhausted"): the
 *   account is out of credit or over its monthly budget. It clears only when a human adds
 *   credit. Waiting helps only if someone is told.
 *
 * Both are "the provider said no", not "this job is broken", so both requeue the job with a
 * `resume_at` and count a provider quota hit (the give-up rule, hits >= N OR age > max, keeps
 * either from leaving a job pending for 39 hours: docs/DESIGN.md#a-requeue-that-counts-nothing). They differ in what else
 * happens: `insufficient_quota` pages on-call once per window, because no amount of waiting
 * fixes it by itself, while `rate_limit_exceeded` only holds the shared provider gate until
 * the time the provider gave. Any other 429 is treated as a rate limit: waiting is the
 * cautious reading of a refusal we do not recognise.
 */
function quotaReason(err: APIError): "rate_limit_exceeded" | "insufficient_quota" {
  const body = (err.error ?? {}) as { code?: unknown; type?: unknown };
  const words = [err.code, err.type, body.code, body.type];
  return words.some((w) => w === "insufficient_quota" || w === "credit_balance_exhausted")
    ? "insufficient_quota"
    : "rate_limit_exceeded";
}

/** Seconds to wait from `retry-after-ms`, else `retry-after` (seconds or HTTP date), else null. */
export function retryAfterSeconds(
  headers: Headers | undefined,
  now: Date = new Date(),
): number | null {
  const ms = Number.parseFloat(headers?.get("retry-after-ms") ?? "");
  if (Number.isFinite(ms) && ms >= 0) return Math.ceil(ms / 1000);
  const value = headers?.get("retry-after")?.trim();
  if (!value) return null;
  if (/^\d+(\.\d+)?$/.test(value)) return Math.ceil(Number(value));
  const at = Date.parse(value);
  if (Number.isNaN(at)) return null;
  return Math.max(0, Math.ceil((at - now.getTime()) / 1000));
}

/*
 * Why some 4xx are the operator's fault, not the user's.
 *
 * A user controls one thing in the request: the prompt (`messages`). What depends on it — a
 * prompt too long for the model (`context_length_exceeded`), a content-policy refusal
 * (`content_policy_violation`, `invalid_prompt`), a 200 that refuses — is theirs: the job fails
 * as `refused` and is counted into the user roll-up, never paged. Everything else in the request
 * is ours: the key (401 AuthenticationError), the project's permissions and the region the
 * function runs in (403 PermissionDeniedError), the model name and the endpoint (404
 * NotFoundError; a 404 also answers a wrong OPENAI_BASE_URL path), and the parameters we send
 * with it (a 400 naming `max_completion_tokens`, `stream`, `stream_options` or `model`, or the
 * codes `unsupported_parameter` / `unsupported_value`: a model that takes no streaming or no
 * `max_completion_tokens`). No prompt can cause these, and no prompt can fix them: every job
 * fails the same way until someone changes the configuration, so they page at once. A 400 with
 * no code and no param we recognise stays `refused`: paging on a refusal a prompt might cause
 * would let any user page on-call.
 */
const PROMPT_CODES = new Set([
  "context_length_exceeded",
  "content_policy_violation",
  "content_filter",
  "invalid_prompt",
]);
const REQUEST_CODES = new Set(["unsupported_parameter", "unsupported_value"]);
/** The request parameters lib/model.ts sets from configuration (never from the prompt). */
const OUR_PARAMS = new Set([
  "model",
  "max_completion_tokens",
  "max_tokens",
  "stream",
  "stream_options",
  "stream_options.include_usage",
]);

/** `code` or `param` of the error body (the SDK copies both from `body.error`), if a string. */
const word = (value: unknown): string | null => (typeof value === "string" ? value : null);

function operatorFault(err: APIError, status: number): OperatorFault | null {
  const code = word(err.code);
  const param = word(err.param);
  if (code !== null && PROMPT_CODES.has(code)) return null;
  if (status === 401) return "api_key";
  if (status === 403)
    return code === "unsupported_country_region_territory"
      ? "region"
      : code === "model_not_found"
        ? "model"
        : "permission";
  if (status === 404 || code === "model_not_found") return "model";
  if (
    status === 400 &&
    ((code !== null && REQUEST_CODES.has(code)) || (param !== null && OUR_PARAMS.has(param)))
  )
    return "request";
  return null;
}

/**
 * The message an operator fault carries. A 401's provider message echoes the key, masked
 * ("Incorrect API key provided: sk-abcd****wxyz"), so it is replaced by a fixed sentence: the
 * masked part is still part of a secret, and a key that is not `sk-`-shaped would escape the
 * redaction.
 */
function faultMessage(fault: OperatorFault, code: string | null, message: string): string {
  if (fault === "api_key") return `the provider refused the API key${code ? ` (${code})` : ""}`;
  return safeMessage(message);
}

function safeMessage(message: string): string {
  // Provider messages are short and prompt-free, but never echo anything key-shaped.
  return redactSecrets(message).slice(0, 300);
}

/**
 * Decide what a failed model call means:
 * - 429 → `provider_quota` (`insufficient_quota` or `rate_limit_exceeded`), with the wait the
 *   provider asked for (`retry-after-ms`, `retry-after` seconds or date) or `null`;
 * - timeout, connection error, 408, 409, 5xx, an unknown throw → `transient` (retry);
 * - 401, 403, 404, `model_not_found`, a 400 about a parameter we set → `operator_fault` (our
 *   configuration is wrong: fail, refund and page now);
 * - any other 4xx, or a 200 without usable output → `refused` (fail and refund now).
 *
 * @example
 * classifyModelError(new AuthenticationError(401, { code: "invalid_api_key" }, undefined, headers));
 * // → { kind: "operator_fault", fault: "api_key", status: 401, code: "invalid_api_key", message: "the provider refused the API key (invalid_api_key)" }
 */
export function classifyModelError(failure: unknown, now: Date = new Date()): ModelFailure {
  const err = failure instanceof ModelCallError ? failure.cause : failure;
  if (err instanceof ModelOutputError)
    return { kind: "refused", status: 200, message: err.message };
  // Connection, timeout and abort errors are APIErrors with no status: check them first.
  if (err instanceof APIConnectionError || err instanceof APIUserAbortError) {
    return { kind: "transient", status: null, message: safeMessage(err.message) };
  }
  if (err instanceof APIError && typeof err.status === "number") {
    const status = err.status;
    if (status === 429) {
      return {
        kind: "provider_quota",
        reason: quotaReason(err),
        retryAfterSeconds: retryAfterSeconds(err.headers, now),
      };
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
  const message = err instanceof Error ? err.message : String(err);
  return { kind: "transient", status: null, message: safeMessage(message) };
}

/**
 * Completion tokens in `text` by `model`'s tokenizer (what the worker reports as progress).
 * Never rejects: a count that fails is the text's UTF-8 bytes, an upper bound (lib/tokens.ts).
 */
export async function countOutputTokens(text: string, model: string): Promise<number> {
  try {
    return (await tokenCounter(model))(text);
  } catch {
    return utf8Bytes(text);
  }
}
