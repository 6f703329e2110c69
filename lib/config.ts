/**
 * The environment, parsed and validated once. Every other module reads the typed `Config`,
 * never `process.env`. A problem is reported by variable NAME and rule, never with its value,
 * so a malformed secret cannot end up in a deployment log.
 */
import { z } from "zod";
import { ConfigError } from "./errors.ts";

type Env = Record<string, string | undefined>;

const httpUrl = z.url({ protocol: /^https?$/, error: "must be an http(s) URL" });
const secret = z.string({ error: "is required" }).min(1, "is required");

/** A whole number with a documented default; `""` counts as unset (as in `.env` files). */
const int = (fallback: number, min: number) =>
  z.coerce
    .number({ error: "must be a whole number" })
    .int("must be a whole number")
    .min(min, `must be at least ${min}`)
    .default(fallback);

const services = z.object({
  SUPABASE_URL: httpUrl.transform(stripSlash),
  SUPABASE_SERVICE_ROLE_KEY: secret,
  SUPABASE_JWT_SECRET: z.string().min(32, "must be at least 32 characters").optional(),
  SUPABASE_ANON_KEY: z.string().min(1).optional(),
  QSTASH_URL: httpUrl.transform(stripSlash).optional(),
  QSTASH_TOKEN: secret,
  QSTASH_CURRENT_SIGNING_KEY: secret,
  QSTASH_NEXT_SIGNING_KEY: secret,
  UPSTASH_REDIS_REST_URL: httpUrl.transform(stripSlash),
  UPSTASH_REDIS_REST_TOKEN: secret,
  OPENAI_API_KEY: secret,
  OPENAI_BASE_URL: httpUrl.transform(stripSlash).optional(),
  OPENAI_MODEL: z.string().min(1).default("gpt-4o-mini"),
  APP_URL: httpUrl.transform(stripSlash),
  CRON_SECRET: z.string({ error: "is required" }).min(16, "must be at least 16 characters"),
  ALERT_WEBHOOK_URL: httpUrl.optional(),
});

const tunables = z.object({
  QSTASH_RETRIES: int(1, 0),
  PROVIDER_QUOTA_MAX_HITS: int(3, 1),
  JOB_MAX_AGE_SECONDS: int(10_800, 60),
  WORKER_MAX_DURATION_SECONDS: int(60, 1),
  MODEL_TIMEOUT_MS: int(45_000, 1_000),
  JOB_LEASE_SECONDS: int(90, 1),
  PROGRESS_INTERVAL_MS: int(1_000, 100),
  PROVIDER_BACKOFF_SECONDS: int(60, 1),
  SWEEP_BATCH_SIZE: int(100, 1),
  SWEEP_UNDELIVERED_AFTER_SECONDS: int(900, 60),
  SWEEP_LEASE_GRACE_SECONDS: int(300, 0),
  RATE_LIMIT_REQUESTS: int(10, 1),
  RATE_LIMIT_WINDOW_SECONDS: int(60, 1),
  ALERT_THROTTLE_SECONDS: int(900, 1),
});

/** The validated configuration. Optional services are `undefined` when unset. */
export type Config = {
  supabaseUrl: string;
  supabaseServiceRoleKey: string;
  /** The public anon key the browser page signs in with (not a secret; optional). */
  supabaseAnonKey: string | undefined;
  /** When set, user tokens are HS256-verified with it; else with the project's JWKS. */
  supabaseJwtSecret: string | undefined;
  /** QStash API base URL; `undefined` means the SDK default `https://qstash.upstash.io`. */
  qstashUrl: string | undefined;
  qstashToken: string;
  qstashCurrentSigningKey: string;
  qstashNextSigningKey: string;
  upstashRedisRestUrl: string;
  upstashRedisRestToken: string;
  openaiApiKey: string;
  openaiBaseUrl: string | undefined;
  /** @default "gpt-4o-mini" */
  openaiModel: string;
  /** The exact public base URL QStash calls, without a trailing slash. */
  appUrl: string;
  cronSecret: string;
  alertWebhookUrl: string | undefined;
  /** QStash redeliveries after the first attempt. @default 1 */
  qstashRetries: number;
  /** Provider-quota requeues before a job is failed and refunded. @default 3 */
  providerQuotaMaxHits: number;
  /** A job older than this is failed and refunded. @default 10800 (3 h) */
  jobMaxAgeSeconds: number;
  /** Must equal `maxDuration` of `api/worker.ts` in vercel.json. @default 60 */
  workerMaxDurationSeconds: number;
  /** Model call timeout; below the worker's max duration. @default 45000 */
  modelTimeoutMs: number;
  /** A claim's lease; longer than the worker's max duration. @default 90 */
  jobLeaseSeconds: number;
  /**
   * How often a streaming worker writes its progress, and so how soon it learns that the job
   * was canceled and cuts the model's stream. @default 1000
   */
  progressIntervalMs: number;
  /** Wait before retrying a provider that said 429 without a `retry-after`. @default 60 */
  providerBackoffSeconds: number;
  /** @default 100 */
  sweepBatchSize: number;
  /** A queued job not delivered after this long is republished (then failed). @default 900 */
  sweepUndeliveredAfterSeconds: number;
  /** Extra time past an expired lease before the sweeper fails the job. @default 300 */
  sweepLeaseGraceSeconds: number;
  /** Enqueue requests per user per window. @default 10 */
  rateLimitRequests: number;
  /** @default 60 */
  rateLimitWindowSeconds: number;
  /** Alert dedup/throttle window. @default 900 */
  alertThrottleSeconds: number;
};

