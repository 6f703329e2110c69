/**
 * Shared fast state in Upstash Redis: the per-user enqueue rate limit and the provider gate.
 * Redis is an optimisation here, never a source of truth: quota, limits and job state live in
 * Postgres, so every function in this file keeps working (open) when Redis does not answer.
 */
import { Ratelimit } from "@upstash/ratelimit";
import { Redis } from "@upstash/redis";
import { log } from "./log.ts";

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

const GATE_KEY = "quota-jobs:provider:resume-at";

/**
 * The shared "the provider said wait until T" time. `holdUntil` only ever moves it later and
 * the key expires at T by itself. When Redis is down the gate reads as open (logged): each job
 * carries its own `resume_at` in Postgres, so the provider is still protected job by job.
 *
 * The read-then-write in `holdUntil` can race: two workers may both read "no later time" and
 * the earlier of their two times may win. The cost is one early retry that meets another 429
 * and moves the gate again; not worth a Lua script.
 *
 * @example
 * const gate = createProviderGate(redis);
 * const at = await gate.resumeAt(); // Date | null
 * await gate.holdUntil(new Date(Date.now() + 60_000));
 */
export function createProviderGate(
  redis: Pick<Redis, "get" | "set">,
  key: string = GATE_KEY,
): {
  resumeAt(now?: Date): Promise<Date | null>;
  holdUntil(at: Date): Promise<void>;
} {
  async function read(): Promise<number | null> {
    const value = await redis.get<number | string>(key);
    const ms = Number(value);
    return value === null || !Number.isFinite(ms) ? null : ms;
  }
  return {
    async resumeAt(now = new Date()) {
      try {
        const ms = await read();
        return ms !== null && ms > now.getTime() ? new Date(ms) : null;
      } catch (err) {
        log.warn("provider_gate_open", {
          reason: "redis_error",
          error: err instanceof Error ? err : String(err),
        });
        return null;
      }
    },
    async holdUntil(at) {
      const ms = at.getTime();
      if (!Number.isFinite(ms) || ms <= Date.now()) return;
      try {
        const current = await read();
        if (current !== null && current >= ms) return;
        await redis.set(key, ms, { pxat: ms });
      } catch (err) {
        log.warn("provider_gate_not_held", { error: err instanceof Error ? err : String(err) });
      }
    },
  };
}
