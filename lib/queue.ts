/**
 * QStash: publish a job to the worker, verify what QStash delivers, decode its failure callback.
 */
import { createHash } from "node:crypto";
import { Client, QstashError, Receiver, SignatureError } from "@upstash/qstash";
import * as z from "zod";
import type { FlowControlLimits } from "./config.ts";
import { HttpError, UpstreamError } from "./errors.ts";
import { readBody } from "./http.ts";
import { log } from "./log.ts";
import { decodeSourceBody, encodeMessage, type JobMessage } from "./message.ts";
import { traceHeaders } from "./trace.ts";

const DEFAULT_QSTASH_URL = "https://qstash.upstash.io";

/** Options of {@link createQueue}. */
export type QueueOptions = {
  /** `QSTASH_URL`. @default "https://qstash.upstash.io" */
  baseUrl?: string | undefined;
  token: string;
  /** `APP_URL`, the exact public base URL QStash calls (no trailing slash). */
  appUrl: string;
  /** QStash redeliveries after the first attempt (`Upstash-Retries`). */
  retries: number;
  /** Redeliveries of the failure callback itself (`Upstash-Failure-Callback-Retries`). @default 3 */
  failureCallbackRetries?: number;
  /**
   * QStash Flow Control on every worker delivery (`flowControlOf` in lib/config.ts): over its limits a
   * message waits in QStash's waitlist, in order, instead of reaching the provider.
   * @default none
   */
  flowControl?: FlowControlLimits | undefined;
};

/** What QStash says about the key now (`GET /v2/flowControl/{key}`), for the sweeper. */
export type FlowBacklog = {
  limits: FlowControlLimits;
  /** Messages due but held back by the key's limits or a pause. */
  waitListSize: number;
  isPaused: boolean;
  /** The limits QStash applies now (a pin on the console wins over ours); 0: none. */
  parallelismMax: number;
  rateMax: number;
  ratePeriod: number;
};

/**
 * What to publish: one job, deduplicated by `dedupId`, delivered no earlier than `notBefore`.
 * `seq` is the job's `publish_seq` as the caller read it (the message that stands for the job
 * now): it travels in the body, so the failure callback can tell a superseded message's failure
 * from the current one's (`fail_job`'s `p_seq`).
 */
export type PublishInput = JobMessage & {
  dedupId: string;
  notBefore?: Date | undefined;
};

/**
 * A publisher for worker deliveries: JSON `{"jobId", "seq"}` to `${appUrl}/api/worker` with
 * `retries`, failure callback `${appUrl}/api/dlq`, `deduplicationId` and `notBefore`.
 * Any failure (QStash non-2xx, 429, network) throws `UpstreamError("qstash", ...)`.
 *
 * `dedupId` names the message that stands for the job now (`dedupId(job)` in lib/message.ts:
 * `job-<id>-<publish_seq>`) and contains no ":" or whitespace; QStash drops a second publish
 * with the same id (within its window) and answers with the first message's id and
 * `deduplicated: true`.
 *
 * @example
 * const queue = createQueue({ token, appUrl, retries: 1 });
 * await queue.publishJob({ jobId: job.id, seq: job.publish_seq, dedupId: dedupId(job) });
 */
