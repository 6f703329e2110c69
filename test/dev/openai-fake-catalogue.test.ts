/**
 * The fake model as OpenAI is in December 2026, through the openai SDK: its own catalogue
 * (shutdown dates, `GET /v1/models`, retired models), flex per model and the tier that served a
 * call, reasoning by default and its bill, cached input, the `max_output_tokens` minimum, and
 * errors inside a stream nested under `error` as OpenAI sends them.
 */
import OpenAI, { APIError, BadRequestError, NotFoundError } from "openai";
import { afterAll, beforeEach, describe, expect, test } from "vitest";
import { parseShutdownDates } from "../../dev/openai/catalogue.ts";
import { startFakeOpenAI } from "../../dev/openai/index.ts";
import { useFakeOpenAI } from "../support/fake-openai.ts";
import { freePort } from "../support/ports.ts";

const fake = useFakeOpenAI();
beforeEach(() => fake.reset());

const openai = (baseURL = fake.url) => new OpenAI({ apiKey: "test", baseURL, maxRetries: 0 });
const failureOf = (promise: Promise<unknown>) =>
  promise.then(
    () => expect.unreachable("the request should have failed"),
    (error: unknown) => error,
  );
/** A streamed Responses call drained: its event types and its last event. */
async function streamed(model: string, input: string, extra: Record<string, unknown> = {}) {
  const types: string[] = [];
  let last: OpenAI.Responses.ResponseStreamEvent | undefined;
  const events = await openai().responses.create({
    model,
    input,
    stream: true,
    store: false,
    ...extra,
  });
  for await (const e of events) {
    types.push(e.type);
    last = e;
  }
  return { types, last };
}
const completed = (e: OpenAI.Responses.ResponseStreamEvent | undefined) =>
  e?.type === "response.completed" || e?.type === "response.incomplete" ? e.response : undefined;
const day = (offset: number) =>
  new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);

/** The raw SSE text of a streamed call. */
async function rawStream(path: "responses" | "chat/completions", body: Record<string, unknown>) {
  const res = await fetch(`${fake.url}/${path}`, {
    method: "POST",
    headers: { authorization: "Bearer test", "content-type": "application/json" },
    body: JSON.stringify({ stream: true, ...body }),
  });
  expect(res.status).toBe(200);
  return res.text();
}

