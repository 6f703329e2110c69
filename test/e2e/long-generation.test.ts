/**
 * A generation longer than the old 45 s cap completes, on the whole local stack, with the
 * worker's time limits at production's ratios on a scaled clock: the declaration in
 * lib/config.ts (`WORKER_TIMING`: a 300 s function, the model timeout 30 s short of it, the
 * lease 30 s past it, the sweeper's grace one function long) divided by 10, so a 300 s function
 * is 30 s here. (At 1/30 the fixed costs of a loaded test machine, the claim, the first token,
 * the writes, took a third of the scaled function; they do not grow with the duration.) The fake
 * model streams 150 tokens 100 ms apart, about 15 s (150 s in production: more than three
 * times the old model timeout, and more than twice the old function's whole 60 s). The progress
 * interval is not scaled (1 s, as in production): that is the bound a cancel is held to.
 *
 * The stack does not end a function at its maxDuration (nothing local does); the test checks
 * instead that the attempt ended inside it, as it must on Vercel.
 */
import { expect, test } from "vitest";
import { WORKER_TIMING, workerTimings } from "../../lib/config.ts";
import { events, newUser, until, useStack } from "../support/stack.ts";

const SCALE = 1 / 10;
const MAX_DURATION_S = WORKER_TIMING.maxDurationSeconds * SCALE;
const production = workerTimings(WORKER_TIMING.maxDurationSeconds);
const MODEL_TIMEOUT_MS = Math.round(production.modelTimeoutMs * SCALE);
const LEASE_S = Math.round(production.jobLeaseSeconds * SCALE);
const GRACE_S = Math.round(production.sweepLeaseGraceSeconds * SCALE);
/** The old defaults (a 60 s function, a 45 s model timeout), on the same clock. */
const OLD_MODEL_TIMEOUT_MS = 45_000 * SCALE;
const OLD_MAX_DURATION_MS = 60_000 * SCALE;
const PROGRESS_INTERVAL_MS = 1000;
const CHUNK_MS = 100;

const fixture = useStack({
  env: {
    WORKER_MAX_DURATION_SECONDS: String(MAX_DURATION_S),
    MODEL_TIMEOUT_MS: String(MODEL_TIMEOUT_MS),
    JOB_LEASE_SECONDS: String(LEASE_S),
    SWEEP_LEASE_GRACE_SECONDS: String(GRACE_S),
    PROGRESS_INTERVAL_MS: String(PROGRESS_INTERVAL_MS),
  },
});

test("the scaled limits keep production's ratios", () => {
  expect({ MAX_DURATION_S, MODEL_TIMEOUT_MS, LEASE_S, GRACE_S }).toEqual({
    MAX_DURATION_S: 30,
    MODEL_TIMEOUT_MS: 27_000,
    LEASE_S: 33,
    GRACE_S: 30,
  });
});

