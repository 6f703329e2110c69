/**
 * The environment, parsed and validated once. Every other module reads the typed `Config`,
 * never `process.env`. A problem is reported by variable NAME and rule, never with its value,
 * so a malformed secret cannot end up in a deployment log.
 *
 * `VARIABLES` is the one place a variable is declared: its rule, its default, what it is for,
 * and whether `npm run dev` takes it from its own environment. The `Config` type, the parser,
 * `.env.example`, the configuration table in docs/DESIGN.md and the dev stack's pass-through
 * list all come from it (`npm run config:docs` rewrites the two files; a unit test fails when
 * they drift).
 */
import * as z from "zod";
import { ConfigError } from "./errors.ts";

type Env = Record<string, string | undefined>;

/** Which `.env.example` section a variable is listed in. */
export type Group = "supabase" | "qstash" | "redis" | "openai" | "app" | "tunables";

/**
 * What `npm run dev` takes from the environment it was started in: `always`; `never` (the
 * stack owns it, e.g. its database); or only when the named variable is set too (a real
 * service's variables replace its stand-in together).
 */
export type DevPassThrough = "always" | "never" | { with: string };

/** One environment variable. */
export interface Variable<S extends z.ZodType = z.ZodType> {
  group: Group;
  schema: S;
  /** What it is for: the comment in `.env.example` and the meaning in docs/DESIGN.md. */
  about: string;
  /** The default as the docs show it, when unset means something other than a value. */
  shownDefault?: string;
  /** The value `.env.example` shows (the local stack's, or the default). @default "" */
  example?: string;
  dev: DevPassThrough;
  /** Required, unless this (legacy) variable is set instead; checked by `loadConfig`. */
  requiredUnless?: string;
}

const httpUrl = z.url({ protocol: /^https?$/, error: "must be an http(s) URL" });
const secret = z.string({ error: "is required" }).min(1, "is required");
const stripSlash = (url: string) => url.replace(/\/+$/, "");

function variable<S extends z.ZodType>(spec: Variable<S>): Variable<S> {
  return spec;
}

/**
 * A whole number with a documented default; `""` counts as unset (as in `.env` files). `rule`
 * names how the default follows from another variable ({@link WORKER_TIMING}).
 */
function tunable(
  fallback: number,
  min: number,
  about: string,
  more: { max?: number; rule?: string } = {},
) {
  const whole = z.coerce
    .number({ error: "must be a whole number" })
    .int("must be a whole number")
    .min(min, `must be at least ${min}`);
  const bounded =
    more.max === undefined ? whole : whole.max(more.max, `must be at most ${more.max}`);
  const range = more.max === undefined ? `min ${min}` : `${min} to ${more.max}`;
  return variable({
    group: "tunables",
    schema: bounded.default(fallback),
    about,
    shownDefault: more.rule
      ? `${more.rule}: \`${fallback}\` (min ${min})`
      : `\`${fallback}\` (${range})`,
    example: String(fallback),
    dev: "always",
  });
}

/**
 * The worker's time limits, from one declaration: its maximum duration. The model's timeout,
 * the lease and the sweeper's grace follow from it (unless set), and `vercel.json`'s
 * `maxDuration` for `api/worker.ts` must equal it (test/unit/durations.test.ts, and the artifact
 * test for the built function).
 * - 300 s: Fluid compute's default duration on every plan (and Hobby's maximum). A streamed
 *   generation mostly waits on the model, which Fluid compute bills at the lower I/O rate.
 * - At most 800 s: Fluid compute's maximum on Pro and Enterprise. QStash waits for a delivery's
 *   response up to its plan's maximum (15 min on the free plan, 2 h pay-as-you-go), so any
 *   allowed duration plus the lease margin fits it without an `Upstash-Timeout`.
 * - The model's timeout keeps `writeMarginSeconds` of the function's time for what comes before
 *   and after the call: the claim and the provider gate, then the result's write (three tries,
 *   250 ms and 750 ms apart), its usage and an alert, each database call bounded at 10 s.
 * - The lease outlives the function by `leaseMarginSeconds`: the claim is taken after the
 *   invocation began, so the lease ends after Vercel has ended the function even with the
 *   database's clock a little behind; then a redelivery may reclaim it.
 * - The sweeper fails a running job only one whole function duration after its lease ended,
 *   time for QStash's redelivery (seconds to minutes of backoff) to reclaim it first.
 */