describe("the catalogue: models, shutdown dates, retired models", () => {
  test("GET /v1/models lists the served models with their shutdown dates; retired ones are gone", async () => {
    const listed = [];
    for await (const m of openai().models.list()) listed.push(m);
    const byId = new Map(listed.map((m) => [m.id, m]));
    expect(byId.get("gpt-5.4-mini")).toEqual({
      id: "gpt-5.4-mini",
      object: "model",
      created: expect.any(Number),
      owned_by: "system",
      shutdown_date: null,
    });
    expect(byId.get("gpt-4o-mini")?.shutdown_date).toBe("2027-01-14");
    expect(byId.get("gpt-5")?.shutdown_date).toBe("2026-12-11");
    for (const gone of ["gpt-4-turbo", "gpt-4", "gpt-3.5-turbo", "o1", "o3-mini", "o4-mini"])
      expect(byId.has(gone), gone).toBe(false);
    expect(await openai().models.retrieve("gpt-5.5")).toMatchObject({
      id: "gpt-5.5",
      object: "model",
      shutdown_date: null,
    });
  });

  test("a retired model or an unknown one is 404 model_not_found on every endpoint; nothing served", async () => {
    for (const call of [
      () => openai().models.retrieve("gpt-4-turbo"),
      () => openai().responses.create({ model: "gpt-4-turbo", input: "x" }),
      () =>
        openai().chat.completions.create({
          model: "o3-mini",
          messages: [{ role: "user", content: "x" }],
        }),
    ]) {
      const error = await failureOf(call());
      expect(error).toBeInstanceOf(NotFoundError);
      expect(error).toMatchObject({ status: 404, code: "model_not_found" });
      expect((error as Error).message).toMatch(/has been deprecated/);
    }
    const unknown = await failureOf(openai().responses.create({ model: "gpt-9", input: "x" }));
    expect(unknown).toMatchObject({ status: 404, code: "model_not_found" });
    expect((unknown as Error).message).toMatch(/does not exist or you do not have access/);
    expect(fake.stats().requests).toEqual([]);
  });

  test("a test moves a shutdown date: 20 days out it is listed and served, past it is 404; reset restores it", async () => {
    fake.setShutdownDate("gpt-5.4-mini", day(20));
    expect((await openai().models.retrieve("gpt-5.4-mini")).shutdown_date).toBe(day(20));
    expect((await streamed("gpt-5.4-mini", "hi")).types.at(-1)).toBe("response.completed");
    // Through the control API, as another process (the dev stack) would.
    const control = fake.url.replace(/\/v1$/, "/__fake");
    const moved = await fetch(`${control}/models`, {
      method: "POST",
      body: JSON.stringify({ id: "gpt-5.4-mini", shutdownDate: day(-1) }),
    });
    expect(await moved.json()).toMatchObject({ id: "gpt-5.4-mini", shutdown_date: day(-1) });
    expect(await failureOf(streamed("gpt-5.4-mini", "hi"))).toMatchObject({
      status: 404,
      code: "model_not_found",
    });
    fake.reset();
    expect((await openai().models.retrieve("gpt-5.4-mini")).shutdown_date).toBeNull();
    expect(() => fake.setShutdownDate("gpt-5.4-mini", "soon")).toThrow(/YYYY-MM-DD/);
  });

  describe("a fake started with its own dates and clock", () => {
    let other: Awaited<ReturnType<typeof startFakeOpenAI>> | undefined;
    afterAll(() => other?.close());

    test("shutdownDates and now: gpt-4o-mini is gone on its shutdown day, gpt-4-turbo kept alive", async () => {
      other = await startFakeOpenAI({
        port: await freePort(),
        shutdownDates: { "gpt-4-turbo": null },
        now: () => new Date("2027-01-14T00:00:01Z"),
      });
      const client = openai(other.url);
      expect(await failureOf(client.models.retrieve("gpt-4o-mini"))).toMatchObject({
        status: 404,
      });
      const turbo = await client.responses.create({ model: "gpt-4-turbo", input: "hi" });
      expect(turbo.status).toBe("completed");
    });
  });

  test("FAKE_OPENAI_SHUTDOWN_DATES: model=date pairs, an empty date is none announced", () => {
    expect(parseShutdownDates("gpt-4o-mini=2026-12-22, gpt-4-turbo=")).toEqual({
      "gpt-4o-mini": "2026-12-22",
      "gpt-4-turbo": null,
    });
    expect(parseShutdownDates(undefined)).toEqual({});
    expect(() => parseShutdownDates("gpt-4o-mini")).toThrow(/bad pair/);
    expect(() => parseShutdownDates("gpt-4o-mini=next week")).toThrow(/YYYY-MM-DD/);
  });
});

describe("tiers: flex per model, the tier that served the call", () => {
  test("flex on a model without it is a 400 on service_tier, no fallback; on one with it, flex serves", async () => {
    for (const model of ["gpt-4o-mini", "gpt-5.5"]) {
      const error = await failureOf(
        openai().responses.create({ model, input: "x", service_tier: "flex" }),
      );
      expect(error).toBeInstanceOf(BadRequestError);
      expect(error).toMatchObject({
        status: 400,
        type: "invalid_request_error",
        param: "service_tier",
      });
    }
    const chatError = await failureOf(
      openai().chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "x" }],
        service_tier: "flex",
      }),
    );
    expect(chatError).toMatchObject({ status: 400, param: "service_tier" });
    expect(fake.stats().requests).toEqual([]);
    const nano = await streamed("gpt-5.4-nano", "x", { service_tier: "flex" });
    expect(completed(nano.last)?.service_tier).toBe("flex");
  });

  test("priority where the model has it; the default tier where it lacks it; auto is the default", async () => {
    const tier = async (model: string, service_tier: string) =>
      completed((await streamed(model, "x", { service_tier })).last)?.service_tier;
    expect(await tier("gpt-5.4", "priority")).toBe("priority");
    expect(await tier("gpt-5.4-nano", "priority")).toBe("default");
    expect(await tier("gpt-5.4-mini", "auto")).toBe("default");
    expect(fake.stats().requests.map((r) => [r.serviceTier, r.servedTier])).toEqual([
      ["priority", "priority"],
      ["priority", "default"],
      ["auto", "default"],
    ]);
  });

  test("[fake:served_tier:default]: flex asked, the default tier served, and every answer says so", async () => {
    const asked = { service_tier: "flex" } as const;
    const stream = await streamed("gpt-5.4-mini", "x [fake:served_tier:default]", asked);
    expect(completed(stream.last)?.service_tier).toBe("default");
    const whole = await openai().responses.create({
      model: "gpt-5.4-mini",
      input: "x [fake:served_tier:default]",
      ...asked,
    });
    expect(whole.service_tier).toBe("default");
    const chunks = [];
    for await (const c of await openai().chat.completions.create({
      model: "gpt-5.4-mini",
      messages: [{ role: "user", content: "x [fake:served_tier:default]" }],
      stream: true,
      stream_options: { include_usage: true },
      ...asked,
    }))
      chunks.push(c);
    expect(chunks.at(-1)?.service_tier).toBe("default");
    expect(fake.stats().requests.map((r) => [r.serviceTier, r.servedTier])).toEqual([
      ["flex", "default"],
      ["flex", "default"],
      ["flex", "default"],
    ]);
  });
});

