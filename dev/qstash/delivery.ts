import { MAX_RESPONSE_BODY_BYTES } from "./constants.ts";
import type { Message } from "./message.ts";
import { signDelivery } from "./signing.ts";

/** What one delivery attempt came back with. Connection errors and timeouts have status 0. */
export interface Attempt {
  ok: boolean;
  status: number;
  headers: Headers;
  body: Uint8Array;
  /** 489 with `Upstash-NonRetryable-Error: true`: no further retries. */
  nonRetryable: boolean;
  error?: string;
}

export interface DeliverOptions {
  signingKey: string;
  timeoutMs: number;
  /** Aborted when the stand-in closes. */
  signal: AbortSignal;
}

async function readCapped(response: Response): Promise<Uint8Array> {
  const bytes = new Uint8Array(await response.arrayBuffer());
  return bytes.length > MAX_RESPONSE_BODY_BYTES ? bytes.slice(0, MAX_RESPONSE_BODY_BYTES) : bytes;
}

/** One signed HTTP call to the message's destination. Never throws for transport failures. */
export async function deliver(message: Message, options: DeliverOptions): Promise<Attempt> {
  const headers = new Headers(message.headers);
  headers.set("User-Agent", "Upstash-QStash");
  headers.set("Upstash-Message-Id", message.id);
  headers.set("Upstash-Retried", String(message.retried));
  headers.set("Upstash-Caller-Ip", message.callerIp);
  headers.set(
    "Upstash-Signature",
    await signDelivery(options.signingKey, message.url, message.body),
  );
  const signal = AbortSignal.any([options.signal, AbortSignal.timeout(options.timeoutMs)]);
  try {
    const response = await fetch(message.url, {
      method: "POST",
      headers,
      body: new Uint8Array(message.body),
      signal,
    });
    const body = await readCapped(response);
    const nonRetryable =
      response.status === 489 &&
      response.headers.get("Upstash-NonRetryable-Error")?.toLowerCase() === "true";
    return {
      ok: response.ok,
      status: response.status,
      headers: response.headers,
      body,
      nonRetryable,
    };
  } catch (error) {
    const reason = options.signal.aborted
      ? "stand-in closed"
      : signal.aborted
        ? `no response within ${options.timeoutMs}ms`
        : error instanceof Error
          ? `${error.message}${error.cause instanceof Error ? `: ${error.cause.message}` : ""}`
          : String(error);
    return {
      ok: false,
      status: 0,
      headers: new Headers(),
      body: new TextEncoder().encode(reason),
      nonRetryable: false,
      error: reason,
    };
  }
}
