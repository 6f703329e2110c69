/**
 * The per-user enqueue rate limit, in Upstash Redis through `@upstash/ratelimit`. It fails
 * open: the guarantees users pay for live in Postgres.
 *
 * Its keys never hold a user id: the library's identifier is an HMAC of the id under a server
 * key (`rateLimitIdentifier`), so a key names no one to whoever reads Redis, and a token that
 * outlives its erased user writes no key with their id. The erasure deletes the user's keys
 * (`forget`).
 */
import { createHmac } from "node:crypto";
import { Ratelimit } from "@upstash/ratelimit";
import type { Redis } from "@upstash/redis";
import { log } from "./log.ts";

/** The Redis commands `@upstash/ratelimit` needs, and DEL for the erasure. */
export type RatelimitRedis = ConstructorParameters<typeof Ratelimit>[0]["redis"] &
  Pick<Redis, "del">;

/** What the limiter counts a user under: HMAC-SHA256 of their id under `key`, base64url. */
export function rateLimitIdentifier(userId: string, key: string): string {
  return createHmac("sha256", key).update(`quota-jobs rate limit:${userId}`).digest("base64url");
}

/** Outcome of a rate-limit check; `retryAfterSeconds` is at least 1. */
export type RateLimitResult = { ok: true } | { ok: false; retryAfterSeconds: number };

/**
 * A per-user sliding-window limit on enqueue requests.
 *
 * Fail OPEN: when Redis errors or is slower than `timeoutMs`, the request is allowed and a
 * warning is logged. The limiter only smooths bursts (it spares Postgres and the provider a
 * flood of requests); the guarantees users pay for (quota units, max active jobs) are
 * enforced inside Postgres in the same transaction as the insert, and they still hold with
 * Redis gone. Failing closed would turn a Redis blip into a full outage of job creation.
 *
 * @example
 * const limiter = createRateLimiter(redis, { requests: 10, windowSeconds: 60, idKey });
 * const r = await limiter.check(userId); // { ok: false, retryAfterSeconds: 12 }
 * await limiter.forget(userId); // the erasure: the user's keys are gone
 */
export function createRateLimiter(
  redis: RatelimitRedis,
  options: {
    requests: number;
    windowSeconds: number;
    /** The server key the identifier's HMAC is taken under (`rateLimitIdentifier`). */
    idKey: string;
    timeoutMs?: number;
    prefix?: string;
  },
): { check(userId: string): Promise<RateLimitResult>; forget(userId: string): Promise<void> } {
  const prefix = options.prefix ?? "quota-jobs:ratelimit";
  const windowMs = options.windowSeconds * 1000;
  const ratelimit = new Ratelimit({
    redis,
    limiter: Ratelimit.slidingWindow(options.requests, `${options.windowSeconds} s`),
    prefix,
    // On timeout the library itself resolves success (reason "timeout"): fail open, bounded.
    timeout: options.timeoutMs ?? 1000,
    analytics: false,
  });
  return {
    async check(userId) {
      try {
        const res = await ratelimit.limit(rateLimitIdentifier(userId, options.idKey));
        if (res.reason === "timeout") log.warn("rate_limit_open", { reason: "timeout" });
        if (res.success) return { ok: true };
        return {
          ok: false,
          retryAfterSeconds: Math.max(1, Math.ceil((res.reset - Date.now()) / 1000)),
        };
      } catch (err) {
        log.warn("rate_limit_open", {
          reason: "redis_error",
          error: err instanceof Error ? err : String(err),
        });
        return { ok: true };
      }
    },
    /**
     * Deletes the user's keys. The sliding window keeps one counter per window,
     * `<prefix>:<identifier>:<window number>`, that expires two windows and a second after it
     * was written: the current window, the two before it, and the next (another instance's
     * clock a little ahead) cover every key the user can have. Named one by one: the library's
     * `resetUsedTokens` SCANs the whole keyspace inside one script, which blocks Redis for
     * every other caller while it runs. Throws when Redis does (the erasure answers 503).
     */
    async forget(userId) {
      const id = rateLimitIdentifier(userId, options.idKey);
      const current = Math.floor(Date.now() / windowMs);
      await redis.del(...[-2, -1, 0, 1].map((d) => `${prefix}:${id}:${current + d}`));
    },
  };
}
