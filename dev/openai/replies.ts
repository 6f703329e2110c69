/** The JSON replies every route sends, with OpenAI's headers. */
import { randomBytes } from "node:crypto";
import type { ErrorReply } from "./errors.ts";

export const RATE_HEADERS = {
  "openai-processing-ms": "12",
  "x-ratelimit-limit-requests": "500",
  "x-ratelimit-remaining-requests": "499",
  "x-ratelimit-reset-requests": "120ms",
  "x-ratelimit-limit-tokens": "200000",
  "x-ratelimit-remaining-tokens": "199000",
  "x-ratelimit-reset-tokens": "6ms",
};

export function reply(error: ErrorReply): Response {
  return send(error.status, error.body, error.headers);
}

export function send(
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      "content-type": "application/json",
      "x-request-id": `req_${randomBytes(16).toString("hex")}`,
      "openai-version": "2020-10-01",
      ...headers,
    },
  });
}
