/** The JSON replies every route sends, with OpenAI's headers. */
import { randomBytes } from "node:crypto";
import { type ErrorReply, RATE_LIMIT_HEADERS } from "./errors.ts";

export const RATE_HEADERS = { "openai-processing-ms": "12", ...RATE_LIMIT_HEADERS };

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