export const WORKER_TIMING = {
  maxDurationSeconds: 300,
  /** The most a deployment may set: Fluid compute's maximum (Pro, Enterprise). */
  maxDurationLimitSeconds: 800,
  writeMarginSeconds: 30,
  leaseMarginSeconds: 30,
} as const;

/** The timings that follow from a worker's maximum duration ({@link WORKER_TIMING}). */
export function workerTimings(maxDurationSeconds: number): {
  modelTimeoutMs: number;
  jobLeaseSeconds: number;
  sweepLeaseGraceSeconds: number;
} {
  return {
    modelTimeoutMs: (maxDurationSeconds - WORKER_TIMING.writeMarginSeconds) * 1000,
    jobLeaseSeconds: maxDurationSeconds + WORKER_TIMING.leaseMarginSeconds,
    sweepLeaseGraceSeconds: maxDurationSeconds,
  };
}

const DEFAULT_TIMINGS = workerTimings(WORKER_TIMING.maxDurationSeconds);
/** Which variable's default follows from `WORKER_MAX_DURATION_SECONDS`, and how. */
const DERIVED = {
  MODEL_TIMEOUT_MS: "modelTimeoutMs",
  JOB_LEASE_SECONDS: "jobLeaseSeconds",
  SWEEP_LEASE_GRACE_SECONDS: "sweepLeaseGraceSeconds",
} as const;

const openai = { with: "OPENAI_API_KEY" } as const;
const qstash = { with: "QSTASH_TOKEN" } as const;
const redis = { with: "UPSTASH_REDIS_REST_URL" } as const;

