/**
 * What the edge functions need, built once per instance from the validated config. Each piece
 * is a narrow port, so tests hand in real local services or fakes. The model is NOT here: only
 * the worker loads the OpenAI SDK (lib/worker-deps.ts), so the functions the frontend calls
 * start cold without it.
 */

import { type Alerter, createAlerter } from "./alerts.ts";
import { type AuthUser, createAuth } from "./auth.ts";
import { type Config, getConfig } from "./config.ts";
import { createRpc } from "./db.ts";
import { createJobs, type Jobs } from "./jobs.ts";
import { createQueue, type PublishInput } from "./queue.ts";
import {
  createProviderGate,
  createRateLimiter,
  createRedis,
  type RateLimitResult,
} from "./redis.ts";

export interface Deps {
  config: Config;
  jobs: Jobs;
  queue: { publishJob(input: PublishInput): Promise<{ messageId: string; deduplicated: boolean }> };
  auth: { userFromRequest(req: Request): Promise<AuthUser> };
  rateLimiter: { check(userId: string): Promise<RateLimitResult> };
  gate: { resumeAt(now?: Date): Promise<Date | null>; holdUntil(at: Date): Promise<void> };
  alerts: Alerter;
  redis: { ping(): Promise<unknown> };
  now(): Date;
}

export function createDeps(config: Config): Deps {
  const rpc = createRpc({ url: config.supabaseUrl, serviceRoleKey: config.supabaseServiceRoleKey });
  const redis = createRedis({
    url: config.upstashRedisRestUrl,
    token: config.upstashRedisRestToken,
  });
  return {
    config,
    jobs: createJobs(rpc),
    queue: createQueue({
      baseUrl: config.qstashUrl,
      token: config.qstashToken,
      appUrl: config.appUrl,
      retries: config.qstashRetries,
    }),
    auth: createAuth({ jwtSecret: config.supabaseJwtSecret, supabaseUrl: config.supabaseUrl }),
    rateLimiter: createRateLimiter(redis, {
      requests: config.rateLimitRequests,
      windowSeconds: config.rateLimitWindowSeconds,
    }),
    gate: createProviderGate(redis),
    alerts: createAlerter({
      redis,
      webhookUrl: config.alertWebhookUrl,
      throttleSeconds: config.alertThrottleSeconds,
    }),
    redis,
    now: () => new Date(),
  };
}

let cached: Deps | undefined;

/** The instance's dependencies (Fluid compute shares module state between invocations). */
export function getDeps(): Deps {
  cached ??= createDeps(getConfig());
  return cached;
}
