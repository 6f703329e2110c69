/**
 * Error answers of the fake model, shaped as OpenAI sends them (OpenAI's error-code guide;
 * openai-node's src/core/error.ts maps the status to its class: 401 AuthenticationError, 403
 * PermissionDeniedError, 404 NotFoundError, 429 RateLimitError): status,
 * `{"error":{"message","type","param","code"}}` body, and the headers the SDK reads.
 */

export type FailKind =
  | "insufficient_quota"
  | "rate_limit_exceeded"
  | "server_error"
  | "slow"
  | "bad_request"
  | "invalid_api_key"
  | "unsupported_country_region_territory"
  | "model_not_found";

export const FAIL_KINDS: readonly FailKind[] = [
  "insufficient_quota",
  "rate_limit_exceeded",
  "server_error",
  "slow",
  "bad_request",
  "invalid_api_key",
  "unsupported_country_region_territory",
  "model_not_found",
];

export interface FailOptions {
  /** `retry-after` of a rate_limit_exceeded answer. @default 20 */
  retryAfterSeconds?: number;
  /** How long a "slow" answer takes. @default 10_000 */
  delayMs?: number;
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
  failure: Failure & { kind: Exclude<FailKind, "slow"> },
  model: string,
  apiKey = "",
): ErrorReply {
  switch (failure.kind) {
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
      return openAIError(
        500,
        "The server had an error while processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if the error persists.",
        "server_error",
      );
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
 * A failure the prompt asks for: `[fake:insufficient_quota]`, `[fake:rate_limit_exceeded:30]`
 * (retry-after seconds), `[fake:server_error]`, `[fake:slow:5000]` (delay in ms),
 * `[fake:bad_request]`, `[fake:invalid_api_key]`, `[fake:unsupported_country_region_territory]`,
 * `[fake:model_not_found]`. The first marker wins.
 */
export function markerFailure(text: string): Failure | undefined {
  const match =
    /\[fake:(insufficient_quota|rate_limit_exceeded|server_error|slow|bad_request|invalid_api_key|unsupported_country_region_territory|model_not_found)(?::(\d+))?\]/.exec(
      text,
    );
  if (!match) return undefined;
  const kind = match[1] as FailKind;
  const value = match[2] === undefined ? undefined : Number(match[2]);
  if (kind === "rate_limit_exceeded" && value !== undefined)
    return { kind, retryAfterSeconds: value };
  if (kind === "slow" && value !== undefined) return { kind, delayMs: value };
  return { kind };
}

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