export const VARIABLES = {
  SUPABASE_URL: variable({
    group: "supabase",
    schema: httpUrl.transform(stripSlash),
    about: "Supabase project URL",
    example: "http://127.0.0.1:54321",
    dev: "never",
  }),
  SUPABASE_SECRET_KEY: variable({
    group: "supabase",
    schema: z.string().min(1).optional(),
    about:
      "secret API key (`sb_secret_…`) for the RPC calls, server side only, sent as `apikey` alone; or set the legacy `SUPABASE_SERVICE_ROLE_KEY` instead",
    requiredUnless: "SUPABASE_SERVICE_ROLE_KEY",
    dev: "never",
  }),
  SUPABASE_PUBLISHABLE_KEY: variable({
    group: "supabase",
    schema: z.string().min(1).optional(),
    about:
      "publishable API key (`sb_publishable_…`) the page signs in with (Supabase Auth; not a secret)",
    shownDefault: "`SUPABASE_ANON_KEY`",
    dev: "never",
  }),
  SUPABASE_JWT_SECRET: variable({
    group: "supabase",
    schema: z.string().min(32, "must be at least 32 characters").optional(),
    about:
      "the legacy JWT secret (≥ 32 chars): HS256 user tokens are verified with it while it is set, and refused when it is not; ES256/RS256/EdDSA tokens always use the project's JWKS (`$SUPABASE_URL/auth/v1/.well-known/jwks.json`). Keep it during a rotation, remove it once the legacy key is revoked",
    shownDefault: "HS256 refused",
    dev: "never",
  }),
  SUPABASE_SERVICE_ROLE_KEY: variable({
    group: "supabase",
    schema: z.string().min(1).optional(),
    about:
      "legacy name: the `service_role` JWT key (sent as `apikey` and Bearer), used when `SUPABASE_SECRET_KEY` is unset",
    dev: "never",
  }),
  SUPABASE_ANON_KEY: variable({
    group: "supabase",
    schema: z.string().min(1).optional(),
    about:
      "legacy name: the `anon` JWT key for the page, used when `SUPABASE_PUBLISHABLE_KEY` is unset",
    dev: "never",
  }),
  QSTASH_URL: variable({
    group: "qstash",
    schema: httpUrl.transform(stripSlash).optional(),
    about: "QStash API base URL (the local stand-in: port 8080)",
    shownDefault: "`https://qstash.upstash.io`",
    example: "http://127.0.0.1:8080",
    dev: qstash,
  }),
  QSTASH_TOKEN: variable({ group: "qstash", schema: secret, about: "publish token", dev: qstash }),
  QSTASH_CURRENT_SIGNING_KEY: variable({
    group: "qstash",
    schema: secret,
    about: "signing key deliveries are verified with",
    dev: qstash,
  }),
  QSTASH_NEXT_SIGNING_KEY: variable({
    group: "qstash",
    schema: secret,
    about: "the next signing key (rotation)",
    dev: qstash,
  }),
  UPSTASH_REDIS_REST_URL: variable({
    group: "redis",
    schema: httpUrl.transform(stripSlash),
    about: "Upstash Redis REST URL (the local stand-in: port 8079)",
    example: "http://127.0.0.1:8079",
    dev: redis,
  }),
  UPSTASH_REDIS_REST_TOKEN: variable({
    group: "redis",
    schema: secret,
    about: "Upstash Redis REST token",
    dev: redis,
  }),
  OPENAI_API_KEY: variable({ group: "openai", schema: secret, about: "OpenAI key", dev: openai }),
  OPENAI_BASE_URL: variable({
    group: "openai",
    schema: httpUrl.transform(stripSlash).optional(),
    about: "an OpenAI-compatible endpoint (the local fake model in `npm run dev`)",
    shownDefault: "`https://api.openai.com/v1`",
    dev: openai,
  }),
  OPENAI_API: variable({
    group: "openai",
    schema: z
      .enum(["responses", "chat_completions"], {
        error: "must be responses or chat_completions",
      })
      .default("responses"),
    about:
      "the API a model call goes through: `responses` (OpenAI's recommended API) or `chat_completions` (for an OpenAI-compatible `OPENAI_BASE_URL` that speaks only Chat Completions)",
    shownDefault: "`responses`",
    example: "responses",
    dev: "always",
  }),
  OPENAI_MODEL: variable({
    group: "openai",
    schema: z.string().min(1).default("gpt-5.4-mini"),
    about:
      "the model of plans that name none (`plans.model`); choose one the price book (`public.models`) prices and the provider lists with no `shutdown_date` ([models and prices](#models-and-prices))",
    shownDefault: "`gpt-5.4-mini`",
    example: "gpt-5.4-mini",
    dev: "always",
  }),
  OPENAI_SAFETY_IDENTIFIER_KEY: variable({
    group: "openai",
    schema: z.string().min(32, "must be at least 32 characters").optional(),
    about:
      "server-side key (≥ 32 chars, keep it stable) for each user's `safety_identifier`: HMAC-SHA256 of the user id, never the id or email (lib/safety-identifier.ts); unset: no identifier is sent",
    shownDefault: "none sent",
    dev: openai,
  }),
  APP_URL: variable({
    group: "app",
    schema: httpUrl.transform(stripSlash),
    about:
      "the exact public base URL QStash calls (signatures are checked against it); a trailing slash is dropped",
    example: "http://127.0.0.1:3000",
    dev: "always",
  }),
  CRON_SECRET: variable({
    group: "app",
    schema: z.string({ error: "is required" }).min(16, "must be at least 16 characters"),
    about: "≥ 16 chars; Vercel cron sends `Authorization: Bearer $CRON_SECRET` to /api/cron/sweep",
    dev: "never",
  }),
  ALERT_WEBHOOK_URL: variable({
    group: "app",
    schema: httpUrl.optional(),
    about: "Slack-compatible incoming webhook for on-call",
    shownDefault: "log line",
    dev: { with: "ALERT_WEBHOOK_URL" },
  }),
  OTEL_EXPORTER_OTLP_ENDPOINT: variable({
    group: "app",
    schema: httpUrl.transform(stripSlash).optional(),
    about:
      "OpenTelemetry collector base URL (OTLP/HTTP, JSON): traces go to `$OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces` (docs/DESIGN.md#traces); unset with the next one: no tracing and no SDK loaded",
    shownDefault: "tracing off",
    dev: { with: "OTEL_EXPORTER_OTLP_ENDPOINT" },
  }),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: variable({
    group: "app",
    schema: httpUrl.optional(),
    about: "the full traces URL, used as given; wins over `OTEL_EXPORTER_OTLP_ENDPOINT`",
    shownDefault: "tracing off",
    dev: { with: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" },
  }),
  OTEL_EXPORTER_OTLP_HEADERS: variable({
    group: "app",
    schema: z
      .string()
      .optional()
      .transform((raw, ctx) => {
        if (raw === undefined) return undefined;
        const out: Record<string, string> = {};
        for (const pair of raw.split(",")) {
          if (pair.trim() === "") continue;
          const at = pair.indexOf("=");
          const key = at > 0 ? pair.slice(0, at).trim() : "";
          if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(key)) {
            ctx.addIssue({ code: "custom", message: "must be key=value pairs, comma-separated" });
            return z.NEVER;
          }
          try {
            out[key] = decodeURIComponent(pair.slice(at + 1).trim());
          } catch {
            ctx.addIssue({ code: "custom", message: "has a value that is not URL-encoded" });
            return z.NEVER;
          }
        }
        return out;
      }),
    about:
      "headers of each export, `key=value` pairs comma-separated, values URL-encoded (the collector's API key)",
    dev: { with: "OTEL_EXPORTER_OTLP_HEADERS" },
  }),
  RUNBOOK_URL: variable({
    group: "app",
    schema: httpUrl.transform(stripSlash).optional(),
    about:
      "where on-call reads docs/RUNBOOK.md (e.g. the file on the repository's web page); alerts and /ops link its sections as `$RUNBOOK_URL#<anchor>`",
    shownDefault: "alerts and /ops name `docs/RUNBOOK.md#<anchor>`, no link",
    example: "https://github.com/example/quota-jobs/blob/main/docs/RUNBOOK.md",
    dev: "always",
  }),
  QSTASH_RETRIES: tunable(1, 0, "QStash redeliveries after the first attempt"),
  QSTASH_FLOW_CONTROL: variable({
    group: "tunables",
    schema: z.enum(["on", "off"], { error: "must be on or off" }).default("on"),
    about:
      "QStash Flow Control on every delivery to the worker: key `openai.<model>` (flex and standard share it), with the three limits below, so the fleet stays under the provider's limits before a 429 ([flow control](#flow-control))",
    shownDefault: "`on`",
    example: "on",
    dev: "always",
  }),
  QSTASH_FLOW_PARALLELISM: tunable(
    20,
    1,
    "worker deliveries (so model calls) in flight at once, fleet-wide, per model",
  ),
  QSTASH_FLOW_RATE: tunable(
    1,
    1,
    "worker deliveries started per `QSTASH_FLOW_PERIOD_SECONDS` (1 per 3 s = 20 a minute: OpenAI's usage tier 1, 200,000 TPM ÷ 10,000 tokens a job)",
  ),
  QSTASH_FLOW_PERIOD_SECONDS: tunable(3, 1, "the period `QSTASH_FLOW_RATE` counts in", {
    max: 604_800,
  }),
  PROVIDER_QUOTA_MAX_HITS: tunable(
    3,
    1,
    "provider-quota (429) hits before a job is failed and refunded",
  ),
  JOB_MAX_AGE_SECONDS: tunable(10_800, 60, "a job older than this is failed and refunded (3 h)"),
  WORKER_MAX_DURATION_SECONDS: tunable(
    WORKER_TIMING.maxDurationSeconds,
    1,
    "must equal `maxDuration` of `api/worker.ts` in `vercel.json`; `MODEL_TIMEOUT_MS`, `JOB_LEASE_SECONDS` and `SWEEP_LEASE_GRACE_SECONDS` follow from it unless set",
    { max: WORKER_TIMING.maxDurationLimitSeconds },
  ),
  MODEL_TIMEOUT_MS: tunable(
    DEFAULT_TIMINGS.modelTimeoutMs,
    1_000,
    "model call timeout; must be below `WORKER_MAX_DURATION_SECONDS` × 1000",
    { rule: `(\`WORKER_MAX_DURATION_SECONDS\` − ${WORKER_TIMING.writeMarginSeconds}) × 1000` },
  ),
  JOB_LEASE_SECONDS: tunable(
    DEFAULT_TIMINGS.jobLeaseSeconds,
    1,
    "a worker's claim; must exceed `WORKER_MAX_DURATION_SECONDS`",
    { rule: `\`WORKER_MAX_DURATION_SECONDS\` + ${WORKER_TIMING.leaseMarginSeconds}` },
  ),
  PROVIDER_BACKOFF_SECONDS: tunable(60, 1, "wait after a 429 without `retry-after`"),
  SWEEP_BATCH_SIZE: tunable(100, 1, "jobs per sweeper batch"),
  SWEEP_UNDELIVERED_AFTER_SECONDS: tunable(
    900,
    60,
    "a queued job not delivered after this is republished once, then failed",
  ),
  SWEEP_LEASE_GRACE_SECONDS: tunable(
    DEFAULT_TIMINGS.sweepLeaseGraceSeconds,
    0,
    "time past an expired lease before the sweeper fails a running job",
    { rule: "`WORKER_MAX_DURATION_SECONDS`" },
  ),
  RETENTION_DAYS: tunable(
    30,
    1,
    "a finished job's prompt, input, output, partial output and error text are erased this long after it ended (its accounting stays)",
  ),
  RATE_LIMIT_REQUESTS: tunable(10, 1, "enqueue requests per user per window"),
  RATE_LIMIT_WINDOW_SECONDS: tunable(60, 1, "the rate-limit window"),
  EXPORT_RATE_LIMIT_PER_HOUR: tunable(
    6,
    1,
    "GET /api/me/export requests per user per hour (each reads the user's whole history)",
  ),
  PROGRESS_INTERVAL_MS: tunable(
    1000,
    100,
    "how often a streaming worker records progress, and so how soon a cancel cuts its model call",
  ),
  ALERT_THROTTLE_SECONDS: tunable(
    900,
    1,
    "alert dedup/throttle window (at most 5 pages per kind per window) and the `user_failures` summary window",
  ),
};

