import type { Attempt } from "./delivery.ts";
import { toHeaderMap } from "./headers.ts";
import type { CallbackConfig, Message, MessageSpec } from "./message.ts";

/**
 * The JSON body QStash posts to Upstash-Callback (after every attempt) and
 * Upstash-Failure-Callback (once retries are exhausted; then with the dlqId).
 * notBefore/createdAt are unix ms numbers, as the SDK's Message type has them.
 */
export function callbackBody(
  source: Message,
  attempt: Attempt,
  dlqId?: string,
): Record<string, unknown> {
  return {
    status: attempt.status,
    header: toHeaderMap(attempt.headers),
    body: Buffer.from(attempt.body).toString("base64"),
    retried: source.retried,
    maxRetries: source.maxRetries,
    ...(dlqId === undefined ? {} : { dlqId }),
    sourceMessageId: source.id,
    url: source.url,
    method: source.method,
    sourceHeader: toHeaderMap(source.headers),
    sourceBody: Buffer.from(source.body).toString("base64"),
    notBefore: source.notBefore,
    createdAt: source.createdAt,
    callerIP: source.callerIp,
  };
}

/**
 * A callback is a new QStash message of its own: signed for the callback URL, with the
 * source's retry settings unless the Upstash-(Failure-)Callback-* headers said otherwise.
 */
export function callbackSpec(
  config: CallbackConfig,
  source: Message,
  payload: Record<string, unknown>,
  now: number,
): MessageSpec {
  const spec: MessageSpec = {
    url: config.url,
    method: config.method,
    headers: [["content-type", "application/json"], ...config.headers],
    body: new TextEncoder().encode(JSON.stringify(payload)),
    maxRetries: config.retries ?? source.maxRetries,
    notBefore: now + (config.delayMs ?? 0),
    labels: [],
    callerIp: source.callerIp,
  };
  const retryDelay = config.retryDelay ?? source.retryDelay;
  if (retryDelay !== undefined) spec.retryDelay = retryDelay;
  const timeoutMs = config.timeoutMs ?? source.timeoutMs;
  if (timeoutMs !== undefined) spec.timeoutMs = timeoutMs;
  return spec;
}
