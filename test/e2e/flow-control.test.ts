/**
 * A flood through the real stack (built app, QStash stand-in, fake model): many more jobs than
 * the Flow Control parallelism, from several users at once. Measured on the provider's side (the
 * fake model's `maxConcurrent` and `startedAt`), it never sees more than the configured
 * parallelism in flight or more than the rate per period; every job succeeds, quota exact
 * (`quota_drift` empty, checked after each test by useStack), none ended by the sweeper, even
 * when it runs mid-flood over jobs backdated past its undelivered window. Without flow control
 * the same flood goes past both limits.
 */
import { Client } from "@upstash/qstash";
import { describe, expect, test } from "vitest";
import { DEV_TOKEN } from "../../dev/qstash/index.ts";
import { newUser, type StackFixture, useStack } from "../support/stack.ts";

const PARALLELISM = 3;
const RATE = 4;
const PERIOD_SECONDS = 1;
const USERS = 10;
/** A pro user may have 3 jobs active at once. */
const JOBS_EACH = 3;
const JOBS = USERS * JOBS_EACH;

const LIMITS = {
  QSTASH_FLOW_PARALLELISM: String(PARALLELISM),
  QSTASH_FLOW_RATE: String(RATE),
  QSTASH_FLOW_PERIOD_SECONDS: String(PERIOD_SECONDS),
};

/** The most requests started in any window of `windowMs`. */
function mostInWindow(startedAt: number[], windowMs: number): number {
  let most = 0;
  let from = 0;
  for (let to = 0; to < startedAt.length; to++) {
    while ((startedAt[to] ?? 0) - (startedAt[from] ?? 0) >= windowMs) from++;
    most = Math.max(most, to - from + 1);
  }
  return most;
}

/** 30 jobs from 10 users, enqueued at once; resolves with their ids once every one is accepted. */
async function flood(fixture: StackFixture) {
  const { stack } = fixture;
  stack.model.reset();
  // Each generation streams for a few hundred ms, so deliveries overlap when nothing holds them.
  stack.model.setChunkMs(15);
  const users = await Promise.all(Array.from({ length: USERS }, () => newUser(stack)));
  const t0 = Date.now();
  const created = await Promise.all(
    users.flatMap((user, u) =>
      Array.from({ length: JOBS_EACH }, (_, j) =>
        user.api.enqueue(`[fake:tokens:40] flood ${u}.${j}`),
      ),
    ),
  );
  expect(created.map((r) => r.status)).toEqual(Array(JOBS).fill(202));
  return { t0, ids: created.map((r) => r.body.job.id as string) };
}

async function jobsOf(fixture: StackFixture, ids: string[]) {
  const { rows } = await fixture.stack.sql.query<{
    status: string;
    failure_reason: string | null;
    republish_count: number;
  }>(
    "select status, failure_reason, republish_count from public.generation_jobs where id = any($1)",
    [ids],
  );
  return rows;
}

async function allEnded(fixture: StackFixture, ids: string[], timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const rows = await jobsOf(fixture, ids);
    if (rows.every((r) => r.status !== "queued" && r.status !== "running")) return rows;
    if (Date.now() > deadline) throw new Error(`jobs not ended: ${JSON.stringify(rows)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("with flow control (parallelism 3, rate 4 per 1 s)", () => {
  const fixture = useStack({ env: LIMITS });

  test("a flood of 30 jobs from 10 users: the provider never sees more than 3 at once or 4 a second; all succeed, none swept", async () => {
    const { stack } = fixture;
    const { t0, ids } = await flood(fixture);

    // Mid-flood, jobs wait in QStash's waitlist for the model's key.
    const qstash = new Client({ baseUrl: stack.urls.qstash, token: DEV_TOKEN });
    const key = `openai.${stack.env.OPENAI_MODEL || "gpt-5.4-mini"}`;
    const info = await qstash.flowControl.get(key);
    expect(info).toMatchObject({ parallelismMax: PARALLELISM, rateMax: RATE, ratePeriod: 1 });
    expect(info.waitListSize).toBeGreaterThan(0);
    // The sweeper runs now over queued jobs backdated past its undelivered window (60 s): they
    // are waiting their turn, not lost, so it neither republishes nor fails one.
    await stack.sql.query(
      "update public.generation_jobs set queued_at = queued_at - interval '70 seconds' where id = any($1) and status = 'queued'",
      [ids],
    );
    const swept = await stack.sweep();
    expect(swept).toMatchObject({ status: 200, body: { republished: 0, failed: {} } });

    const rows = await allEnded(fixture, ids);
    const seconds = (Date.now() - t0) / 1000;
    expect(rows.map((r) => r.status)).toEqual(Array(JOBS).fill("succeeded"));
    expect(rows.every((r) => r.republish_count === 0)).toBe(true);

    const load = stack.model.stats();
    const perWindow = [1, 2, 3].map((k) => mostInWindow(load.startedAt, k * PERIOD_SECONDS * 1000));
    process.stdout.write(
      `flood with flow control: ${JOBS} jobs in ${seconds.toFixed(1)} s, provider saw at most ${load.maxConcurrent} at once, at most ${perWindow[0]} in any 1 s\n`,
    );
    expect(load.startedAt).toHaveLength(JOBS);
    expect(load.maxConcurrent).toBeLessThanOrEqual(PARALLELISM);
    // QStash counts a rate in periods one after another, so a sliding window of k periods
    // overlaps at most k + 1 of them: at most (k + 1) × rate starts in it.
    perWindow.forEach((most, i) => {
      expect(most).toBeLessThanOrEqual((i + 2) * RATE);
    });
    // And it took the time the rate asks for: 30 starts at 4 a second span over 6 periods.
    expect(seconds).toBeGreaterThanOrEqual((JOBS / RATE - 1) * PERIOD_SECONDS);
  }, 120_000);
});

describe("without flow control, the same flood", () => {
  const fixture = useStack({ env: { ...LIMITS, QSTASH_FLOW_CONTROL: "off" } });

  test("goes past the parallelism and the rate the provider was to be held to", async () => {
    const { stack } = fixture;
    const { t0, ids } = await flood(fixture);
    const rows = await allEnded(fixture, ids);
    const seconds = (Date.now() - t0) / 1000;
    expect(rows.map((r) => r.status)).toEqual(Array(JOBS).fill("succeeded"));
    const load = stack.model.stats();
    const most = mostInWindow(load.startedAt, PERIOD_SECONDS * 1000);
    process.stdout.write(
      `flood without flow control: ${JOBS} jobs in ${seconds.toFixed(1)} s, provider saw at most ${load.maxConcurrent} at once, at most ${most} in any 1 s\n`,
    );
    expect(load.maxConcurrent).toBeGreaterThan(PARALLELISM);
    expect(most).toBeGreaterThan(2 * RATE);
  }, 120_000);
});
