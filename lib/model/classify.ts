/**
 * The decision tables behind `classifyModelError` (lib/model.ts): which 429 is which, which
 * refusal is ours (an operator fault) and which the prompt's, and how long the provider asked us
 * to wait. They read the SDK's APIError only, so they hold for both APIs.
 */
import type { APIError } from "openai";
import { redactSecrets } from "../redact.ts";

/*
 * Why a 429 is split in three.
 *
 * OpenAI answers HTTP 429 for three different situations, and the SDK maps all of them to the
 * same RateLimitError (and would retry them the same way):
 *
 * - `rate_limit_exceeded` (type "requests" or "tokens"): too many requests or tokens per
 *   minute. It clears by itself within seconds to a minute, and the response says when
 *   (`retry-after-ms` / `retry-after`). Waiting and trying again is the right answer.
 * - `insufficient_quota` (code or type; also seen with code "credit_balance_exhausted"): the
 *   account is out of credit or over its monthly budget. It clears only when a human adds
 *   credit. Waiting helps only if someone is told.
 * - the flex tier's "429 Resource Unavailable" (OpenAI's flex processing guide: flex "may
 *   sometimes lack sufficient resources to handle your requests, resulting in a 429 Resource
 *   Unavailable error code. You will not be charged when this occurs."): OpenAI's flex capacity
 *   for this model is short right now. It says nothing about OUR limits: reading it as
 *   `rate_limit_exceeded` would close the shared provider gate for every plan, the default tier
 *   too, over capacity that only flex lacks. So it is `capacity_unavailable`: read from the
 *   wording or a `resource_unavailable` code, or from any 429 to a flex request that carries
 *   neither a quota nor a rate-limit code (the guide documents the status and the wording, not
 *   the body's code).
 *
 * The first two are "the provider said no", not "this job is broken", so both requeue the job
 * with a `resume_at` and count a provider quota hit (the give-up rule, hits >= N OR age > max,
 * keeps either from leaving a job pending for 39 hours: docs/DESIGN.md#a-requeue-that-counts-nothing).
 * They differ in what else happens: `insufficient_quota` pages on-call once per window, because
 * no amount of waiting fixes it by itself, while `rate_limit_exceeded` only holds the shared
 * provider gate until the time the provider gave. Any other 429 (to a request on the default
 * tier) is treated as a rate limit: waiting is the cautious reading of a refusal we do not
 * recognise.
 */
export type QuotaReason = "rate_limit_exceeded" | "insufficient_quota" | "capacity_unavailable";

const RATE_LIMIT_WORDS = new Set(["rate_limit_exceeded", "requests", "tokens"]);

export function quotaReason(err: APIError, flex: boolean): QuotaReason {
  const body = (err.error ?? {}) as { code?: unknown; type?: unknown };
  const words = [err.code, err.type, body.code, body.type];
  if (words.some((w) => w === "insufficient_quota" || w === "credit_balance_exhausted"))
    return "insufficient_quota";
  if (words.some((w) => w === "resource_unavailable") || /resource unavailable/i.test(err.message))
    return "capacity_unavailable";
  if (flex && !words.some((w) => typeof w === "string" && RATE_LIMIT_WORDS.has(w)))
    return "capacity_unavailable";
  return "rate_limit_exceeded";
}

/** Inside a stream: the words of a 429 (a quota, a rate limit, flex capacity), in type or code. */
export function inStreamQuota(err: APIError): boolean {
  const body = (err.error ?? {}) as { code?: unknown; type?: unknown };
  return [err.code, err.type, body.code, body.type].some(
    (w) =>
      w === "insufficient_quota" ||
      w === "credit_balance_exhausted" ||
      w === "resource_unavailable" ||
      (typeof w === "string" && RATE_LIMIT_WORDS.has(w)),
  );
}

/**
 * The wait a rate-limit message names ("Please try again in 1.5s.", "in 150ms"), in whole
 * seconds rounded up, or null: an error inside a stream has no `retry-after` header of its own.
 */