export function createQueue(options: QueueOptions): {
  publishJob(input: PublishInput): Promise<{ messageId: string; deduplicated: boolean }>;
  flowBacklog(): Promise<FlowBacklog | null>;
} {
  const client = new Client({
    // Both given explicitly, so the SDK never falls back to QSTASH_* / QSTASH_REGION env vars,
    // and devMode false so QSTASH_DEV can never swap in the dev server's credentials.
    baseUrl: options.baseUrl ?? DEFAULT_QSTASH_URL,
    token: options.token,
    devMode: false,
    enableTelemetry: false,
    // The SDK retries only when fetch throws (no HTTP response). A publish whose response was
    // lost may already be queued; retrying it is safe because the deduplicationId makes QStash
    // drop the copy. Two quick retries (~100 + 200 ms) ride out a connection reset without
    // holding the user's enqueue request for seconds (the SDK default is 5 with exp backoff).
    retry: { retries: 2, backoff: (n) => 100 * 2 ** n },
  });
  const workerUrl = `${options.appUrl}/api/worker`;
  const dlqUrl = `${options.appUrl}/api/dlq`;
  const flowControl = options.flowControl;

  return {
    async publishJob({ jobId, seq, dedupId, notBefore }) {
      try {
        const res = await client.publishJSON({
          url: workerUrl,
          body: encodeMessage({ jobId, seq }),
          retries: options.retries,
          failureCallback: dlqUrl,
          deduplicationId: dedupId,
          ...(notBefore ? { notBefore: Math.ceil(notBefore.getTime() / 1000) } : {}),
          ...(flowControl ? { flowControl } : {}),
          // The DLQ callback is where a delivery failure is refunded; it is idempotent (a
          // guarded transition), so let it ride out a short database outage.
          headers: {
            "Upstash-Failure-Callback-Retries": String(options.failureCallbackRetries ?? 3),
            // The trace this publish is part of, for the delivery and the failure callback
            // (lib/trace.ts): nothing when tracing is off.
            ...traceHeaders(),
          },
        });
        return { messageId: res.messageId, deduplicated: res.deduplicated === true };
      } catch (err) {
        if (err instanceof QstashError) {
          throw new UpstreamError(
            "qstash",
            `publish refused: ${err.message.slice(0, 200)}`,
            err.status,
          );
        }
        throw new UpstreamError(
          "qstash",
          `publish failed: ${err instanceof Error ? err.message : String(err)}`,
        );
      }
    },
    // null: flow control is off, or no message named the key yet (QStash answers 404).
    async flowBacklog() {
      if (!flowControl) return null;
      try {
        const info = await client.flowControl.get(flowControl.key);
        return {
          limits: flowControl,
          waitListSize: Number(info.waitListSize) || 0,
          isPaused: info.isPaused === true,
          parallelismMax: Number(info.parallelismMax) || 0,
          rateMax: Number(info.rateMax) || 0,
          ratePeriod: Number(info.ratePeriod) || 0,
        };
      } catch (err) {
        if (err instanceof QstashError && err.status === 404) return null;
        throw new UpstreamError(
          "qstash",
          `flow control read failed: ${err instanceof Error ? err.message.slice(0, 200) : String(err)}`,
          err instanceof QstashError ? err.status : undefined,
        );
      }
    },
  };
}

/**
 * The largest body QStash sends us. A delivery is `{"jobId":"<uuid>","seq":n}` (~60 bytes); a failure
 * callback carries that base64-encoded plus our short error answer and a few headers (~1-2 KB).
 * Anything bigger is not QStash talking to us, and is refused after reading this much.
 */
export const QSTASH_MAX_BODY_BYTES = 64 * 1024;

/** Signing keys and the exact public URL of the route being verified. */
export type VerifyOptions = {
  currentSigningKey: string;
  nextSigningKey: string;
  url: string;
  /** @default QSTASH_MAX_BODY_BYTES */
  maxBodyBytes?: number;
};

/**
 * Verify a QStash delivery and return its raw body. The signature header must be there before
 * a byte of the body is read; the body is then read once, up to `maxBodyBytes` (over it:
 * `HttpError` 413 `payload_too_large`, reading stops at the limit), before anything parses it
 * (a re-serialized body no longer matches the signed hash), and the signature's `sub` must
 * equal `url` exactly. Missing or invalid, including a signature whose claims are missing or
 * of the wrong type → `HttpError` 401 `invalid_signature`.
 *
 * @example const raw = await verifyQStashRequest(req, { ...keys, url: `${appUrl}/api/worker` });
 */
export async function verifyQStashRequest(req: Request, options: VerifyOptions): Promise<string> {
  const signature = req.headers.get("upstash-signature");
  if (!signature) {
    await req.body?.cancel().catch(() => undefined);
    throw invalidSignature();
  }
  const body = (
    await readBody(req, { maxBytes: options.maxBodyBytes ?? QSTASH_MAX_BODY_BYTES })
  ).toString("utf8");
  const receiver = new Receiver({
    currentSigningKey: options.currentSigningKey,
    nextSigningKey: options.nextSigningKey,
    devMode: false,
  });
  try {
    // A few seconds of tolerance: QStash sets nbf = iat = now, and two clocks are never equal.
    await receiver.verify({ signature, body, url: options.url, clockTolerance: 5 });
  } catch (err) {
    // The SDK throws SignatureError for a bad token, but a TypeError when a correctly signed
    // token lacks the `body` claim (or carries a non-string one): a request we cannot
    // authenticate either way, so a 401, never a 500. Both keys are always given (config), so
    // the SDK's "no signing keys" error cannot happen here.
    const reason = err instanceof SignatureError ? err.message : "malformed claims";
    log.warn("qstash_signature_rejected", { url: options.url, reason: reason.slice(0, 200) });
    throw invalidSignature();
  }
  return body;
}

