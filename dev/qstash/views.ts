import type { Attempt } from "./delivery.ts";
import { toHeaderMap } from "./headers.ts";
import { bodyFields, type Message } from "./message.ts";

/** A message as GET /v2/messages/{id} and the DLQ show it. */
export function messageView(message: Message): Record<string, unknown> {
  return {
    messageId: message.id,
    url: message.url,
    method: message.method,
    header: toHeaderMap(message.headers),
    ...bodyFields(message.body, "body", "bodyBase64"),
    maxRetries: message.maxRetries,
    ...(message.retryDelay === undefined ? {} : { retryDelayExpression: message.retryDelay }),
    notBefore: message.notBefore,
    createdAt: message.createdAt,
    ...(message.callback ? { callback: message.callback.url } : {}),
    ...(message.failureCallback ? { failureCallback: message.failureCallback.url } : {}),
    callerIP: message.callerIp,
    ...(message.labels.length > 0 ? { label: message.labels[0], labels: message.labels } : {}),
  };
}

export interface DlqEntry {
  dlqId: string;
  message: Message;
  attempt: Attempt;
}

export function dlqView(entry: DlqEntry): Record<string, unknown> {
  return {
    ...messageView(entry.message),
    dlqId: entry.dlqId,
    responseStatus: entry.attempt.status,
    responseHeader: toHeaderMap(entry.attempt.headers),
    ...bodyFields(entry.attempt.body, "responseBody", "responseBodyBase64"),
  };
}