function stripSlash(url: string): string {
  return url.replace(/\/+$/, "");
}

function problemsOf(error: z.ZodError, input: Env): string[] {
  // Name and rule only: zod 4 issues never carry the input unless asked (`reportInput`).
  return error.issues.map((issue) => {
    const name = String(issue.path[0] ?? "environment");
    return `${name} ${input[name] === undefined ? "is required" : issue.message}`;
  });
}

/**
 * Parse and validate the environment. Throws one `ConfigError` naming every missing or
 * malformed variable (never its value). Empty strings count as unset.
 *
 * @example
 * const config = loadConfig({ ...process.env, MODEL_TIMEOUT_MS: "30000" });
 */
export function loadConfig(env: Env = process.env): Config {
  const input: Env = {};
  for (const [k, v] of Object.entries(env)) input[k] = v === "" ? undefined : v;

  const s = services.safeParse(input);
  const t = tunables.safeParse(input);
  const problems = [
    ...(s.success ? [] : problemsOf(s.error, input)),
    ...(t.success ? [] : problemsOf(t.error, input)),
  ];

  // Checked whenever these three parse, even if other variables did not: one pass, every problem.
  const timing = tunables
    .pick({ WORKER_MAX_DURATION_SECONDS: true, MODEL_TIMEOUT_MS: true, JOB_LEASE_SECONDS: true })
    .safeParse(input);
  if (timing.success) {
    const {
      WORKER_MAX_DURATION_SECONDS: maxDuration,
      MODEL_TIMEOUT_MS,
      JOB_LEASE_SECONDS,
    } = timing.data;
    // The worker must get an answer (or a timeout) from the model while it can still write it
    // down, and a live worker's lease must never expire under it (docs/DESIGN.md#invariant-7-one-model-call-per-claim).
    if (MODEL_TIMEOUT_MS >= maxDuration * 1000) {
      problems.push(
        `MODEL_TIMEOUT_MS must be below WORKER_MAX_DURATION_SECONDS (${maxDuration}s = ${maxDuration * 1000} ms)`,
      );
    }
    if (JOB_LEASE_SECONDS <= maxDuration) {
      problems.push(`JOB_LEASE_SECONDS must exceed WORKER_MAX_DURATION_SECONDS (${maxDuration})`);
    }
  }
  if (problems.length > 0 || !s.success || !t.success) throw new ConfigError(problems);

  const e = s.data;
  const n = t.data;
  return {
    supabaseUrl: e.SUPABASE_URL,
    supabaseServiceRoleKey: e.SUPABASE_SERVICE_ROLE_KEY,
    supabaseJwtSecret: e.SUPABASE_JWT_SECRET,
    supabaseAnonKey: e.SUPABASE_ANON_KEY,
    qstashUrl: e.QSTASH_URL,
    qstashToken: e.QSTASH_TOKEN,
    qstashCurrentSigningKey: e.QSTASH_CURRENT_SIGNING_KEY,
    qstashNextSigningKey: e.QSTASH_NEXT_SIGNING_KEY,
    upstashRedisRestUrl: e.UPSTASH_REDIS_REST_URL,
    upstashRedisRestToken: e.UPSTASH_REDIS_REST_TOKEN,
    openaiApiKey: e.OPENAI_API_KEY,
    openaiBaseUrl: e.OPENAI_BASE_URL,
    openaiModel: e.OPENAI_MODEL,
    appUrl: e.APP_URL,
    cronSecret: e.CRON_SECRET,
    alertWebhookUrl: e.ALERT_WEBHOOK_URL,
    qstashRetries: n.QSTASH_RETRIES,
    providerQuotaMaxHits: n.PROVIDER_QUOTA_MAX_HITS,
    jobMaxAgeSeconds: n.JOB_MAX_AGE_SECONDS,
    workerMaxDurationSeconds: n.WORKER_MAX_DURATION_SECONDS,
    modelTimeoutMs: n.MODEL_TIMEOUT_MS,
    jobLeaseSeconds: n.JOB_LEASE_SECONDS,
    progressIntervalMs: n.PROGRESS_INTERVAL_MS,
    providerBackoffSeconds: n.PROVIDER_BACKOFF_SECONDS,
    sweepBatchSize: n.SWEEP_BATCH_SIZE,
    sweepUndeliveredAfterSeconds: n.SWEEP_UNDELIVERED_AFTER_SECONDS,
    sweepLeaseGraceSeconds: n.SWEEP_LEASE_GRACE_SECONDS,
    rateLimitRequests: n.RATE_LIMIT_REQUESTS,
    rateLimitWindowSeconds: n.RATE_LIMIT_WINDOW_SECONDS,
    alertThrottleSeconds: n.ALERT_THROTTLE_SECONDS,
  };
}

let cached: Config | undefined;

/** `loadConfig(process.env)`, parsed on first use and memoized for the life of the instance. */
export function getConfig(): Config {
  cached ??= loadConfig(process.env);
  return cached;
}
