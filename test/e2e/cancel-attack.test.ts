/**
 * The spend attack, over HTTP on the whole local stack: a user enqueues a slow, long prompt,
 * waits for it to run, cancels it and does it again, as fast as the API allows. Before the model
 * calls were streamed and cut on cancel, each round left a call running to its end, paid for,
 * and the unit came back every time. The bound is read from what the fake provider actually
 * streamed (what it would bill):
 * - a free user (one unit a day, one refunded running cancel a day) gets two calls a day out of
 *   the loop: the second cancel keeps the unit spent and the third enqueue is refused, so the
 *   provider streamed at most 2 × (2 s of streaming) + one bounded call;
 * - a pro user, whose plan refunds many running cancels, still pays at most about one progress
 *   interval of streaming per round: N × (tokens streamable in 2 s) + one bounded call.
 * Every call carried the plan's max_completion_tokens.
 */
import { expect, test } from "vitest";
import { CANCEL_CUT_MS } from "../support/bounds.ts";
import { events, newUser, until, useStack } from "../support/stack.ts";

// A model timeout long enough that an uncut call would run to the plan's bound (512 tokens at
// 50 ms a token: 25.6 s), so the check below tells a cut stream from a timed-out one.
const fixture = useStack({
  env: { WORKER_MAX_DURATION_SECONDS: "40", MODEL_TIMEOUT_MS: "30000", JOB_LEASE_SECONDS: "45" },
});

const ROUNDS = 8;
const CHUNK_MS = 50;
const FREE_MAX_OUTPUT_TOKENS = 512;
const PRO_MAX_OUTPUT_TOKENS = 8000;
const TOKENS_IN_2_S = 2_000 / CHUNK_MS;
/** A model output with a special-token string in it: it once made every progress write throw. */
// (`<` escaped, so the prompt itself carries no special-token string.)
const SPECIAL_OUTPUT = `[fake:say:${JSON.stringify("Say <|im_start|> and go on. ").replaceAll("<", "\\u003c")}*400]`;

test("a free user's cancel loop ends after two calls a day: the second running cancel keeps the unit, the third enqueue is refused", async () => {
  const { stack } = fixture;
  stack.model.reset();
  stack.model.setChunkMs(CHUNK_MS);
  const { api } = await newUser(stack, "free");
  const refunded: boolean[] = [];
  for (let round = 0; round < 2; round++) {
    const created = await api.enqueue(`[fake:tokens:5000] An endless essay, round ${round}`);
    expect(created.status).toBe(202);
    const id = created.body.job.id as string;
    await api.waitRunning(id, 10_000);
    const answered = stack.model.stats().requests.length;
    const canceled = await api.cancel(id);
    expect(canceled.status).toBe(200);
    refunded.push(canceled.body.quotaRefunded);
    await until(
      async () => stack.model.stats(),
      (st) => st.requests.length > answered,
      { timeoutMs: 10_000, intervalMs: 10, what: `round ${round}: the stream to be cut` },
    );
  }
  expect(refunded).toEqual([true, false]);
  const third = await api.enqueue("[fake:tokens:5000] An endless essay, round 2");
  expect(third.status).toBe(429);
  expect(third.body.error.code).toBe("quota_exceeded");

  const { calls, streamedTokens, requests } = stack.model.stats();
  const bound = 2 * TOKENS_IN_2_S + FREE_MAX_OUTPUT_TOKENS;
  process.stdout.write(
    `[attack] free: ${calls} model calls in the day, streamed ${streamedTokens} ≤ bound ${bound}; refunds ${refunded.join(", ")}; third enqueue ${third.status}\n`,
  );
  expect(calls).toBe(2);
  for (const r of requests)
    expect(r).toMatchObject({ stream: true, maxCompletionTokens: FREE_MAX_OUTPUT_TOKENS });
  expect(streamedTokens).toBeLessThanOrEqual(bound);
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
}, 120_000);

