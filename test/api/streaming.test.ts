/**
 * The streamed worker, in-process against the real database, the PostgREST stand-in and the
 * fake model behind the real OpenAI SDK: every call bounded by the plan, progress visible while
 * running, a cancel cutting the stream within the progress interval (default 1 s), and each
 * attempt's usage in the event history.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { promptTokens, tokenizer } from "../../dev/openai/stream.ts";
import type { Model } from "../../lib/model.ts";
import { eventually, outcomeOf, useApi } from "../support/api.ts";
import { CANCEL_CUT_MS, TOKENS_BY_CUT_AT_50_MS } from "../support/bounds.ts";

// Long enough for a slowed stream to run for seconds.
const app = useApi({ env: { MODEL_TIMEOUT_MS: "20000" } });

async function queuedJob(plan: "free" | "pro" | "team" = "free", marker = "") {
  const user = await app.newUser(plan);
  const id = await app.enqueueOk(user, `Write a report ${randomUUID()} ${marker}`);
  return { user, id, message: app.qstash.latestFor(id) };
}

async function detailOf(id: string, event: string) {
  const { rows } = await app.admin.query(
    "select detail from public.job_events where job_id = $1 and event = $2",
    [id, event],
  );
  return rows[0]?.detail;
}

/** `[fake:say:…]`: the fake model streams exactly `text`, `times` times. */
// `<` is escaped: the special-token strings are in the model's output, not in the prompt.
const say = (text: string, times = 1) =>
  `[fake:say:${JSON.stringify(text).replaceAll("<", "\\u003c")}*${times}]`;

/** What OpenAI bills for the prompt as one user message, by the fake's own tokenizer (js-tiktoken). */
const billedPrompt = async (model: string, prompt: string) =>
  promptTokens(await tokenizer(model), [{ role: "user", text: prompt }]);

const getJob = async (id: string, headers: Record<string, string>) =>
  (await (await app.call("job", `/api/jobs/${id}`, { headers })).json()).job;

