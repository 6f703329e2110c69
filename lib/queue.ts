/**
 * QStash: publish a job to the worker, verify what QStash delivers, decode its failure callback.
 *
 * Publishing is the one QStash call the enqueue function makes, so it is the REST request the
 * SDK's `publishJSON` sends, written here: `@upstash/qstash` loads 86 files (its own copy of
 * jose among them, for signature verification), which the enqueue function would pay on every
 * cold start for one POST. Verification still uses the SDK's `Receiver`, loaded on the first
 * delivery by the two routes that verify (the worker and the failure callback).
 */
import { z } from "zod";
import { HttpError, UpstreamError } from "./errors.ts";
import { log } from "./log.ts";

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
};

/** What to publish: one job, deduplicated by `dedupId`, delivered no earlier than `notBefore`. */
export type PublishInput = { jobId: string; dedupId: string; notBefore?: Date | undefined };

/**
 * A publisher for worker deliveries: JSON `{"jobId"}` to `${appUrl}/api/worker` with
 * `retries`, failure callback `${appUrl}/api/dlq`, `deduplicationId` and `notBefore`.
 * Any failure (QStash non-2xx, 429, network) throws `UpstreamError("qstash", ...)`.
 *
 * `dedupId` must be stable for one (job, attempt) and contain no ":" or whitespace, e.g.
 * `${jobId}-a${attempts}`; QStash drops a second publish with the same id (within its window)
 * and answers with the first message's id and `deduplicated: true`.
 *
 * @example
 * const queue = createQueue({ token, appUrl, retries: 1 });
 * await queue.publishJob({ jobId, dedupId: `${jobId}-q0` });
 */
export function createQueue(options: QueueOptions): {
  publishJob(input: PublishInput): Promise<{ messageId: string; deduplicated: boolean }>;
} {
  // Given explicitly, so nothing falls back to QSTASH_* / QSTASH_REGION env vars or a dev server.
  const baseUrl = (options.baseUrl ?? DEFAULT_QSTASH_URL).replace(/\/$/, "");
  const workerUrl = `${options.appUrl}/api/worker`;
  const dlqUrl = `${options.appUrl}/api/dlq`;
  const publishUrl = new URL([baseUrl, "v2", "publish", workerUrl].join("/")).toString();

  return {
    async publishJob({ jobId, dedupId, notBefore }) {
      const headers: Record<string, string> = {
        authorization: `Bearer ${options.token}`,
        "content-type": "application/json",
        "upstash-method": "POST",
        "upstash-retries": options.retries.toFixed(0),
        "upstash-failure-callback": dlqUrl,
        "upstash-deduplication-id": dedupId,
        // The DLQ callback is where a delivery failure is refunded; it is idempotent (a
        // guarded transition), so let it ride out a short database outage.
        "upstash-failure-callback-retries": String(options.failureCallbackRetries ?? 3),
      };
      if (notBefore)
        headers["upstash-not-before"] = Math.ceil(notBefore.getTime() / 1000).toFixed(0);
      const res = await send(publishUrl, headers, JSON.stringify({ jobId }));
      if (!res.ok) {
        const message = await refusal(res);
        throw new UpstreamError("qstash", `publish refused: ${message.slice(0, 200)}`, res.status);
      }
      try {
        const body = (await res.json()) as { messageId: string; deduplicated?: boolean };
        return { messageId: body.messageId, deduplicated: body.deduplicated === true };
      } catch (err) {
        throw new UpstreamError("qstash", `publish failed: ${errorText(err)}`);
      }
    },
  };
}

const errorText = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * Retries only when fetch throws (no HTTP response). A publish whose response was lost may
 * already be queued; retrying it is safe because the deduplication id makes QStash drop the
 * copy. Two quick retries (~100 + 200 ms) ride out a connection reset without holding the
 * user's enqueue request for seconds (what the SDK was configured to do).
 */
async function send(url: string, headers: Record<string, string>, body: string): Promise<Response> {
  const retries = 2;
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(url, { method: "POST", headers, body });
    } catch (err) {
      if (attempt >= retries)
        throw new UpstreamError("qstash", `publish failed: ${errorText(err)}`);
      log.warn("qstash_publish_retry", { attempt: attempt + 1, error: errorText(err) });
      await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** attempt));
    }
  }
}

