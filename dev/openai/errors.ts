/**
 * Error answers of the fake model, shaped as OpenAI sends them (OpenAI's error-code guide;
 * openai-node's src/core/error.ts maps the status to its class: 401 AuthenticationError, 403
 * PermissionDeniedError, 404 NotFoundError, 429 RateLimitError): status,
 * `{"error":{"message","type","param","code"}}` body, and the headers the SDK reads.
 */

/** The rate-limit headers OpenAI sends on every answer (the fake's limits are never reached). */
export const RATE_LIMIT_HEADERS = {
  "x-ratelimit-limit-requests": "500",
  "x-ratelimit-remaining-requests": "499",
  "x-ratelimit-reset-requests": "120ms",
  "x-ratelimit-limit-tokens": "200000",
  "x-ratelimit-remaining-tokens": "199000",
  "x-ratelimit-reset-tokens": "6ms",
};

export type FailKind =
  | "insufficient_quota"
  | "rate_limit_exceeded"
  | "server_error"
  | "slow"
  | "bad_request"
  | "invalid_api_key"
  | "unsupported_country_region_territory"
  | "model_not_found"
  | "unsupported_parameter"
  | "stream_failed"
  | "stream_error"
  | "stream_cut";

/** Kinds that fail inside a stream OpenAI has accepted (HTTP 200), after some tokens. */
export const MID_STREAM_KINDS = ["stream_failed", "stream_error", "stream_cut"] as const;
export type MidStreamKind = (typeof MID_STREAM_KINDS)[number];

export const FAIL_KINDS: readonly FailKind[] = [
  "insufficient_quota",
  "rate_limit_exceeded",
  "server_error",
  "slow",
  "bad_request",
  "invalid_api_key",
  "unsupported_country_region_territory",
  "model_not_found",
  "unsupported_parameter",
  ...MID_STREAM_KINDS,
];

export interface FailOptions {
  /** `retry-after` of a rate_limit_exceeded answer. @default 20 */
  retryAfterSeconds?: number;
  /** How long a "slow" answer takes. @default 10_000 */
  delayMs?: number;
  /** A mid-stream kind: visible tokens streamed before it. @default 3 */
  afterTokens?: number;
  /** A mid-stream kind's error code. @default "server_error" (null for `stream_error`) */
  code?: string | null;
}

export interface Failure extends FailOptions {
  kind: FailKind;
}

export interface ErrorReply {
  status: number;
  headers: Record<string, string>;
  body: { error: { message: string; type: string; param: string | null; code: string | null } };
}

export function openAIError(
  status: number,
  message: string,
  type: string,
  param: string | null = null,
  code: string | null = null,
  headers: Record<string, string> = {},
): ErrorReply {
  return { status, headers, body: { error: { message, type, param, code } } };
}

/**
 * The answer for a failure kind other than "slow" (which is a delay, not an answer). `apiKey` is
 * the request's key, which OpenAI echoes (masked) in a 401.
 */
export function failureReply(
  failure: Failure & { kind: Exclude<FailKind, "slow" | MidStreamKind> },
  model: string,
  apiKey = "",
  api: "chat" | "responses" = "chat",
): ErrorReply {
  switch (failure.kind) {
    case "unsupported_parameter": {
      // The bound parameter our request sets, refused as a model that takes another one would.
      const param = api === "responses" ? "max_output_tokens" : "max_completion_tokens";
      return openAIError(
        400,
        `Unsupported parameter: '${param}' is not supported with this model.`,
        "invalid_request_error",
        param,
        "unsupported_parameter",
      );
    }
    case "invalid_api_key":
      return incorrectKey(apiKey);
    case "unsupported_country_region_territory":
      // OpenAI's own wording; it answers this to a caller in a country it does not serve.
      return openAIError(
        403,
        "Country, region, or territory not supported",
        "request_forbidden",
        null,
        "unsupported_country_region_territory",
      );
    case "model_not_found":
      return openAIError(
        404,
        `The model \`${model}\` does not exist or you do not have access to it.`,
        "invalid_request_error",
        null,
        "model_not_found",
      );
    case "insufficient_quota":
      return openAIError(
        429,
        "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "insufficient_quota",
        null,
        "insufficient_quota",
      );
    case "rate_limit_exceeded": {
      const seconds = failure.retryAfterSeconds ?? 20;
      return openAIError(
        429,
        `Rate limit reached for ${model} in organization org-fake on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in ${seconds}s. Visit https://platform.openai.com/account/rate-limits to learn more.`,
        "requests",
        null,
        "rate_limit_exceeded",
        {
          "retry-after": String(seconds),
          "x-ratelimit-limit-requests": "500",
          "x-ratelimit-remaining-requests": "0",
          "x-ratelimit-reset-requests": `${seconds}s`,
          "x-ratelimit-limit-tokens": "200000",
          "x-ratelimit-remaining-tokens": "199000",
          "x-ratelimit-reset-tokens": "300ms",
        },
      );
    }
    case "server_error":
      return openAIError(500, SERVER_ERROR, "server_error");
    case "bad_request":
      return openAIError(
        400,
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.",
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
      );
  }
}

