/**
 * A user's extraction schema can never stall or crash the worker (docs/DESIGN.md#job-kinds), in
 * process on the real database and the fake model behind the real SDK:
 * - schemas whose check is exponential, and reference cycles, are refused at enqueue;
 * - one stored anyway (here: written into the job row after enqueue, as a job stored before
 *   the rule would be) ends `output_invalid` at the check's deadline, its usage recorded;
 * - any throw from a kind's `readOutput` ends the attempt `output_invalid`, never a 500;
 * - another user's stream beside a run of such jobs keeps its progress writes and its cancel
 *   latency within the streaming tests' bounds (test/api/streaming.test.ts).
 */
import { randomUUID } from "node:crypto";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { setTimeout as sleep } from "node:timers/promises";
import { afterEach, describe, expect, test, vi } from "vitest";
import { OUTPUT_CHECK_DEADLINE_MS } from "../../lib/kinds/json-schema.ts";
import { summary } from "../../lib/kinds/summary.ts";
import { eventually, outcomeOf, type TestUser, useApi } from "../support/api.ts";
import { CANCEL_CUT_MS } from "../support/bounds.ts";
import { bomb, cyclePaths, cycles, object } from "../support/schema-bombs.ts";

const app = useApi({ env: { MODEL_TIMEOUT_MS: "20000", RATE_LIMIT_REQUESTS: "1000" } });

afterEach(() => {
  vi.restoreAllMocks();
});

const plain = object({ name: { type: ["string", "null"] } });

function post(user: TestUser, kind: string, input: unknown) {
  return app.call("jobs", "/api/jobs", {
    method: "POST",
    headers: { ...user.headers, "content-type": "application/json" },
    body: JSON.stringify({ kind, input }),
  });
}

const getJob = async (id: string, user: TestUser) =>
  (await (await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).json()).job;

/** An extraction enqueued with a plain schema, then given `schema` in its row: past acceptance. */
async function storedWith(user: TestUser, schema: unknown) {
  const res = await post(user, "extract", { text: `Ada Lovelace ${randomUUID()}`, schema: plain });
  expect(res.status).toBe(202);
  const id = (await res.json()).job.id as string;
  await app.admin.query(
    "update public.generation_jobs set input = jsonb_set(input, '{schema}', $2::jsonb) where id = $1",
    [id, JSON.stringify(schema)],
  );
  return id;
}

/** The job delivered once: the worker's status and outcome, and how long the delivery took. */
async function deliver(id: string) {
  const started = Date.now();
  const res = await app.deliver(app.qstash.latestFor(id));
  return { status: res.status, outcome: await outcomeOf(res), ms: Date.now() - started };
}

async function failedEvent(id: string) {
  return (await app.events(id)).find((e) => e.event === "failed")?.detail as
    | Record<string, unknown>
    | undefined;
}

/**
 * Delivers the job once and holds what every unreadable answer ends in: the worker's 200, the job
 * failed `output_invalid` (with `job`'s fields too), its failed event with the provider's usage.
 */
async function deliveredOutputInvalid(id: string, user: TestUser, job: object = {}) {
  const delivered = await deliver(id);
  expect(delivered.status).toBe(200);
  expect(delivered.outcome).toBe("failed");
  expect(await getJob(id, user)).toMatchObject({
    status: "failed",
    failureReason: "output_invalid",
    ...job,
  });
  expect(await failedEvent(id)).toMatchObject({
    reason: "output_invalid",
    usage: { source: "provider" },
  });
  return delivered;
}

describe("refused at enqueue: 400 invalid_input at the schema's path, nothing reserved", () => {
  test.each([
    ["the bomb, k = 3", bomb(3), "input.schema.$defs.B.properties.n"],
    ["the bomb, k = 4", bomb(4), "input.schema.$defs.B.properties.n"],
    ["a definition that is anyOf itself or null", cycles.selfAnyOf, cyclePaths.selfAnyOf],
    ["A → B → A", cycles.mutual, cyclePaths.mutual],
    ["a definition that is only a $ref to itself", cycles.onlySelf, cyclePaths.onlySelf],
  ])("%s", async (_, schema, path) => {
    const user = await app.newUser("pro");
    const res = await post(user, "extract", { text: "Ada Lovelace, born 1815.", schema });
    expect(res.status).toBe(400);
    const body = await res.json();
    expect(body.error.code).toBe("invalid_input");
    expect(body.details).toContainEqual({ path, message: expect.any(String) });
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.qstash.messages).toHaveLength(0);
  });
});

describe("stored anyway, the attempt ends output_invalid with its usage", () => {
  test.each([3, 4])(
    "the bomb, k = %i: stopped at the check's deadline, refunded, no retry",
    async (k) => {
      const user = await app.newUser("pro");
      const id = await storedWith(user, bomb(k));
      const { ms } = await deliveredOutputInvalid(id, user, { quotaRefunded: true });
      expect((await app.jobRow(id)).last_error).toContain(
        `output: took more than ${OUTPUT_CHECK_DEADLINE_MS} ms to check against the schema`,
      );
      expect(await failedEvent(id)).toMatchObject({
        reason: "output_invalid",
        usage: { source: "provider", completion_tokens: expect.any(Number) },
      });
      expect(await app.unitsUsed(user.id)).toBe(0);
      expect(app.qstash.forJob(id)).toHaveLength(1);
      // The whole delivery: claim, model call, check, failure; not minutes of Ajv.
      expect(ms).toBeLessThan(5_000);
    },
  );

  test.each(Object.keys(cycles) as (keyof typeof cycles)[])(
    "a reference cycle (%s): failed output_invalid, not a 500 left to the sweeper",
    async (name) => {
      const user = await app.newUser("pro");
      const id = await storedWith(user, cycles[name]);
      await deliveredOutputInvalid(id, user);
      expect(app.logs.some((l) => l.includes("job_output_unreadable"))).toBe(true);
    },
  );
});