export type VariableName = keyof typeof VARIABLES;

type Words<S extends string> = S extends `${infer Head}_${infer Tail}`
  ? `${Capitalize<Lowercase<Head>>}${Words<Tail>}`
  : Capitalize<Lowercase<S>>;
/** `MODEL_TIMEOUT_MS` → `modelTimeoutMs`. */
type CamelCase<S extends string> = Uncapitalize<Words<S>>;

/** The validated configuration: one field per variable, camel-cased; unset optionals are `undefined`. */
export type Config = {
  [K in VariableName as CamelCase<K>]: z.output<(typeof VARIABLES)[K]["schema"]>;
};

/** `MODEL_TIMEOUT_MS` → `modelTimeoutMs`, as {@link Config} names it. */
export function fieldOf(name: string): string {
  return name.toLowerCase().replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** Whether a deployment must set it (no default, not optional, or only a legacy name instead). */
export function isRequired(name: VariableName): boolean {
  const v: Variable = VARIABLES[name];
  return v.requiredUnless !== undefined || !v.schema.safeParse(undefined).success;
}

const names = Object.keys(VARIABLES) as VariableName[];
const schema = z.object(
  Object.fromEntries(names.map((name) => [name, VARIABLES[name].schema])) as Record<
    string,
    z.ZodType
  >,
);

function problemsOf(error: z.ZodError, input: Env): string[] {
  // Name and rule only: zod 4 issues never carry the input unless asked (`reportInput`).
  return error.issues.map((issue) => {
    const name = String(issue.path[0] ?? "environment");
    return `${name} ${input[name] === undefined ? "is required" : issue.message}`;
  });
}

function parsed(name: VariableName, input: Env): number | undefined {
  const result = VARIABLES[name].schema.safeParse(input[name]);
  return result.success && typeof result.data === "number" ? result.data : undefined;
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
  // The timings a deployment did not set follow from the worker's maximum duration (one too
  // short for the write margin derives no model timeout: the check below then names it).
  const declared = parsed("WORKER_MAX_DURATION_SECONDS", input);
  if (declared !== undefined) {
    const derived = workerTimings(declared);
    for (const [name, field] of Object.entries(DERIVED) as [VariableName, keyof typeof derived][]) {
      const value = String(derived[field]);
      if (input[name] === undefined && VARIABLES[name].schema.safeParse(value).success)
        input[name] = value;
    }
  }

  const result = schema.safeParse(input);
  const problems = result.success ? [] : problemsOf(result.error, input);

  // Checked whenever these three parse, even if other variables did not: one pass, every problem.
  // The worker must get an answer (or a timeout) from the model while it can still write it
  // down, and a live worker's lease must never expire under it
  // (docs/DESIGN.md#invariant-7-one-model-call-per-claim).
  const maxDuration = parsed("WORKER_MAX_DURATION_SECONDS", input);
  const timeoutMs = parsed("MODEL_TIMEOUT_MS", input);
  const leaseSeconds = parsed("JOB_LEASE_SECONDS", input);
  if (maxDuration !== undefined && timeoutMs !== undefined && leaseSeconds !== undefined) {
    if (timeoutMs >= maxDuration * 1000) {
      problems.push(
        `MODEL_TIMEOUT_MS must be below WORKER_MAX_DURATION_SECONDS (${maxDuration}s = ${maxDuration * 1000} ms)`,
      );
    }
    if (leaseSeconds <= maxDuration) {
      problems.push(`JOB_LEASE_SECONDS must exceed WORKER_MAX_DURATION_SECONDS (${maxDuration})`);
    }
  }
  problems.push(...keyProblems(input));
  if (problems.length > 0 || !result.success) throw new ConfigError(problems);

  const values = result.data as Record<VariableName, unknown>;
  return Object.fromEntries(names.map((name) => [fieldOf(name), values[name]])) as Config;
}

/** The `role` claim of a legacy JWT key, read without verifying it (the key is ours to check). */
function legacyKeyRole(value: string): string | undefined {
  const payload = value.split(".")[1];
  if (value.split(".").length !== 3 || !payload) return undefined;
  try {
    const claims: unknown = JSON.parse(Buffer.from(payload, "base64url").toString("utf8"));
    return typeof claims === "object" && claims !== null && "role" in claims
      ? String(claims.role)
      : undefined;
  } catch {
    return undefined;
  }
}

/**
 * A key in the wrong slot, named by variable and kind, never by value: a secret key where the
 * page would receive it (`/api/public-config`), or a browser key where the server needs one
 * that passes Row Level Security.
 */
function keyProblems(input: Env): string[] {
  const problems: string[] = [];
  const secret = input.SUPABASE_SECRET_KEY;
  const legacySecret = input.SUPABASE_SERVICE_ROLE_KEY;
  if (secret === undefined && legacySecret === undefined)
    problems.push("SUPABASE_SECRET_KEY is required (or the legacy SUPABASE_SERVICE_ROLE_KEY)");
  for (const name of ["SUPABASE_SECRET_KEY", "SUPABASE_SERVICE_ROLE_KEY"] as const) {
    const value = input[name];
    if (value === undefined) continue;
    if (value.startsWith("sb_publishable_"))
      problems.push(`${name} holds a publishable key (sb_publishable_…): it needs the secret key`);
    else if (legacyKeyRole(value) === "anon")
      problems.push(`${name} holds the anon key: it needs the service_role or secret key`);
    else if (name === "SUPABASE_SECRET_KEY" && !value.startsWith("sb_secret_"))
      problems.push(
        `${name} must be a secret key (sb_secret_…); a legacy service_role JWT goes in SUPABASE_SERVICE_ROLE_KEY`,
      );
  }
  for (const name of ["SUPABASE_PUBLISHABLE_KEY", "SUPABASE_ANON_KEY"] as const) {
    const value = input[name];
    if (value === undefined) continue;
    if (value.startsWith("sb_secret_") || legacyKeyRole(value) === "service_role")
      problems.push(
        `${name} holds a secret key: the page would receive it from /api/public-config; use the publishable (or anon) key`,
      );
    else if (name === "SUPABASE_PUBLISHABLE_KEY" && !value.startsWith("sb_publishable_"))
      problems.push(
        `${name} must be a publishable key (sb_publishable_…); a legacy anon JWT goes in SUPABASE_ANON_KEY`,
      );
  }
  return problems;
}

/** The keys the app uses, new names first (docs/DESIGN.md#configuration). */
export function supabaseKeys(config: Config): { server: string; publishable: string | undefined } {
  const server = config.supabaseSecretKey ?? config.supabaseServiceRoleKey;
  // loadConfig refuses a configuration with neither.
  if (server === undefined) throw new Error("no Supabase server key in the configuration");
  return { server, publishable: config.supabasePublishableKey ?? config.supabaseAnonKey };
}

/** A Flow Control key and its limits, as the SDK's `flowControl` option takes them. */
export type FlowControlLimits = {
  key: string;
  parallelism: number;
  rate: number;
  /** Seconds. */
  period: number;
};

/**
 * The Flow Control key of a provider's model: `openai.gpt-5.4-mini`. QStash accepts only
 * letters, digits, `-`, `_` and `.` in a key (its resource-name rule), so anything else in a
 * model name (a fine-tuned model's `ft:…:org::id`) becomes `_`. One key per model, whatever the
 * service tier: OpenAI's requests- and tokens-per-minute are counted per model, and a flex
 * request's 429 is a capacity signal, not a separate quota (docs/DESIGN.md#flow-control).
 *
 * @example flowControlOf({ qstashFlowControl: "on", openaiModel: "gpt-4o-mini", ... })
 *   // { key: "openai.gpt-4o-mini", parallelism: 20, rate: 1, period: 3 }
 */
export function flowControlOf(
  config: Pick<
    Config,
    | "qstashFlowControl"
    | "openaiModel"
    | "qstashFlowParallelism"
    | "qstashFlowRate"
    | "qstashFlowPeriodSeconds"
  >,
): FlowControlLimits | undefined {
  if (config.qstashFlowControl === "off") return undefined;
  return {
    key: `openai.${config.openaiModel.replace(/[^A-Za-z0-9._-]/g, "_")}`,
    parallelism: config.qstashFlowParallelism,
    rate: config.qstashFlowRate,
    period: config.qstashFlowPeriodSeconds,
  };
}
let cached: Config | undefined;

/** `loadConfig(process.env)`, parsed on first use and memoized for the life of the instance. */
export function getConfig(): Config {
  cached ??= loadConfig(process.env);
  return cached;
}