/** The message the SDK's errors carried for a non-2xx answer (429s name their limits). */
async function refusal(res: Response): Promise<string> {
  const h = (name: string) => res.headers.get(name);
  if (res.status === 429) {
    if (h("x-ratelimit-limit-requests")) {
      return `Exceeded chat rate limit. ${JSON.stringify({
        "limit-requests": h("x-ratelimit-limit-requests"),
        "limit-tokens": h("x-ratelimit-limit-tokens"),
        "remaining-requests": h("x-ratelimit-remaining-requests"),
        "remaining-tokens": h("x-ratelimit-remaining-tokens"),
        "reset-requests": h("x-ratelimit-reset-requests"),
        "reset-tokens": h("x-ratelimit-reset-tokens"),
      })}`;
    }
    if (h("RateLimit-Limit")) {
      return `Exceeded daily rate limit. ${JSON.stringify({
        limit: h("RateLimit-Limit"),
        remaining: h("RateLimit-Remaining"),
        reset: h("RateLimit-Reset"),
      })}`;
    }
    return `Exceeded burst rate limit. ${JSON.stringify({
      limit: h("Burst-RateLimit-Limit"),
      remaining: h("Burst-RateLimit-Remaining"),
      reset: h("Burst-RateLimit-Reset"),
    })}`;
  }
  const body = await res.text();
  return body.length > 0 ? body : `Error: status=${res.status}`;
}

/** Signing keys and the exact public URL of the route being verified. */
export type VerifyOptions = { currentSigningKey: string; nextSigningKey: string; url: string };

/**
 * Verify a QStash delivery and return its raw body. The body is read as text exactly once,
 * before anything parses it (a re-serialized body no longer matches the signed hash), and the
 * signature's `sub` must equal `url` exactly. Missing or invalid → `HttpError` 401
 * `invalid_signature`.
 *
 * @example const raw = await verifyQStashRequest(req, { ...keys, url: `${appUrl}/api/worker` });
 */
export async function verifyQStashRequest(req: Request, options: VerifyOptions): Promise<string> {
  const signature = req.headers.get("upstash-signature");
  if (!signature) throw invalidSignature();
  const body = await req.text();
  const { Receiver, SignatureError } = await import("@upstash/qstash");
  const receiver = new Receiver({
    currentSigningKey: options.currentSigningKey,
    nextSigningKey: options.nextSigningKey,
    devMode: false,
  });
  try {
    // A few seconds of tolerance: QStash sets nbf = iat = now, and two clocks are never equal.
    await receiver.verify({ signature, body, url: options.url, clockTolerance: 5 });
  } catch (err) {
    if (!(err instanceof SignatureError)) throw err;
    log.warn("qstash_signature_rejected", { url: options.url, reason: err.message.slice(0, 200) });
    throw invalidSignature();
  }
  return body;
}

/**
 * Verifies a QStash delivery to one of our routes: the subject QStash signed is the exact URL we
 * published to, `${appUrl}${route}`, so both routes build it here, in one place.
 *
 * @example const raw = await verifyDelivery(req, config, "/api/worker");
 */
export function verifyDelivery(
  req: Request,
  config: { appUrl: string; qstashCurrentSigningKey: string; qstashNextSigningKey: string },
  route: "/api/worker" | "/api/dlq",
): Promise<string> {
  return verifyQStashRequest(req, {
    currentSigningKey: config.qstashCurrentSigningKey,
    nextSigningKey: config.qstashNextSigningKey,
    url: `${config.appUrl}${route}`,
  });
}

function invalidSignature(): HttpError {
  return new HttpError(401, "invalid_signature", "Missing or invalid Upstash-Signature.");
}

/** What the DLQ route needs from a QStash failure callback. */
export type FailureCallback = {
  jobId: string;
  /** The destination's last HTTP status (null if it never answered). */
  status: number | null;
  retried: number | null;
  maxRetries: number | null;
  dlqId: string | null;
  sourceMessageId: string | null;
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const num = z.union([z.number(), z.string().regex(/^\d+$/).transform(Number)]).nullish();
const callbackSchema = z.object({
  sourceBody: z.string().min(1),
  status: num,
  retried: num,
  maxRetries: num,
  dlqId: z.string().nullish(),
  sourceMessageId: z.string().nullish(),
});
const sourceSchema = z.object({ jobId: z.string().regex(UUID) });

/**
 * Decode a failure-callback body: `sourceBody` is base64 of the published `{"jobId":...}`.
 * Only the job id is required; malformed → `HttpError` 400 `invalid_callback`.
 */
export function decodeFailureCallback(rawBody: string): FailureCallback {
  const invalid = () =>
    new HttpError(400, "invalid_callback", "Not a QStash failure callback for a job.");
  let outer: z.infer<typeof callbackSchema>;
  let source: z.infer<typeof sourceSchema>;
  try {
    outer = callbackSchema.parse(JSON.parse(rawBody));
    source = sourceSchema.parse(
      JSON.parse(Buffer.from(outer.sourceBody, "base64").toString("utf8")),
    );
  } catch {
    throw invalid();
  }
  return {
    jobId: source.jobId.toLowerCase(),
    status: outer.status ?? null,
    retried: outer.retried ?? null,
    maxRetries: outer.maxRetries ?? null,
    dlqId: outer.dlqId ?? null,
    sourceMessageId: outer.sourceMessageId ?? null,
  };
}