/**
 * OpenAI's answer to a flex request when flex capacity is short (its flex processing guide:
 * "429 Resource Unavailable", not charged). The guide documents the status and those words, not
 * the rest of the body, so the fake sends the words as the message with an error type of
 * OpenAI's and no code, and no `retry-after` (none is documented); the rate-limit headers say
 * the project's own limits are far from reached, as they are.
 */
export function flexUnavailable(): ErrorReply {
  return openAIError(
    429,
    "Resource Unavailable: there is not enough flex processing capacity for this request right now. Retry later, or retry with the default service tier.",
    "invalid_request_error",
    null,
    null,
    RATE_LIMIT_HEADERS,
  );
}

/**
 * A failure the prompt asks for: `[fake:insufficient_quota]`, `[fake:rate_limit_exceeded:30]`
 * (retry-after seconds), `[fake:server_error]`, `[fake:slow:5000]` (delay in ms),
 * `[fake:bad_request]`, `[fake:invalid_api_key]`, `[fake:unsupported_country_region_territory]`,
 * `[fake:model_not_found]`, `[fake:unsupported_parameter]`, and inside a stream after N tokens
 * (default 3) `[fake:stream_failed:N]`, `[fake:stream_error:N]`, `[fake:stream_cut:N]`; with a
 * code, `[fake:stream_error:insufficient_quota]` (or `rate_limit_exceeded`,
 * `context_length_exceeded`, any code; `:N` after it for N tokens first, default 0: the event
 * right after the response opens). An in-stream marker with a code wins, else the first marker.
 */
export function markerFailure(text: string): Failure | undefined {
  const inStream = /\[fake:(stream_failed|stream_error):([a-z_]+)(?::(\d+))?\]/.exec(text);
  if (inStream)
    return {
      kind: inStream[1] as MidStreamKind,
      code: inStream[2] as string,
      afterTokens: Number(inStream[3] ?? 0),
    };
  const match =
    /\[fake:(insufficient_quota|rate_limit_exceeded|server_error|slow|bad_request|invalid_api_key|unsupported_country_region_territory|model_not_found|unsupported_parameter|stream_failed|stream_error|stream_cut)(?::(\d+))?\]/.exec(
      text,
    );
  if (!match) return undefined;
  const kind = match[1] as FailKind;
  const value = match[2] === undefined ? undefined : Number(match[2]);
  if (kind === "rate_limit_exceeded" && value !== undefined)
    return { kind, retryAfterSeconds: value };
  if (kind === "slow" && value !== undefined) return { kind, delayMs: value };
  if ((MID_STREAM_KINDS as readonly string[]).includes(kind) && value !== undefined)
    return { kind, afterTokens: value };
  return { kind };
}

/**
 * A model the fake does not serve: OpenAI's 404 for a model that does not exist or that the key
 * may not use; a retired model (past its shutdown date) gets the same status and code in the
 * wording OpenAI answers a deprecated model with.
 */
export function modelNotFound(model: string, retired: boolean): ErrorReply {
  return openAIError(
    404,
    retired
      ? `The model \`${model}\` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations`
      : `The model \`${model}\` does not exist or you do not have access to it.`,
    "invalid_request_error",
    null,
    "model_not_found",
  );
}

