/**
 * The wiring: what the edge functions need (the ports in lib/ports.ts), built once per
 * instance from the validated config. The model is NOT here: only the worker loads the OpenAI
 * SDK (lib/worker-deps.ts), so the functions the frontend calls start cold without it.
 */

import { createAlerter } from "./alerts.ts";
import { createAuth } from "./auth.ts";
import { type Config, getConfig, supabaseKeys } from "./config.ts";
import { createRpc } from "./db.ts";
import { createJobs } from "./jobs.ts";
import type { Deps } from "./ports.ts";
import { createProviderGate } from "./provider-gate.ts";
import { createQueue } from "./queue.ts";
import { createRateLimiter } from "./rate-limit.ts";
import { createRedis } from "./redis.ts";

export type { Deps } from "./ports.ts";

export function createDeps(config: Config): Deps {
  const rpc = createRpc({ url: config.supabaseUrl, serverKey: supabaseKeys(config).server });
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