test(`a pro user's cancel loop (${ROUNDS} rounds, each refunded) costs at most ${ROUNDS} × 2 s of streaming + one bounded call`, async () => {
  const { stack } = fixture;
  stack.model.reset();
  stack.model.setChunkMs(CHUNK_MS);
  const { api, userId } = await newUser(stack, "pro");
  const latencies: number[] = [];
  const afterCancel: number[] = [];
  const started = Date.now();

  for (let round = 0; round < ROUNDS; round++) {
    const created = await api.enqueue(`[fake:tokens:5000] An endless essay, round ${round}`);
    expect(created.status).toBe(202);
    const id = created.body.job.id as string;
    await api.waitRunning(id, 10_000);

    const answered = stack.model.stats().requests.length;
    const tokensAtCancel = stack.model.stats().streamedTokens;
    const canceledAt = Date.now();
    const canceled = await api.cancel(id);
    expect(canceled.status).toBe(200);
    expect(canceled.body.quotaRefunded).toBe(true);
    // The provider side: the fake sees the connection close and ends the stream.
    const stats = await until(
      async () => stack.model.stats(),
      (s) => s.requests.length > answered,
      { timeoutMs: 10_000, intervalMs: 10, what: `round ${round}: the stream to be cut` },
    );
    latencies.push(Date.now() - canceledAt);
    afterCancel.push(stats.streamedTokens - tokensAtCancel);
    expect(stats.requests.at(-1)?.finishReason).toBe("client_closed");
  }
  const seconds = (Date.now() - started) / 1000;

  const { calls, streamedTokens, requests } = stack.model.stats();
  const bound = ROUNDS * TOKENS_IN_2_S + PRO_MAX_OUTPUT_TOKENS;
  const sorted = [...latencies].sort((a, b) => a - b);
  process.stdout.write(
    [
      `[attack] ${ROUNDS} rounds in ${seconds.toFixed(1)} s, ${calls} model calls, chunk ${CHUNK_MS} ms`,
      `[attack] cancel→stream cut (ms): ${latencies.join(", ")}; median ${sorted[Math.floor(ROUNDS / 2)]}, max ${sorted.at(-1)}`,
      `[attack] tokens streamed after each cancel: ${afterCancel.join(", ")}`,
      `[attack] streamed completion tokens ${streamedTokens} ≤ bound ${bound} (= ${ROUNDS} × ${TOKENS_IN_2_S} + ${PRO_MAX_OUTPUT_TOKENS}); uncut it would be ${ROUNDS} × ${PRO_MAX_OUTPUT_TOKENS} = ${ROUNDS * PRO_MAX_OUTPUT_TOKENS}`,
      "",
    ].join("\n"),
  );

  expect(calls).toBe(ROUNDS);
  expect(requests).toHaveLength(ROUNDS);
  for (const r of requests)
    expect(r).toMatchObject({ stream: true, maxCompletionTokens: PRO_MAX_OUTPUT_TOKENS });
  expect(Math.max(...latencies)).toBeLessThan(CANCEL_CUT_MS);
  expect(streamedTokens).toBeLessThanOrEqual(bound);
  // The unit came back every time, and each attempt's usage is on record.
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
  const { rows } = await stack.sql.query<{ n: number; tokens: number }>(
    `select count(*)::int as n, sum((detail -> 'usage' ->> 'completion_tokens')::int)::int as tokens
     from public.job_events where event = 'attempt_usage' and user_id = $1`,
    [userId],
  );
  expect(rows[0]?.n).toBe(ROUNDS);
  expect(rows[0]?.tokens).toBeLessThanOrEqual(streamedTokens);
  const last = (await api.list()).body.jobs[0];
  expect(await events(stack, last.id)).toEqual([
    "enqueued",
    "started",
    "canceled",
    "attempt_usage",
  ]);
}, 120_000);

test(`the same loop when the model's output contains <|im_start|>: each cancel still cuts the stream within ${CANCEL_CUT_MS / 1000} s`, async () => {
  const { stack } = fixture;
  stack.model.reset();
  stack.model.setChunkMs(CHUNK_MS);
  const { api } = await newUser(stack, "pro");
  const rounds = 3;
  const latencies: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const created = await api.enqueue(`${SPECIAL_OUTPUT} round ${round}`);
    expect(created.status).toBe(202);
    const id = created.body.job.id as string;
    await api.waitFor(id, (j) => j.status === "running" && j.partialTokens > 0, "progress", 15_000);
    const answered = stack.model.stats().requests.length;
    const canceledAt = Date.now();
    expect((await api.cancel(id)).status).toBe(200);
    const stats = await until(
      async () => stack.model.stats(),
      (s) => s.requests.length > answered,
      { timeoutMs: 10_000, intervalMs: 10, what: `round ${round}: the stream to be cut` },
    );
    latencies.push(Date.now() - canceledAt);
    expect(stats.requests.at(-1)?.finishReason).toBe("client_closed");
  }
  const { streamedTokens } = stack.model.stats();
  const bound = rounds * (TOKENS_IN_2_S + 1_000 / CHUNK_MS) + PRO_MAX_OUTPUT_TOKENS;
  process.stdout.write(
    `[attack] <|im_start|> in the output: cancel→stream cut (ms) ${latencies.join(", ")}; streamed ${streamedTokens} ≤ ${bound}\n`,
  );
  expect(Math.max(...latencies)).toBeLessThan(CANCEL_CUT_MS);
  expect(streamedTokens).toBeLessThanOrEqual(bound);
}, 120_000);
