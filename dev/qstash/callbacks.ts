import type { Attempt } from "./delivery.ts";
import { toHeaderMap } from "./headers.ts";
import type { FailureCallback, Message, MessageSpec } from "./message.ts";

/**
 * The JSON body QStash posts to Upstash-Failure-Callback once retries are exhausted (with the
 * dlqId). notBefore/createdAt are unix ms numbers, as the SDK's Message type has them.
 */
export function callbackBody(source: Message, attempt: Attempt, dlqId: string) {
  return {
    status: attempt.status,
    header: toHeaderMap(attempt.headers),
    body: Buffer.from(attempt.body).toString("base64"),
    retried: source.retried,
    maxRetries: source.maxRetries,
    dlqId,
    sourceMessageId: source.id,
    url: source.url,
    method: "POST",
    sourceHeader: toHeaderMap(source.headers),
    sourceBody: Buffer.from(source.body).toString("base64"),
    notBefore: source.notBefore,
    createdAt: source.createdAt,
    callerIP: source.callerIp,
  };
}

/**
 * A failure callback is a new QStash message of its own: signed for the callback URL, with the
 * source's retries and timeout unless Upstash-Failure-Callback-Retries said otherwise.
 */
export function callbackSpec(
  config: FailureCallback,
  source: Message,
  payload: Record<string, unknown>,
  now: number,
): MessageSpec {
  return {
    url: config.url,
    headers: [["content-type", "application/json"], ...(config.headers ?? [])],
    body: new TextEncoder().encode(JSON.stringify(payload)),
    maxRetries: config.retries ?? source.maxRetries,
    notBefore: now,
    timeoutMs: source.timeoutMs,
    callerIp: source.callerIp,
  };
}