describe("bounded, streamed model calls", () => {
  test("each call streams with the plan's max_completion_tokens; the usage is in the completed event", async () => {
    const free = await queuedJob("free");
    expect(await outcomeOf(await app.deliver(free.message))).toBe("completed");
    const pro = await queuedJob("pro");
    expect(await outcomeOf(await app.deliver(pro.message))).toBe("completed");
    const [a, b] = app.model.stats().requests;
    expect(a).toMatchObject({ stream: true, maxCompletionTokens: 512, finishReason: "stop" });
    expect(b).toMatchObject({ stream: true, maxCompletionTokens: 8000, finishReason: "stop" });
    expect(await detailOf(free.id, "completed")).toEqual({
      attempt: 1,
      captured: 1,
      released: 0,
      usage: {
        prompt_tokens: expect.any(Number),
        // Billed output: the visible tokens and the hidden reasoning (the default model reasons).
        completion_tokens: a?.outputTokens,
        service_tier: "default",
        source: "provider",
      },
    });
  });

  test("a long answer stops at the plan's bound and is kept (finish_reason length)", async () => {
    const { id, message } = await queuedJob("free", "[fake:tokens:5000]");
    expect(await outcomeOf(await app.deliver(message))).toBe("completed");
    expect(app.model.stats().requests[0]).toMatchObject({
      outputTokens: 512,
      finishReason: "length",
    });
    expect((await detailOf(id, "completed")).usage.completion_tokens).toBe(512);
  });

  test("a request the provider refuses (400) is failed with the attempt's usage, zero, in its event", async () => {
    const { id, message } = await queuedJob("free", "[fake:bad_request]");
    expect(await outcomeOf(await app.deliver(message))).toBe("failed");
    expect(await detailOf(id, "failed")).toMatchObject({
      usage: { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
    });
  });

  test("a claim without the plan's bound (an older database mid-deploy) is still bounded", async () => {
    // Without the fallback the request would carry no max_completion_tokens at all.
    const { deps, workerDeps } = app.makeDeps({});
    const start = workerDeps.jobs.start;
    workerDeps.jobs = {
      ...workerDeps.jobs,
      start: async (id, o) => {
        const { max_output_tokens: _, ...older } = (await start(id, o)) as Record<string, unknown>;
        return older as unknown as Awaited<ReturnType<typeof start>>;
      },
    };
    const { message } = await queuedJob("pro", "[fake:tokens:5000]");
    const res = await app.deliver(message, { handlers: app.handlersFor(deps, workerDeps) });
    expect(await outcomeOf(res)).toBe("completed");
    expect(app.model.stats().requests[0]).toMatchObject({
      maxCompletionTokens: 512,
      outputTokens: 512,
    });
    expect(app.logs.some((l) => l.includes("output_bound_missing"))).toBe(true);
  });
});

describe("a cancel stops the spend", () => {
  test(`progress grows while running; a cancel cuts the stream within ${CANCEL_CUT_MS / 1000} s; only the streamed part is billed`, async () => {
    app.model.setChunkMs(50);
    const { user, id, message } = await queuedJob("free", "[fake:tokens:5000]");
    const delivery = app.deliver(message);

    // The partial output grows on GET /api/jobs/:id, once a second.
    const seen: string[] = [];
    await eventually(
      async () => {
        const job = await getJob(id, user.headers);
        if (job.partialOutput && job.partialOutput !== seen.at(-1)) seen.push(job.partialOutput);
        return seen.length >= 2;
      },
      { what: "two progress writes", timeoutMs: 8_000 },
    );
    expect(seen[1]?.startsWith(seen[0] ?? "?")).toBe(true);
    expect((await getJob(id, user.headers)).partialTokens).toBeGreaterThan(0);

    const tokensAtCancel = app.model.stats().streamedTokens;
    const canceledAt = Date.now();
    const cancel = await app.cancel(user, id);
    expect(cancel.status).toBe(200);
    const res = await delivery;
    const abortMs = Date.now() - canceledAt;
    expect(await outcomeOf(res)).toBe("aborted");
    expect(abortMs).toBeLessThan(CANCEL_CUT_MS);

    await eventually(() => app.model.stats().requests.length === 1, { what: "the stream to end" });
    const { streamedTokens, requests } = app.model.stats();
    expect(requests[0]).toMatchObject({ finishReason: "client_closed", maxCompletionTokens: 512 });
    // 50 ms a token: at most what streams in the time a cut may take.
    expect(streamedTokens - tokensAtCancel).toBeLessThanOrEqual(TOKENS_BY_CUT_AT_50_MS);
    const usage = (await detailOf(id, "attempt_usage")).usage;
    expect(usage.source).toBe("counted");
    // What the worker counted is what it received: at most what the fake wrote.
    expect(usage.completion_tokens).toBeLessThanOrEqual(streamedTokens);
    expect(usage.completion_tokens).toBeGreaterThanOrEqual(streamedTokens - 2);
    // Canceled: the partial output is not shown any more.
    expect((await getJob(id, user.headers)).partialOutput).toBeNull();
    process.stdout.write(
      `[streaming] cancel→abort ${abortMs} ms; tokens streamed after the cancel ${streamedTokens - tokensAtCancel}\n`,
    );
  });

  test(`a stalled stream (no chunk for 10 s) still learns of the cancel within ${CANCEL_CUT_MS / 1000} s`, async () => {
    // The progress write runs on a timer, not on chunks: without it this worker would wait
    // for a chunk that does not come until MODEL_TIMEOUT_MS.
    app.model.setChunkMs(10_000);
    const { user, id, message } = await queuedJob("free", "[fake:tokens:5000]");
    const delivery = app.deliver(message);
    await eventually(async () => (await app.jobRow(id)).status === "running", {
      what: "the job to run",
    });
    await eventually(() => app.model.calls() === 1, { what: "the model call to start" });
    const canceledAt = Date.now();
    await app.cancel(user, id);
    const res = await delivery;
    expect(Date.now() - canceledAt).toBeLessThan(CANCEL_CUT_MS);
    expect(await outcomeOf(res)).toBe("aborted");
    expect(app.model.stats().streamedTokens).toBe(0);
  });
});

describe("a token plan holds the most and captures what the provider reported", () => {
  test("enqueue holds the prompt's UTF-8 bytes + 8 plus 2,048; success captures prompt + completion and releases the rest", async () => {
    const user = await app.newUser("team");
    const prompt = `Write a report ${randomUUID()}`;
    const res = await app.enqueue(user, prompt);
    expect(res.status).toBe(202);
    const { job, usage } = await res.json();
    const hold = Buffer.byteLength(prompt) + 8 + 2048;
    expect(hold - 2048).toBeGreaterThanOrEqual(await billedPrompt("gpt-4o-mini", prompt));
    expect(job).toMatchObject({ meter: "tokens", hold, captured: null });
    expect(usage).toMatchObject({ plan: "team", meter: "tokens", used: hold, limit: 2_000_000 });

    expect(await outcomeOf(await app.deliver(app.qstash.latestFor(job.id)))).toBe("completed");
    const reported = (await detailOf(job.id, "completed")).usage;
    expect(reported.source).toBe("provider");
    const captured = reported.prompt_tokens + reported.completion_tokens;
    const done = await getJob(job.id, user.headers);
    expect(done).toMatchObject({ status: "succeeded", hold, captured });
    expect(captured).toBeLessThan(hold);
    expect(await app.unitsUsed(user.id)).toBe(captured);
    const after = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
    expect(after).toMatchObject({ meter: "tokens", used: captured, held: 0 });
  });
});

describe("a running cancel charges the prompt as counted", () => {
  test("a team job canceled mid-stream pays the prompt's tokens and what streamed, not the byte bound", async () => {
    app.model.setChunkMs(50);
    const user = await app.newUser("team");
    // English: about 4 bytes a token, so the hold's bound is ~4x what the prompt costs.
    const prompt =
      `Write a long report about queues, refunds and bounded spend ${randomUUID()}. `.repeat(20);
    const id = await app.enqueueOk(user, `${prompt}[fake:tokens:5000]`);
    const delivery = app.deliver(app.qstash.latestFor(id));
    await eventually(async () => (await getJob(id, user.headers)).partialTokens > 0, {
      what: "a progress write",
      timeoutMs: 8_000,
    });
    const cancel = await app.cancel(user, id);
    expect(cancel.status).toBe(200);
    expect(await outcomeOf(await delivery)).toBe("aborted");
    const { rows } = await app.admin.query(
      "select captured, partial_tokens, hold from public.generation_jobs where id = $1",
      [id],
    );
    const row = rows[0];
    const billed = await billedPrompt("gpt-4o-mini", `${prompt}[fake:tokens:5000]`);
    const bound = Buffer.byteLength(`${prompt}[fake:tokens:5000]`) + 8;
    const chargedForPrompt = row.captured - row.partial_tokens;
    // The worker's count + the 8 of framing: at least what the provider bills, far below the bound.
    expect(chargedForPrompt).toBeGreaterThanOrEqual(billed);
    expect(chargedForPrompt).toBeLessThanOrEqual(billed + 8);
    expect(chargedForPrompt * 2).toBeLessThan(bound);
    process.stdout.write(
      `[streaming] running cancel charged the prompt ${chargedForPrompt} tokens (billed ${billed}, bound ${bound})\n`,
    );
  });
});

describe("counting cannot be beaten by the text", () => {
  test(`a stream containing <|im_start|> is still cut by a cancel within ${CANCEL_CUT_MS / 1000} s (the progress write never throws)`, async () => {
    app.model.setChunkMs(50);
    const { user, id, message } = await queuedJob("free", say("Say <|im_start|> and go on. ", 400));
    const delivery = app.deliver(message);
    await eventually(async () => (await getJob(id, user.headers)).partialTokens > 0, {
      what: "a progress write past the special token",
      timeoutMs: 8_000,
    });
    const canceledAt = Date.now();
    await app.cancel(user, id);
    const res = await delivery;
    const abortMs = Date.now() - canceledAt;
    expect(await outcomeOf(res)).toBe("aborted");
    expect(abortMs).toBeLessThan(CANCEL_CUT_MS);
    expect(app.logs.filter((l) => l.includes("progress_write_failed"))).toEqual([]);
    const usage = (await detailOf(id, "attempt_usage")).usage;
    expect(usage).toMatchObject({ source: "counted" });
    expect(usage.completion_tokens).toBeGreaterThan(0);
  });

  test("a timed-out stream containing special tokens still records what it consumed", async () => {
    // The timeout's usage is counted in the failure path: a count that throws there lost it.
    const { deps, workerDeps } = app.makeDeps({ MODEL_TIMEOUT_MS: "1500" });
    app.model.setChunkMs(50);
    const { id, message } = await queuedJob("team", say("<|endoftext|><|fim_prefix|> more ", 400));
    const res = await app.deliver(message, { handlers: app.handlersFor(deps, workerDeps) });
    expect(res.status).toBe(503);
    const released = await detailOf(id, "released");
    expect(released?.usage).toMatchObject({ source: "counted" });
    expect(released.usage.completion_tokens).toBeGreaterThan(0);
    expect(released.usage.prompt_tokens).toBeGreaterThan(0);
    const { rows } = await app.admin.query(
      "select consumed from public.generation_jobs where id = $1",
      [id],
    );
    expect(rows[0].consumed).toBe(released.usage.prompt_tokens + released.usage.completion_tokens);
  });

  test("on gpt-4-turbo (cl100k_base) a Tamil prompt's billed tokens stay within the hold", async () => {
    // cl100k_base makes about twice as many tokens of Tamil as o200k_base: a hold counted with
    // o200k_base was below what the provider bills.
    // gpt-4-turbo is past its shutdown date at the provider; the fake serves it for this test,
    // which is about its tokenizer, not its catalogue.
    app.model.setShutdownDate("gpt-4-turbo", null);
    const { deps, workerDeps } = app.makeDeps({ OPENAI_MODEL: "gpt-4-turbo" });
    const handlers = app.handlersFor(deps, workerDeps);
    const user = await app.newUser("team");
    const prompt = `${"தமிழ் மொழி இலக்கியம் ".repeat(40)}${randomUUID()}`;
    const res = await app.enqueue(user, prompt, {}, handlers);
    expect(res.status).toBe(202);
    const { job } = await res.json();
    expect(await outcomeOf(await app.deliver(app.qstash.latestFor(job.id), { handlers }))).toBe(
      "completed",
    );
    const reported = (await detailOf(job.id, "completed")).usage;
    expect(reported.prompt_tokens).toBe(await billedPrompt("gpt-4-turbo", prompt));
    expect(reported.prompt_tokens).toBeLessThanOrEqual(job.hold - 2048);
    const done = await getJob(job.id, user.headers);
    expect(done.captured).toBe(reported.prompt_tokens + reported.completion_tokens);
  });

  test("a provider usage above the hold pages on-call once (the clamp stays)", async () => {
    const { deps, workerDeps } = app.makeDeps({});
    const real = workerDeps.model;
    // The provider reports more than it could have billed (a broken bound).
    const inflated: Model = {
      generate: async (prompt, o) => {
        const g = await real.generate(prompt, o);
        return { ...g, usage: { ...g.usage, promptTokens: g.usage.promptTokens + 100_000 } };
      },
    };
    const handlers = app.handlersFor(deps, { ...workerDeps, model: inflated });
    const user = await app.newUser("team");
    for (let i = 0; i < 2; i++) {
      const id = await app.enqueueOk(user, `Write a report ${randomUUID()}`);
      const res = await app.deliver(app.qstash.latestFor(id), { handlers });
      expect(await outcomeOf(res)).toBe("completed");
      const done = await getJob(id, user.headers);
      expect(done.captured).toBe(done.hold);
    }
    expect(app.webhook.ofKind("usage_above_hold")).toHaveLength(1);
    const errors = app.logs.map((l) => JSON.parse(l)).filter((l) => l.event === "usage_above_hold");
    expect(errors.map((l) => l.level)).toEqual(["error", "error"]);
  });
});