describe("reasoning by default, and the bill", () => {
  test("a reasoning model reasons before its text: a reasoning item, reasoning tokens inside output_tokens", async () => {
    const { types, last } = await streamed("gpt-5.4-mini", "hi", { max_output_tokens: 512 });
    expect(types.indexOf("response.output_item.added")).toBeLessThan(
      types.indexOf("response.output_text.delta"),
    );
    const usage = completed(last)?.usage;
    const [bill] = fake.stats().requests;
    expect(usage?.output_tokens_details.reasoning_tokens).toBe(64);
    expect(usage?.output_tokens).toBe((bill?.completionTokens ?? 0) + 64);
    expect(bill).toMatchObject({
      model: "gpt-5.4-mini",
      reasoningTokens: 64,
      outputTokens: usage?.output_tokens,
    });
    expect(completed(last)?.reasoning?.effort).toBe("medium");
  });

  test("the effort sets the reasoning; none reasons not at all; gpt-4o-mini does not reason; the marker still rules", async () => {
    const reasoned = async (model: string, input: string, extra = {}) =>
      completed((await streamed(model, input, extra)).last)?.usage?.output_tokens_details
        .reasoning_tokens;
    expect(await reasoned("gpt-5.4-mini", "x", { reasoning: { effort: "low" } })).toBe(32);
    expect(await reasoned("gpt-5.4-mini", "x", { reasoning: { effort: "none" } })).toBe(0);
    expect(await reasoned("gpt-4o-mini", "x")).toBe(0);
    expect(await reasoned("gpt-5.4-mini", "x [fake:reasoning:200:20]")).toBe(200);
    expect(await reasoned("gpt-4o-mini", "x [fake:reasoning:30:10]")).toBe(30);
    const chat = await openai().chat.completions.create({
      model: "gpt-5.4-mini",
      messages: [{ role: "user", content: "x" }],
      reasoning_effort: "high",
    });
    expect(chat.usage?.completion_tokens_details?.reasoning_tokens).toBe(128);
  });

  test("the bound covers reasoning: 16 tokens are all reasoning, no text, incomplete; billed 16", async () => {
    const { types, last } = await streamed("gpt-5.4-mini", "hi", { max_output_tokens: 16 });
    expect(types).not.toContain("response.output_text.delta");
    expect(last?.type).toBe("response.incomplete");
    expect(completed(last)?.usage).toMatchObject({
      output_tokens: 16,
      output_tokens_details: { reasoning_tokens: 16 },
    });
    const whole = await openai().responses.create({
      model: "gpt-5.4-mini",
      input: "hi",
      max_output_tokens: 70,
    });
    expect(whole.status).toBe("incomplete");
    expect(whole.usage).toMatchObject({
      output_tokens: 70,
      output_tokens_details: { reasoning_tokens: 64 },
    });
    expect(fake.stats().requests.map((r) => r.outputTokens)).toEqual([16, 70]);
  });

  test("a stream cut after the reasoning reports no usage, yet the bill has the reasoning and the text", async () => {
    const seen: string[] = [];
    const thrown = await failureOf(
      (async () => {
        for await (const e of await openai().responses.create({
          model: "gpt-5.4-mini",
          input: "[fake:stream_cut:2] hi",
          stream: true,
        }))
          seen.push(e.type);
      })(),
    );
    expect(thrown).toBeInstanceOf(Error);
    expect(seen.filter((t) => t === "response.output_text.delta")).toHaveLength(2);
    expect(seen).not.toContain("response.completed");
    const deadline = Date.now() + 2_000;
    while (fake.stats().requests.length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(fake.stats().requests[0]).toMatchObject({
      finishReason: "stream_cut",
      completionTokens: 2,
      reasoningTokens: 64,
      outputTokens: 66,
    });
    expect(fake.stats().completionTokens).toBe(66);
  });
});

describe("cached input and the output bound's minimum", () => {
  test("[fake:cached:N]: cached tokens in the usage of both APIs, never more than the input", async () => {
    const r = await openai().responses.create({
      model: "gpt-5.4-mini",
      input: "x [fake:cached:5]",
    });
    expect(r.usage?.input_tokens_details.cached_tokens).toBe(5);
    const c = await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "x [fake:cached:5]" }],
    });
    expect(c.usage?.prompt_tokens_details?.cached_tokens).toBe(5);
    const { last } = await streamed("gpt-5.4-mini", "x [fake:cached:100000]");
    const usage = completed(last)?.usage;
    expect(usage?.input_tokens_details.cached_tokens).toBe(usage?.input_tokens);
    expect(fake.stats().requests.map((q) => q.cachedTokens)).toEqual([5, 5, usage?.input_tokens]);
  });

  test("max_output_tokens below 16 is OpenAI's 400 on the parameter; 16 is served; Chat has no such minimum", async () => {
    const error = await failureOf(
      openai().responses.create({ model: "gpt-5.4-mini", input: "x", max_output_tokens: 15 }),
    );
    expect(error).toBeInstanceOf(BadRequestError);
    expect(error).toMatchObject({
      status: 400,
      type: "invalid_request_error",
      param: "max_output_tokens",
      code: "integer_below_min_value",
      message:
        "400 Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 15 instead.",
    });
    const ok = await openai().responses.create({
      model: "gpt-4o-mini",
      input: "x",
      max_output_tokens: 16,
    });
    expect(ok.usage?.output_tokens).toBe(16);
    const chat = await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "x" }],
      max_completion_tokens: 5,
    });
    expect(chat.choices[0]?.finish_reason).toBe("length");
  });
});

