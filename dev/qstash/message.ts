import { randomBytes } from "node:crypto";
import type { FlowRef } from "./flow.ts";
import type { HeaderList } from "./headers.ts";

/** Where the failure callback goes; without `retries` it retries like its source. */
export interface FailureCallback {
  url: string;
  retries?: number;
  /** Upstash-Failure-Callback-Forward-* headers, prefix stripped: delivered with the callback. */
  headers?: HeaderList;
}

/** Everything a publish asks for, after the headers are parsed and validated. */
export interface MessageSpec {
  url: string;
  /** Sent to the destination as-is: the Content-Type and the Upstash-Forward-* headers. */
  headers: HeaderList;
  body: Uint8Array;
  maxRetries: number;
  timeoutMs: number;
  /** Unix ms; the delivery is due then (before timeScale). */
  notBefore: number;
  failureCallback?: FailureCallback;
  callerIp: string;
  /** Flow Control: the key every attempt passes and the limits this publish asked for. */
  flow?: FlowRef;
}

export type MessageState = "pending" | "in-flight" | "done";

export interface Message extends MessageSpec {
  id: string;
  createdAt: number;
  /** Failed attempts so far; sent as Upstash-Retried on the next attempt. */
  retried: number;
  state: MessageState;
}

const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

export function newMessageId(): string {
  return `msg_${[...randomBytes(28)].map((b) => alphabet[b % alphabet.length]).join("")}`;
}

export function createMessage(spec: MessageSpec, now: number): Message {
  return {
    ...spec,
    id: newMessageId(),
    createdAt: now,
    retried: 0,
    state: "pending",
  };
}

/** QStash shows a body as text when it is valid UTF-8, otherwise as base64 under another key. */
export function bodyFields(
  bytes: Uint8Array,
  textKey: string,
  base64Key: string,
): Record<string, string> {
  try {
    return { [textKey]: new TextDecoder("utf-8", { fatal: true }).decode(bytes) };
  } catch {
    return { [base64Key]: Buffer.from(bytes).toString("base64") };
  }
}