test(`a generation streaming for ~15 s (150 s in production) completes: one attempt, progress all along, the sweeper leaves it alone, no page`, async () => {
  const { stack } = fixture;
  stack.model.reset();
  const alertsBefore = stack.alerts.received().length;
  const { api } = await newUser(stack, "pro");
  const created = await api.enqueue(
    `[fake:chunk_ms:${CHUNK_MS}] [fake:tokens:150] A long document, written slowly`,
  );
  expect(created.status).toBe(202);
  const id = created.body.job.id as string;
  await api.waitRunning(id, 10_000);

  // While it streams: its progress grows, and the sweeper (as cron runs it) ends nothing.
  const seen: number[] = [];
  const job = await until(
    async () => {
      const current = (await api.job(id)).body.job;
      if (current.status === "running") {
        seen.push(current.partialTokens);
        const swept = await stack.sweep();
        expect(swept.status).toBe(200);
      }
      return current;
    },
    (j) => j.status !== "running",
    { timeoutMs: 45_000, intervalMs: 500, what: `job ${id} to finish` },
  );

  expect(job).toMatchObject({ status: "succeeded", attempts: 1, failureReason: null });
  const tookMs = Date.parse(job.finishedAt) - Date.parse(job.startedAt);
  process.stdout.write(
    `[long] streamed for ${tookMs} ms (model timeout ${MODEL_TIMEOUT_MS} ms, function ${MAX_DURATION_S * 1000} ms; old timeout ${OLD_MODEL_TIMEOUT_MS} ms); progress seen ${seen.join(", ")}\n`,
  );
  // Longer than the old model timeout and the old function allowed, inside the new function.
  expect(tookMs).toBeGreaterThan(3 * OLD_MODEL_TIMEOUT_MS);
  expect(tookMs).toBeGreaterThan(2 * OLD_MAX_DURATION_MS);
  expect(tookMs).toBeLessThan(MAX_DURATION_S * 1000);
  // The heartbeat: several progress writes, each further along.
  const distinct = [...new Set(seen.filter((n) => n > 0))];
  expect(distinct.length).toBeGreaterThanOrEqual(5);
  expect(distinct).toEqual([...distinct].sort((a, b) => a - b));

  // The provider streamed it to its end once, uncut.
  const { calls, requests } = stack.model.stats();
  expect(calls).toBe(1);
  expect(requests.at(-1)).toMatchObject({ stream: true, finishReason: "stop" });
  expect(requests.at(-1)?.completionTokens).toBeGreaterThan(140);
  expect(await events(stack, id)).toEqual(["enqueued", "started", "completed"]);

  // On-call hears nothing: no timeout, no stuck job, even after the cron's flush.
  expect((await stack.sweep()).status).toBe(200);
  expect(stack.alerts.received().slice(alertsBefore)).toEqual([]);
  expect(fixture.logs.some((l) => l.includes(id) && /timeout|timed out/i.test(l))).toBe(false);
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
}, 90_000);

test("a cancel late in a long generation (past the old cap) still cuts the stream within one progress interval", async () => {
  const { stack } = fixture;
  stack.model.reset();
  const { api } = await newUser(stack, "pro");
  const created = await api.enqueue(
    `[fake:chunk_ms:${CHUNK_MS}] [fake:tokens:5000] An endless document`,
  );
  const id = created.body.job.id as string;
  const running = await api.waitRunning(id, 10_000);
  // Past what the old model timeout allowed (4.5 s here, 45 s in production).
  const lateMs = OLD_MODEL_TIMEOUT_MS + 1000;
  await until(
    async () => Date.now(),
    (now) => now > Date.parse(running.startedAt) + lateMs,
    { timeoutMs: 10_000, intervalMs: 50, what: "the stream to run past the old cap" },
  );
  expect((await api.job(id)).body.job.status).toBe("running");

  const tokensAtCancel = stack.model.stats().streamedTokens;
  const canceledAt = Date.now();
  const canceled = await api.cancel(id);
  expect(canceled.status).toBe(200);
  const stats = await until(
    async () => stack.model.stats(),
    (s) => s.requests.length > 0,
    { timeoutMs: 10_000, intervalMs: 10, what: "the stream to be cut" },
  );
  const cutMs = Date.now() - canceledAt;
  const after = stats.streamedTokens - tokensAtCancel;
  process.stdout.write(`[long] cancel→cut ${cutMs} ms, ${after} tokens after the cancel\n`);
  expect(stats.requests.at(-1)?.finishReason).toBe("client_closed");
  // One progress interval plus a round trip (the bound the cancel-attack tests hold too).
  expect(cutMs).toBeLessThan(2 * PROGRESS_INTERVAL_MS);
  expect(after).toBeLessThanOrEqual((2 * PROGRESS_INTERVAL_MS) / CHUNK_MS);
  expect((await api.job(id)).body.job).toMatchObject({ status: "canceled" });
}, 60_000);