describe("errors inside a stream, nested under error as OpenAI sends them", () => {
  test("Responses: 200, the response opens, then an error event with the HTTP error's type and code", async () => {
    const text = await rawStream("responses", {
      model: "gpt-5.4-mini",
      input: "[fake:stream_error:insufficient_quota] hi",
    });
    const events = text
      .split("\n\n")
      .filter(Boolean)
      .map((b) => JSON.parse(b.split("\n")[1]?.slice("data: ".length) ?? "null"));
    expect(events.map((e) => e.type)).toEqual([
      "response.created",
      "response.in_progress",
      "error",
    ]);
    expect(events[2]).toEqual({
      type: "error",
      sequence_number: 2,
      error: {
        type: "insufficient_quota",
        code: "insufficient_quota",
        message: expect.stringMatching(/^You exceeded your current quota/),
        param: null,
      },
    });
  });

  test.each([
    ["insufficient_quota", "insufficient_quota", null],
    ["rate_limit_exceeded", "tokens", null],
    ["context_length_exceeded", "invalid_request_error", "input"],
  ])(
    "through the SDK, [fake:stream_error:%s] is a status-less APIError of type %s",
    async (code, type, param) => {
      const error = await failureOf(streamed("gpt-5.4-mini", `[fake:stream_error:${code}] hi`));
      expect(error).toBeInstanceOf(APIError);
      expect(error).toMatchObject({ status: undefined, code, type, param });
      expect(fake.stats().requests.at(-1)).toMatchObject({
        finishReason: "stream_error",
        reasoningTokens: 0,
        outputTokens: 0,
      });
    },
  );

  test("a call that does not stream gets the same error over HTTP: a 429 for the quota, a 400 for the prompt", async () => {
    const quota = await failureOf(
      openai().responses.create({
        model: "gpt-5.4-mini",
        input: "[fake:stream_error:insufficient_quota] hi",
      }),
    );
    expect(quota).toMatchObject({ status: 429, code: "insufficient_quota" });
    const long = await failureOf(
      openai().responses.create({
        model: "gpt-5.4-mini",
        input: "[fake:stream_error:context_length_exceeded] hi",
      }),
    );
    expect(long).toMatchObject({ status: 400, code: "context_length_exceeded" });
  });

  test("Chat Completions: the role chunk, then a data: {error} chunk of the same shape", async () => {
    const text = await rawStream("chat/completions", {
      model: "gpt-5.4-mini",
      messages: [{ role: "user", content: "[fake:stream_error:rate_limit_exceeded] hi" }],
    });
    const chunks = text
      .split("\n\n")
      .filter(Boolean)
      .map((b) => JSON.parse(b.slice("data: ".length)));
    expect(chunks).toHaveLength(2);
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    expect(chunks[1]).toEqual({
      error: {
        type: "tokens",
        code: "rate_limit_exceeded",
        message: expect.stringMatching(/^Rate limit reached for gpt-5\.4-mini .* try again in/),
        param: null,
      },
    });
  });
});
