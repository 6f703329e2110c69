import { describe, expect, test } from "vitest";
import { isRequired, loadConfig, VARIABLES, type VariableName } from "../../lib/config.ts";
import { ConfigError } from "../../lib/errors.ts";
import { VALID_ENV } from "../support/env.ts";

const REQUIRED = [
  "SUPABASE_URL",
  "SUPABASE_SECRET_KEY",
  "QSTASH_TOKEN",
  "QSTASH_CURRENT_SIGNING_KEY",
  "QSTASH_NEXT_SIGNING_KEY",
  "UPSTASH_REDIS_REST_URL",
  "UPSTASH_REDIS_REST_TOKEN",
  "OPENAI_API_KEY",
  "APP_URL",
  "CRON_SECRET",
];

/** A valid environment whose URLs end in a slash (a case the loader trims). */
const valid = {
  ...VALID_ENV,
  SUPABASE_URL: "https://abc.supabase.co/",
  APP_URL: "https://jobs.example.com/",
};

function problems(env: Record<string, string | undefined>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error("expected a ConfigError");
}

/** `valid` with `overrides` applied: what loading it gives. */
const configWith = (overrides: Record<string, string>) => loadConfig({ ...valid, ...overrides });
/** `valid` with `overrides` applied: the problems loading it names. */
const problemsWith = (overrides: Record<string, string>) => problems({ ...valid, ...overrides });

describe("loadConfig", () => {
  test("required means: declared with no default and not optional", () => {
    expect((Object.keys(VARIABLES) as VariableName[]).filter(isRequired)).toEqual(REQUIRED);
  });

  test("an empty environment: one error naming every required variable", () => {
    const found = problems({});
    for (const name of REQUIRED)
      expect(found.some((p) => p.startsWith(`${name} is required`))).toBe(true);
    expect(found).toHaveLength(REQUIRED.length);
  });

  test("empty strings (as a copied .env.example has) count as missing", () => {
    const env = Object.fromEntries(REQUIRED.map((k) => [k, ""]));
    expect(problems(env)).toHaveLength(REQUIRED.length);
  });

  test("defaults: documented tunables, model, and no optional services", () => {
    const config = loadConfig(valid);
    expect(config).toMatchObject({
      openaiModel: "gpt-5.4-mini",
      qstashRetries: 1,
      providerQuotaMaxHits: 3,
      jobMaxAgeSeconds: 10_800,
      workerMaxDurationSeconds: 300,
      modelTimeoutMs: 270_000,
      jobLeaseSeconds: 330,
      providerBackoffSeconds: 60,
      sweepBatchSize: 100,
      sweepUndeliveredAfterSeconds: 900,
      sweepLeaseGraceSeconds: 300,
      rateLimitRequests: 10,
      rateLimitWindowSeconds: 60,
      alertThrottleSeconds: 900,
    });
    expect(config.supabaseJwtSecret).toBeUndefined();
    expect(config.qstashUrl).toBeUndefined();
    expect(config.openaiBaseUrl).toBeUndefined();
    expect(config.alertWebhookUrl).toBeUndefined();
  });

  test("URLs lose their trailing slash; tunables parse as numbers", () => {
    const config = configWith({
      QSTASH_URL: "http://127.0.0.1:8080/",
      QSTASH_RETRIES: "0",
      SWEEP_BATCH_SIZE: "25",
    });
    expect(config.appUrl).toBe("https://jobs.example.com");
    expect(config.supabaseUrl).toBe("https://abc.supabase.co");
    expect(config.qstashUrl).toBe("http://127.0.0.1:8080");
    expect(config.qstashRetries).toBe(0);
    expect(config.sweepBatchSize).toBe(25);
  });

  test("malformed values are all named at once", () => {
    const found = problemsWith({
      APP_URL: "jobs.example.com",
      ALERT_WEBHOOK_URL: "ftp://hooks.example.com",
      CRON_SECRET: "short",
      SUPABASE_JWT_SECRET: "too-short",
      QSTASH_RETRIES: "one",
      SWEEP_BATCH_SIZE: "1.5",
      RATE_LIMIT_REQUESTS: "0",
    });
    const names = found.map((p) => p.split(" ")[0]);
    expect(names.sort()).toEqual(
      [
        "ALERT_WEBHOOK_URL",
        "APP_URL",
        "CRON_SECRET",
        "QSTASH_RETRIES",
        "RATE_LIMIT_REQUESTS",
        "SUPABASE_JWT_SECRET",
        "SWEEP_BATCH_SIZE",
      ].sort(),
    );
  });

  test("the model timeout must be below the worker's max duration", () => {
    const found = problemsWith({ MODEL_TIMEOUT_MS: "300000" });
    expect(found).toEqual([
      expect.stringMatching(/^MODEL_TIMEOUT_MS must be below WORKER_MAX_DURATION_SECONDS/),
    ]);
    expect(configWith({ MODEL_TIMEOUT_MS: "299000" }).modelTimeoutMs).toBe(299_000);
  });

  test("the lease must exceed the worker's max duration", () => {
    const found = problemsWith({
      WORKER_MAX_DURATION_SECONDS: "120",
      JOB_LEASE_SECONDS: "120",
    });
    expect(found).toEqual([
      expect.stringMatching(/^JOB_LEASE_SECONDS must exceed WORKER_MAX_DURATION_SECONDS/),
    ]);
  });

  test("the model timeout, the lease and the sweeper's grace follow the worker's max duration unless set", () => {
    expect(configWith({ WORKER_MAX_DURATION_SECONDS: "800" })).toMatchObject({
      workerMaxDurationSeconds: 800,
      modelTimeoutMs: 770_000,
      jobLeaseSeconds: 830,
      sweepLeaseGraceSeconds: 800,
    });
    expect(
      configWith({
        WORKER_MAX_DURATION_SECONDS: "800",
        MODEL_TIMEOUT_MS: "600000",
        JOB_LEASE_SECONDS: "900",
        SWEEP_LEASE_GRACE_SECONDS: "0",
      }),
    ).toMatchObject({ modelTimeoutMs: 600_000, jobLeaseSeconds: 900, sweepLeaseGraceSeconds: 0 });
    // Too short for the write margin: nothing is derived for the model, and the rule says so.
    expect(problemsWith({ WORKER_MAX_DURATION_SECONDS: "20" })).toEqual([
      expect.stringMatching(/^MODEL_TIMEOUT_MS must be below WORKER_MAX_DURATION_SECONDS \(20s/),
    ]);
  });

  test("the worker's max duration is at most Fluid compute's maximum (800 s)", () => {
    expect(problemsWith({ WORKER_MAX_DURATION_SECONDS: "801" })).toEqual([
      "WORKER_MAX_DURATION_SECONDS must be at most 800",
    ]);
  });

  test("a malformed secret's value never appears in the error", () => {
    const secretValue = "hunter2-very-secret";
    const env = { ...valid, SUPABASE_JWT_SECRET: secretValue, CRON_SECRET: "tiny-secret" };
    let message = "";
    try {
      loadConfig(env);
    } catch (err) {
      message = `${(err as Error).message}\n${JSON.stringify(err)}`;
    }
    expect(message).toContain("SUPABASE_JWT_SECRET");
    expect(message).toContain("CRON_SECRET");
    expect(message).not.toContain(secretValue);
    expect(message).not.toContain("tiny-secret");
  });
});