describe("any throw from a kind's readOutput fails the attempt output_invalid", () => {
  // A secret in the error's message: it must reach neither the log nor the job.
  const secret = `card 4111 ${randomUUID()}`;

  test.each([
    [
      "throws",
      () =>
        vi.spyOn(summary, "readOutput").mockImplementation(() => {
          throw new TypeError(`cannot read ${secret}`);
        }),
    ],
    ["rejects", () => vi.spyOn(summary, "readOutput").mockRejectedValue(new RangeError(secret))],
  ])(
    "a summary whose readOutput %s: 200, failed output_invalid, usage recorded, refunded",
    async (_, breakIt) => {
      breakIt();
      const user = await app.newUser("pro");
      const res = await post(user, "summary", { text: "A text about queues.", words: 50 });
      expect(res.status).toBe(202);
      const id = (await res.json()).job.id as string;
      await deliveredOutputInvalid(id, user, { quotaRefunded: true });
      expect(await failedEvent(id)).toMatchObject({
        reason: "output_invalid",
        usage: { source: "provider", completion_tokens: expect.any(Number) },
      });
      expect(await app.unitsUsed(user.id)).toBe(0);
      expect((await app.jobRow(id)).last_error).toMatch(
        /could not be checked \((TypeError|RangeError)\)/,
      );
      expect(JSON.stringify(await app.jobRow(id))).not.toContain(secret);
      expect(app.logs.join("\n")).not.toContain(secret);
    },
  );
});

describe("beside a run of bomb jobs, another user's stream is unharmed", () => {
  test(`its progress writes go on, and its cancel cuts the stream within ${CANCEL_CUT_MS / 1000} s, capturing all but two intervals`, async () => {
    // The streamer: a token plan, 50 ms a token, far more tokens than the test lasts; its cancel
    // captures the tokens of its last progress write (test/e2e/token-cancel-attack.test.ts).
    const streamer = await app.newUser("team");
    const streamId = await app.enqueueOk(
      streamer,
      `Write a report ${randomUUID()} [fake:tokens:5000] [fake:chunk_ms:50]`,
    );
    const delivery = app.deliver(app.qstash.latestFor(streamId));
    await eventually(async () => (await getJob(streamId, streamer)).partialOutput, {
      what: "the first progress write",
    });

    // The other user's bomb jobs, one after another, until the stream has been cut.
    const bomber = await app.newUser("team");
    const lag = monitorEventLoopDelay({ resolution: 10 });
    lag.enable();
    let cut = false;
    const bombs: { outcome: string; ms: number }[] = [];
    const run = (async () => {
      while (!cut) bombs.push(await deliver(await storedWith(bomber, bomb(3))));
    })();

    // Progress writes while the bombs run: the partial output keeps growing.
    const seen: string[] = [];
    const watchUntil = Date.now() + 3_000;
    while (Date.now() < watchUntil) {
      const partial = (await getJob(streamId, streamer)).partialOutput as string | null;
      if (partial && partial !== seen.at(-1)) seen.push(partial);
      await sleep(100);
    }
    const bombsBeforeCancel = bombs.length;

    const canceledAt = Date.now();
    const canceled = await app.cancel(streamer, streamId);
    expect(canceled.status).toBe(200);
    const res = await delivery;
    const abortMs = Date.now() - canceledAt;
    cut = true;
    await run;
    lag.disable();
    const maxLagMs = lag.max / 1e6;

    expect(await outcomeOf(res)).toBe("aborted");
    expect(abortMs).toBeLessThan(CANCEL_CUT_MS);
    // What the provider streamed for this job and what its cancel captured: at most two
    // progress intervals apart (40 tokens at 50 ms a token), as the token-cancel test allows.
    const stream = await eventually(
      () => app.model.stats().requests.find((r) => r.format === null),
      { what: "the stream to be cut" },
    );
    const { rows } = await app.admin.query<{ p: number }>(
      "select prompt_tokens as p from public.generation_jobs where id = $1",
      [streamId],
    );
    const captured = (await canceled.json()).job.captured - (rows[0]?.p ?? 0);
    const uncaptured = stream.completionTokens - captured;
    expect(captured).toBeGreaterThan(0);
    expect(uncaptured).toBeGreaterThanOrEqual(0);
    expect(uncaptured).toBeLessThanOrEqual(40);
    // Two progress writes or more in 3 s of bombs (one a second), each extending the last.
    expect(seen.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < seen.length; i++) {
      expect(seen[i]?.startsWith(seen[i - 1] ?? "?")).toBe(true);
    }
    expect(bombsBeforeCancel).toBeGreaterThanOrEqual(2);
    expect(bombs.every((b) => b.outcome === "failed")).toBe(true);
    // No stall as long as the progress interval (1 s) while they ran.
    expect(maxLagMs).toBeLessThan(1_000);
    process.stdout.write(
      `[schema-bomb] ${bombs.length} bomb jobs beside the stream (${bombs.map((b) => b.ms).join(", ")} ms each); ${seen.length} progress writes in 3 s; cancel→abort ${abortMs} ms; ${uncaptured} of ${stream.completionTokens} streamed tokens uncaptured; event-loop delay max ${maxLagMs.toFixed(0)} ms\n`,
    );
  });
});
