/**
 * The model call and the classification of its failures. Only the worker imports this.
 */
import OpenAI, { APIConnectionError, APIError, APIUserAbortError } from "openai";

/** Options of {@link createModel}. */
export type ModelOptions = {
  apiKey: string;
  /** An OpenAI-compatible endpoint. @default "https://api.openai.com/v1" */
  baseURL?: string | undefined;
  model: string;
  /** Abort the call after this long; keep it below the worker's `maxDuration`. */
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
  | { kind: "refused"; status: number; message: string };

/**
 * The provider answered 200 but gave nothing usable (a refusal, a content filter, an empty or
 * truncated answer). Retrying the same prompt will not help, so it classifies as `refused`.
 */
export class ModelOutputError extends Error {
  override readonly name = "ModelOutputError";
}

/**
 * A chat-completions client with SDK retries OFF (`maxRetries: 0`): the queue owns retries,
 * so one delivery makes at most one model call (docs/DESIGN.md#invariant-7-one-model-call-per-claim), and a 429 comes back to us at
 * once instead of being retried inside a function that will be killed at `maxDuration`.
 *
 * @example
 * const model = createModel({ apiKey, model: "gpt-4o-mini", timeoutMs: 45_000 });
 * const text = await model.generate("Write a haiku about queues");
 */
export function createModel(options: ModelOptions): { generate(prompt: string): Promise<string> } {
  const client = new OpenAI({
    apiKey: options.apiKey,
    baseURL: options.baseURL,
    timeout: options.timeoutMs,
    maxRetries: 0,
    ...(options.fetch ? { fetch: options.fetch } : {}),
  });
  return {
    async generate(prompt) {
      const completion = await client.chat.completions.create({
        model: options.model,
        messages: [{ role: "user", content: prompt }],
      });
      const choice = completion.choices[0];
      const text = choice?.message.content;
      if (choice?.message.refusal) throw new ModelOutputError("the model refused the request");
      if (choice?.finish_reason === "content_filter")
        throw new ModelOutputError("the output was filtered");
      if (!text) throw new ModelOutputError("the model returned no text");
      return text;
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

function safeMessage(message: string): string {
  // Provider messages are short and prompt-free, but never echo anything key-shaped.
  return message.replace(/\b(sk|sess)-[A-Za-z0-9_*-]{6,}/g, "[redacted]").slice(0, 300);
}

/**
 * Decide what a failed model call means:
 * - 429 → `provider_quota` (`insufficient_quota` or `rate_limit_exceeded`), with the wait the
 *   provider asked for (`retry-after-ms`, `retry-after` seconds or date) or `null`;
 * - timeout, connection error, 408, 409, 5xx, an unknown throw → `transient` (retry);
 * - any other 4xx, or a 200 without usable output → `refused` (fail and refund now).
 */
export function classifyModelError(err: unknown, now: Date = new Date()): ModelFailure {
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
    if (status >= 400) return { kind: "refused", status, message: safeMessage(err.message) };
  }
  const message = err instanceof Error ? err.message : String(err);
  return { kind: "transient", status: null, message: safeMessage(message) };
}