export function waitInMessage(message: string): number | null {
  const m = /try again in (\d+(?:\.\d+)?)(ms|s)\b/.exec(message);
  if (!m) return null;
  const seconds = Number(m[1]) / (m[2] === "ms" ? 1000 : 1);
  return Math.ceil(seconds);
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

/**
 * The part of our configuration a provider refusal points at (never the prompt's fault):
 * - `api_key`: 401, the key is revoked, wrong, or not a member of an organization or allowed IP;
 * - `region`: 403 `unsupported_country_region_territory`, the function runs where OpenAI does not serve;
 * - `permission`: any other 403, the key's project may not use this model or endpoint;
 * - `model`: 404, or `model_not_found` under any status: OPENAI_MODEL (or OPENAI_BASE_URL) is wrong;
 * - `request`: a 400 about a parameter we set (`unsupported_parameter`, `unsupported_value`,
 *   `param` naming `max_output_tokens`, `stream`, `service_tier`, ...): our request does not fit
 *   OPENAI_MODEL (or OPENAI_API does not fit OPENAI_BASE_URL).
 */
export type OperatorFault = "api_key" | "region" | "permission" | "model" | "request";

/*
 * Why some 4xx are the operator's fault, not the user's.
 *
 * A user controls one thing in the request: the prompt (`input` / `messages`). What depends on
 * it — a prompt too long for the model (`context_length_exceeded`), a content-policy refusal
 * (`content_policy_violation`, `invalid_prompt`), a 200 that refuses — is theirs: the job fails
 * as `refused` and is counted into the user roll-up, never paged. Everything else in the request
 * is ours: the key (401 AuthenticationError), the project's permissions and the region the
 * function runs in (403 PermissionDeniedError), the model name and the endpoint (404
 * NotFoundError; a 404 also answers a wrong OPENAI_BASE_URL path, or an endpoint that does not
 * speak OPENAI_API), and the parameters we send with it (a 400 naming one of OUR_PARAMS, or the
 * codes `unsupported_parameter` / `unsupported_value` / `unknown_parameter`: a model that takes
 * no streaming, no flex tier, or another bound). No prompt can cause these, and no prompt can
 * fix them: every job fails the same way until someone changes the configuration, so they page
 * at once. A 400 with no code and no param we recognise stays `refused`: paging on a refusal a
 * prompt might cause would let any user page on-call.
 */
export const PROMPT_CODES = new Set([
  "context_length_exceeded",
  "content_policy_violation",
  "content_filter",
  "invalid_prompt",
  "bio_policy",
]);
const REQUEST_CODES = new Set(["unsupported_parameter", "unsupported_value", "unknown_parameter"]);
/** The request parameters the adapters set from configuration (never from the prompt). */
const OUR_PARAMS = new Set([
  "model",
  "max_output_tokens",
  "max_completion_tokens",
  "max_tokens",
  "stream",
  "stream_options",
  "stream_options.include_usage",
  "store",
  "service_tier",
  "safety_identifier",
  "instructions",
  "text.format.name",
  "response_format.json_schema.name",
]);

/*
 * The output format is ours, its schema the user's (an extraction's). A 400 naming the format
 * that is not about the schema ("Invalid parameter: 'response_format' of type 'json_schema' is
 * not supported with this model.", param `response_format`) means OPENAI_MODEL takes no
 * Structured Outputs: every extraction would fail the same way, so it pages. One about the
 * schema ("Invalid schema for response_format '<name>': …", param `text.format.schema` with code
 * `invalid_json_schema` on Responses, param `response_format` with no code on Chat Completions)
 * is the user's schema: refused, like a prompt the provider will not take.
 */
const FORMAT_PARAMS = new Set([
  "response_format",
  "response_format.type",
  "response_format.json_schema",
  "text",
  "text.format",
  "text.format.type",
]);
const aboutSchema = (err: APIError, code: string | null) =>
  code === "invalid_json_schema" || /Invalid schema for /.test(err.message);

/** `code` or `param` of the error body (the SDK copies both from `body.error`), if a string. */
export const word = (value: unknown): string | null => (typeof value === "string" ? value : null);

export function operatorFault(err: APIError, status: number): OperatorFault | null {
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
    ((code !== null && REQUEST_CODES.has(code)) ||
      (param !== null && OUR_PARAMS.has(param)) ||
      (param !== null && FORMAT_PARAMS.has(param) && !aboutSchema(err, code)))
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
export function faultMessage(fault: OperatorFault, code: string | null, message: string): string {
  if (fault === "api_key") return `the provider refused the API key${code ? ` (${code})` : ""}`;
  return safeMessage(message);
}

export function safeMessage(message: string): string {
  // Provider messages are short and prompt-free, but never echo anything key-shaped.
  return redactSecrets(message).slice(0, 300);
}
