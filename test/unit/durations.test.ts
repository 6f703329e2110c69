/**
 * The worker's time limits come from one declaration (`WORKER_TIMING` in lib/config.ts), and
 * what ships agrees with it: `vercel.json`'s `maxDuration` for the worker, the defaults a
 * deployment gets, what QStash waits for, and the plans' output bounds. The built function's
 * own `maxDuration` is checked against the same config in test/artifact/functions.test.ts.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";
import { loadConfig, WORKER_TIMING, workerTimings } from "../../lib/config.ts";
import { VALID_ENV } from "../support/env.ts";

/** Fluid compute's default duration on every plan (and Hobby's maximum). */
const FLUID_DEFAULT_SECONDS = 300;
/** QStash's smallest plan maximum for a delivery's HTTP response (free: 15 min). */
const QSTASH_FREE_RESPONSE_SECONDS = 15 * 60;
/** The old cap on a generation, before Fluid compute's defaults. */
const OLD_MODEL_TIMEOUT_MS = 45_000;
/** Each database call's own timeout (lib/db.ts), the unit of the write margin. */
const DB_CALL_TIMEOUT_SECONDS = 10;
/** A slow but ordinary streaming rate (tokens a second) a plan's bound must fit in the timeout. */
const SLOW_STREAM_TOKENS_PER_SECOND = 30;

const vercel = JSON.parse(readFileSync(join(root, "vercel.json"), "utf8")) as {
  functions: Record<string, { maxDuration?: number }>;
};

describe("the worker's time limits (one declaration)", () => {
  test("vercel.json's maxDuration for api/worker.ts is the declared one, and the config's default", () => {
    expect(vercel.functions["api/worker.ts"]?.maxDuration).toBe(WORKER_TIMING.maxDurationSeconds);
    expect(loadConfig(VALID_ENV).workerMaxDurationSeconds).toBe(WORKER_TIMING.maxDurationSeconds);
  });

  test("the shipped defaults fit Fluid compute's 300 s: a long generation, time to write it, a lease that outlives the function", () => {
    const c = loadConfig(VALID_ENV);
    expect(c.workerMaxDurationSeconds).toBeGreaterThanOrEqual(FLUID_DEFAULT_SECONDS);
    expect(c.workerMaxDurationSeconds).toBeLessThanOrEqual(WORKER_TIMING.maxDurationLimitSeconds);
    // The model gets most of the function, far more than the old cap...
    expect(c.modelTimeoutMs).toBeGreaterThan(5 * OLD_MODEL_TIMEOUT_MS);
    // ...and leaves time for the claim, the result's write with its retries, usage and an alert.
    const margin = c.workerMaxDurationSeconds - c.modelTimeoutMs / 1000;
    expect(margin).toBeGreaterThanOrEqual(3 * DB_CALL_TIMEOUT_SECONDS);
    expect(c.jobLeaseSeconds).toBeGreaterThan(c.workerMaxDurationSeconds);
    // The sweeper waits a whole function duration past the lease before it ends a running job.
    expect(c.sweepLeaseGraceSeconds).toBeGreaterThanOrEqual(c.workerMaxDurationSeconds);
    expect(c).toMatchObject(workerTimings(c.workerMaxDurationSeconds));
  });

  test("QStash waits long enough for any allowed duration: its smallest plan's response limit exceeds the longest lease", () => {
    // No Upstash-Timeout is sent: QStash's own limit (15 min on the free plan, 2 h paid) is
    // what a delivery gets, so a killed function's 504 (or a lapsed lease) comes first.
    const longest = workerTimings(WORKER_TIMING.maxDurationLimitSeconds);
    expect(longest.jobLeaseSeconds).toBeLessThan(QSTASH_FREE_RESPONSE_SECONDS);
  });

  test("every plan's output bound streams within the default model timeout at a slow rate", () => {
    const seed = readFileSync(join(root, "supabase", "seed.sql"), "utf8");
    // (id, name, period, units_per_period, max_active_jobs, max_output_tokens, ...)
    const bounds = [...seed.matchAll(/\('(\w+)', '[^']*', '\w+', \d+, \d+, (\d+),/g)].map((m) => ({
      plan: m[1],
      maxOutputTokens: Number(m[2]),
    }));
    expect(bounds.map((b) => b.plan)).toEqual(["free", "pro", "team", "economy"]);
    const seconds = loadConfig(VALID_ENV).modelTimeoutMs / 1000;
    for (const b of bounds)
      expect(b.maxOutputTokens / SLOW_STREAM_TOKENS_PER_SECOND, b.plan).toBeLessThan(seconds);
  });
});
