/**
 * The Upstash Redis client that the rate limiter (lib/rate-limit.ts), the provider gate
 * (lib/provider-gate.ts) and the alert throttle share. Redis is an optimisation here, never a
 * source of truth: quota, limits and job state live in Postgres, so every user of this client
 * keeps working (open) when Redis does not answer.
 */
import { Redis } from "@upstash/redis";

/** Options of {@link createRedis}. */
export type RedisOptions = {
  /** `UPSTASH_REDIS_REST_URL` */
  url: string;
  /** `UPSTASH_REDIS_REST_TOKEN` */
  token: string;
  /** Abort any single Redis request after this long. @default 1500 */
  timeoutMs?: number;
};

/**
 * An Upstash REST client that fails fast: one network retry after 50 ms (the SDK default is
 * five with exponential backoff, ~4 s) and a per-request timeout, because every caller here
 * would rather carry on without Redis than hold a user's request or a worker's lease.
 *
 * @example const redis = createRedis({ url: config.upstashRedisRestUrl, token: config.upstashRedisRestToken });
 */
export function createRedis(options: RedisOptions): Redis {
  const timeoutMs = options.timeoutMs ?? 1500;
  return new Redis({
    url: options.url,
    token: options.token,
    retry: { retries: 1, backoff: () => 50 },
    // A function, so each request gets a fresh deadline and an abort throws (not a fake result).
    signal: () => AbortSignal.timeout(timeoutMs),
    enableTelemetry: false,
  });
}
