/**
 * The wiring: what the edge functions need (the ports in lib/ports.ts), built once per
 * instance from the validated config. The model is NOT here: only the worker loads the OpenAI
 * SDK (lib/worker-deps.ts), so the functions the frontend calls start cold without it.
 *
 * The QStash client, the Upstash Redis client and the rate limiter load on their first call,
 * not with the function: a request that ends before them (a missing token, a bad body, a
 * status read) never pays for their SDKs, and a fresh instance's import does not either
 * (docs/BENCHMARKS.md, section 6). Each is made once per instance, as before, and the ports
 * keep their types, so no flow can tell the difference.
 */

import { createAlerter } from "./alerts.ts";
import { createAuth } from "./auth.ts";
import { type Config, flowControlOf, getConfig, supabaseKeys } from "./config.ts";
import { createRpc } from "./db.ts";
import { createJobs } from "./jobs.ts";
import type { Deps, RateLimiter } from "./ports.ts";
import { createProviderGate } from "./provider-gate.ts";

export type { Deps } from "./ports.ts";

/** Makes a value on the first call and hands every later call the same promise. */
function onFirstUse<T>(make: () => Promise<T>): () => Promise<T> {
  let made: Promise<T> | undefined;
  return () => {
    made ??= make();
    return made;
  };
}

/** A rate limiter that `limiter()` makes on its first check. */
function limiterOnFirstUse(limiter: () => Promise<RateLimiter>): RateLimiter {
  return {
    check: async (userId) => (await limiter()).check(userId),
    forget: async (userId) => (await limiter()).forget(userId),
  };
}

export function createDeps(config: Config): Deps {
  const serverKey = supabaseKeys(config).server;
  const rpc = createRpc({ url: config.supabaseUrl, serverKey });
  const redis = onFirstUse(async () =>
    (await import("./redis.ts")).createRedis({
      url: config.upstashRedisRestUrl,
      token: config.upstashRedisRestToken,
    }),
  );
  const queue = onFirstUse(async () =>
    (await import("./queue.ts")).createQueue({
      baseUrl: config.qstashUrl,
      token: config.qstashToken,
      appUrl: config.appUrl,
      retries: config.qstashRetries,
      flowControl: flowControlOf(config),
    }),
  );
  const rateLimiter = onFirstUse(async () => {
    // An enqueue publishes a round trip or two after its rate-limit check: start loading the
    // QStash client now, so its load overlaps the limiter's and the database's round trips.
    // A failure to load is seen by the publish that awaits the same promise.
    queue().catch(() => undefined);
    return (await import("./rate-limit.ts")).createRateLimiter(await redis(), {
      requests: config.rateLimitRequests,
      windowSeconds: config.rateLimitWindowSeconds,
      idKey: serverKey,
    });
  });
  const exportLimiter = onFirstUse(async () =>
    (await import("./rate-limit.ts")).createRateLimiter(await redis(), {
      requests: config.exportRateLimitPerHour,
      windowSeconds: 3600,
      prefix: "quota-jobs:ratelimit:export",
      idKey: serverKey,
    }),
  );
  const gate = onFirstUse(async () => createProviderGate(await redis()));
  const alerts = onFirstUse(async () =>
    createAlerter({
      redis: await redis(),
      webhookUrl: config.alertWebhookUrl,
      throttleSeconds: config.alertThrottleSeconds,
      links: { appUrl: config.appUrl, runbookUrl: config.runbookUrl },
    }),
  );
  return {
    config,
    jobs: createJobs(rpc, { defaultModel: config.openaiModel }),
    rpc,
    queue: {
      publishJob: async (input) => (await queue()).publishJob(input),
      flowBacklog: async () => (await queue()).flowBacklog(),
    },
    auth: createAuth({ jwtSecret: config.supabaseJwtSecret, supabaseUrl: config.supabaseUrl }),
    rateLimiter: limiterOnFirstUse(rateLimiter),
    exportLimiter: limiterOnFirstUse(exportLimiter),
    gate: {
      resumeAt: async (now) => (await gate()).resumeAt(now),
      holdUntil: async (at) => (await gate()).holdUntil(at),
    },
    alerts: {
      send: async (alert) => (await alerts()).send(alert),
      record: async (failure) => (await alerts()).record(failure),
      flush: async () => (await alerts()).flush(),
      forget: async (userId) => (await alerts()).forget(userId),
    },
    redis: { ping: async () => (await redis()).ping() },
    now: () => new Date(),
  };
}

let cached: Deps | undefined;

/** The instance's dependencies (Fluid compute shares module state between invocations). */
export function getDeps(): Deps {
  cached ??= createDeps(getConfig());
  return cached;
}
