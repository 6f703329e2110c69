/**
 * The well-known credentials of `qstash dev` (user 1). The SDK hard-codes the same values in
 * `DEV_CREDENTIALS` and probes `GET /v2/keys` for exactly these keys before it would download
 * and spawn its own binary, so answering with them makes SDK dev mode work offline.
 */
export const DEV_TOKEN = "eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=";

export const DEV_SIGNING_KEYS: { readonly current: string; readonly next: string } = {
  current: "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r",
  next: "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs",
};

export const DEFAULT_RETRIES = 3;
/** Deduplication ids and content hashes are remembered this long (current docs: 10 minutes). */
export const DEDUP_WINDOW_MS = 10 * 60_000;
/** The free plan's maximum HTTP response duration, the ceiling for `Upstash-Timeout`. */
export const DEFAULT_DELIVERY_TIMEOUT_MS = 15 * 60_000;
/** A destination's Retry-After above this is ignored and the default backoff applies. */
export const MAX_RETRY_AFTER_MS = 86_400_000;
/** Response bodies kept for the DLQ and callbacks (the free plan's message size). */
export const MAX_RESPONSE_BODY_BYTES = 1_000_000;
