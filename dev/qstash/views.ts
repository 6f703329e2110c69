import type { Attempt } from "./delivery.ts";
import { toHeaderMap } from "./headers.ts";
import { bodyFields, type Message } from "./message.ts";

/** A message as QStash's DLQ shows it. */
export function messageView(message: Message): Record<string, unknown> {
  return {
    messageId: message.id,
    url: message.url,
    method: "POST",
    header: toHeaderMap(message.headers),
    ...bodyFields(message.body, "body", "bodyBase64"),
    maxRetries: message.maxRetries,
    notBefore: message.notBefore,
    createdAt: message.createdAt,
    ...(message.failureCallback ? { failureCallback: message.failureCallback.url } : {}),
    callerIP: message.callerIp,
    ...(message.flow ? { flowControlKey: message.flow.key } : {}),
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