/** A verified delivery: its raw body and an id for this delivery attempt. */
export type VerifiedDelivery = {
  body: string;
  /**
   * Derived from the verified signature alone (a hash of it): QStash signs every delivery
   * attempt afresh, and a replay of a captured request carries the same signature. Unlike
   * `Upstash-Message-Id`, which the signature does not cover, a sender cannot choose it.
   */
  deliveryId: string;
};

/**
 * Verifies a QStash delivery to one of our routes: the subject QStash signed is the exact URL we
 * published to, `${appUrl}${route}`, so both routes build it here, in one place.
 *
 * @example const { body, deliveryId } = await verifyDelivery(req, config, "/api/worker");
 */
export async function verifyDelivery(
  req: Request,
  config: { appUrl: string; qstashCurrentSigningKey: string; qstashNextSigningKey: string },
  route: "/api/worker" | "/api/dlq",
): Promise<VerifiedDelivery> {
  const body = await verifyQStashRequest(req, {
    currentSigningKey: config.qstashCurrentSigningKey,
    nextSigningKey: config.qstashNextSigningKey,
    url: `${config.appUrl}${route}`,
  });
  const signature = req.headers.get("upstash-signature") ?? "";
  const deliveryId = createHash("sha256").update(signature).digest("base64url").slice(0, 22);
  return { body, deliveryId };
}

function invalidSignature(): HttpError {
  return new HttpError(401, "invalid_signature", "Missing or invalid Upstash-Signature.");
}

/** What the DLQ route needs from a QStash failure callback. */
export type FailureCallback = {
  jobId: string;
  /**
   * The job's `publish_seq` when the failed message was published; null for a message published
   * before messages carried it (treated as the job's current message, as before).
   */
  seq: number | null;
  /** The destination's last HTTP status (null if it never answered). */
  status: number | null;
  retried: number | null;
  maxRetries: number | null;
  dlqId: string | null;
  sourceMessageId: string | null;
};

const num = z.union([z.number(), z.string().regex(/^\d+$/).transform(Number)]).nullish();
const callbackSchema = z.object({
  sourceBody: z.string().min(1),
  status: num,
  retried: num,
  maxRetries: num,
  dlqId: z.string().nullish(),
  sourceMessageId: z.string().nullish(),
});

/**
 * Decode a failure-callback body: `sourceBody` is base64 of the published `{"jobId", "seq"}`.
 * Only the job id is required: a message without `seq` (published before it existed) decodes
 * with `seq: null`. Malformed → `HttpError` 400 `invalid_callback`, and that includes a `seq`
 * that is present but not an integer in 1..2^31-1: the callback is signed by QStash, so its
 * source body is a message we published; a seq we cannot read is a bug of ours, and neither
 * guess is safe (as current it may fail a job a newer message runs, as older it would skip a
 * refund the job needs), so it is refused loudly and the job is left to the sweeper, which ends
 * (and refunds) every job no message serves.
 */
export function decodeFailureCallback(rawBody: string): FailureCallback {
  const invalid = () =>
    new HttpError(400, "invalid_callback", "Not a QStash failure callback for a job.");
  let outer: z.infer<typeof callbackSchema>;
  try {
    outer = callbackSchema.parse(JSON.parse(rawBody));
  } catch {
    throw invalid();
  }
  // The message inside is ours: lib/message.ts reads it, as it wrote it.
  const source = decodeSourceBody(outer.sourceBody);
  if (!source) throw invalid();
  return {
    jobId: source.jobId,
    seq: source.seq,
    status: outer.status ?? null,
    retried: outer.retried ?? null,
    maxRetries: outer.maxRetries ?? null,
    dlqId: outer.dlqId ?? null,
    sourceMessageId: outer.sourceMessageId ?? null,
  };
}
