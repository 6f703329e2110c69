/**
 * The per-user enqueue rate limit, in Upstash Redis through `@upstash/ratelimit`. It fails
 * open: the guarantees users pay for live in Postgres.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { log } from "./log.ts";

/** The Redis commands `@upstash/ratelimit` needs. */
export type RatelimitRedis = ConstructorParameters<typeof Ratelimit>[0]["redis"];

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
 * const limiter = createRateLimiter(redis, { requests: 10, windowSeconds: 60 });
 * const r = await limiter.check(userId); // { ok: false, retryAfterSeconds: 12 }
 */
export function createRateLimiter(
  redis: RatelimitRedis,
  options: { requests: number; windowSeconds: number; timeoutMs?: number; prefix?: string },
): { check(userId: string): Promise<RateLimitResult> } {
  const ratelimit = new Ratelimit({
    redis,
    limiter: Ratelimit.slidingWindow(options.requests, `${options.windowSeconds} s`),
    prefix: options.prefix ?? "quota-jobs:ratelimit",
    // On timeout the library itself resolves success (reason "timeout"): fail open, bounded.
    timeout: options.timeoutMs ?? 1000,
    analytics: false,
  });
  return {
    async check(userId) {
      try {
        const res = await ratelimit.limit(userId);
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
  };
}