/**
 * `service_tier: "flex"` for a model without flex: a 400 on the parameter, no fallback to the
 * standard tier (flex is "limited model availability"; Azure's flex guide documents the 400
 * `invalid_request_error`; the wording is the fake's, in OpenAI's "Invalid value" form).
 */
export function flexNotSupported(model: string): ErrorReply {
  return openAIError(
    400,
    `Invalid value: 'flex'. Flex processing is not available for the model '${model}'.`,
    "invalid_request_error",
    "service_tier",
    "invalid_value",
  );
}

/** An integer parameter below its minimum (`max_output_tokens` >= 16), in OpenAI's words. */
export function belowMinimum(param: string, minimum: number, got: number): ErrorReply {
  return openAIError(
    400,
    `Invalid '${param}': integer below minimum value. Expected a value >= ${minimum}, but got ${got} instead.`,
    "invalid_request_error",
    param,
    "integer_below_min_value",
  );
}

/**
 * The error inside a stream OpenAI had accepted (HTTP 200): the usual error object, nested under
 * `error` in a Responses `error` event (`{"type":"error","error":{…},"sequence_number":n}`) or a
 * Chat Completions `data: {"error":{…}}` chunk, with the `type` the same failure has over HTTP:
 * `insufficient_quota` (code `insufficient_quota`, or `credit_balance_exhausted` as a prepaid
 * account out of credit sees it), `tokens` for a rate limit (`rate_limit_exceeded`),
 * `invalid_request_error` for a prompt too long (`context_length_exceeded`), else `server_error`.
 */
export function streamErrorObject(
  code: string | null,
  model: string,
  api: "chat" | "responses",
): ErrorReply["body"]["error"] {
  switch (code) {
    case "insufficient_quota":
      return { ...failureReply({ kind: "insufficient_quota" }, model).body.error, param: null };
    case "credit_balance_exhausted":
      return {
        message:
          "You have no credits remaining. Add credits to continue using the API. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
        type: "insufficient_quota",
        param: null,
        code,
      };
    case "rate_limit_exceeded":
      return {
        message: `Rate limit reached for ${model} in organization org-fake on tokens per min (TPM): Limit 200000, Used 199600, Requested 900. Please try again in 150ms. Visit https://platform.openai.com/account/rate-limits to learn more.`,
        type: "tokens",
        param: null,
        code,
      };
    case "context_length_exceeded":
      return {
        ...failureReply({ kind: "bad_request" }, model).body.error,
        param: api === "responses" ? "input" : "messages",
      };
    default:
      return { message: SERVER_ERROR, type: "server_error", param: null, code };
  }
}

/** The HTTP failure an in-stream error's code is over HTTP: a quota, a limit, a long prompt. */
export function httpTwin(
  code: string | null | undefined,
): "insufficient_quota" | "rate_limit_exceeded" | "bad_request" | "server_error" {
  if (code === "insufficient_quota" || code === "credit_balance_exhausted")
    return "insufficient_quota";
  if (code === "rate_limit_exceeded") return "rate_limit_exceeded";
  if (code === "context_length_exceeded") return "bad_request";
  return "server_error";
}

const SERVER_ERROR =
  "The server had an error while processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if the error persists.";

export const missingKey = openAIError(
  401,
  "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys.",
  "invalid_request_error",
);

/**
 * OpenAI's 401 for a key it does not know (revoked, deleted, mistyped): the key is echoed with
 * all but its first 8 and last 4 characters starred.
 */
export function incorrectKey(apiKey: string): ErrorReply {
  const shown =
    apiKey.length > 12
      ? `${apiKey.slice(0, 8)}${"*".repeat(apiKey.length - 12)}${apiKey.slice(-4)}`
      : apiKey;
  return openAIError(
    401,
    `Incorrect API key provided: ${shown}. You can find your API key at https://platform.openai.com/account/api-keys.`,
    "invalid_request_error",
    null,
    "invalid_api_key",
  );
}

export const unparsableBody = openAIError(
  400,
  "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. If you have trouble figuring out how to fix this, please contact us through our help center at help.openai.com.)",
  "invalid_request_error",
);

export const invalidUrl = (method: string, path: string) =>
  openAIError(404, `Invalid URL (${method} ${path})`, "invalid_request_error");
