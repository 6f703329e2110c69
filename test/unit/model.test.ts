/**
 * The model port through the real SDK over HTTP against the fake model (dev/openai), once per API
 * (`OPENAI_API`): the same `Generation`, the same usage, and the same classification of every
 * failure, whether it comes before the stream (a 429, a 401 …), inside it (an `error` event, a
 * `response.failed`, an error chunk) or as a cut connection.
 */
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { APIError, BadRequestError, PermissionDeniedError, RateLimitError } from "openai";
import { get_encoding } from "tiktoken";
import { beforeEach, describe, expect, test } from "vitest";
import {
  classifyModelError,
  createModel,
  type GenerateOptions,
  type ModelApi,
  ModelCallError,
  ModelOutputError,
  type OutputFormat,
  retryAfterSeconds,
  usageOfFailure,
} from "../../lib/model.ts";
import { useFakeOpenAI } from "../support/fake-openai.ts";
import { freePort } from "../support/ports.ts";

// The catalogue as of the day these tests were written: gpt-4o-mini, which most of them call,
// shuts down on 2027-01-14, and a fake on today's clock would answer it 404 from then on.
const fake = useFakeOpenAI({ now: () => new Date("2026-12-02T12:00:00Z") });
beforeEach(() => fake.reset());

const APIS: ModelApi[] = ["responses", "chat_completions"];

/** A strict schema with what an extraction meets: nesting, enums, bounds, anyOf, a recursive $ref. */
const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 40 },
    age: { anyOf: [{ type: "integer", minimum: 0, maximum: 150 }, { type: "null" }] },
    score: { type: "number", exclusiveMinimum: 0, maximum: 1 },
    verified: { type: "boolean" },
    kind: { type: "string", enum: ["person", "company"] },
    since: { type: "string", format: "date" },
    tags: { type: "array", items: { type: "string" }, minItems: 2, maxItems: 3 },
    nothing: { type: "null" },
    address: {
      type: "object",
      properties: { city: { type: ["string", "null"] }, zip: { type: "string" } },
      required: ["city", "zip"],
      additionalProperties: false,
    },
    tree: { $ref: "#/$defs/node" },
  },
  required: [
    "name",
    "age",
    "score",
    "verified",
    "kind",
    "since",
    "tags",
    "nothing",
    "address",
    "tree",
  ],
  additionalProperties: false,
  $defs: {
    node: {
      type: "object",
      properties: {
        label: { type: "string" },
        children: { type: "array", items: { $ref: "#/$defs/node" } },
      },
      required: ["label", "children"],
      additionalProperties: false,
    },
  },
};
const FORMAT: OutputFormat = {
  type: "json_schema",
  name: "extraction",
  schema: SCHEMA,
  strict: true,
};
const ajv = addFormats.default(new Ajv2020({ allErrors: true }));
const conforms = ajv.compile(SCHEMA);
const o200k = get_encoding("o200k_base");
const tokens = (text: string) => o200k.encode_ordinary(text).length;

/** A refusal: the user's fault, with the usage the provider reported (it billed the call). */
function expectRefusedBilled(err: unknown) {
  expect(classifyModelError(err)).toEqual({
    kind: "refused",
    status: 200,
    message: "the model refused the request",
  });
  expect(usageOfFailure(err)).toMatchObject({ source: "provider" });
}

describe.each(APIS)("the model port on %s", (api) => {
  const model = (
    o: { timeoutMs?: number; baseURL?: string; apiKey?: string; model?: string } = {},
  ) =>
    createModel({
      apiKey: o.apiKey ?? "sk-test-key-000000",
      baseURL: o.baseURL ?? fake.url,
      model: o.model ?? "gpt-4o-mini",
      api,
      timeoutMs: o.timeoutMs ?? 5_000,
    });
  const wire = api === "responses" ? "responses" : "chat";

  /** What a model call throws. */
  const failure = (prompt: string, o: Partial<GenerateOptions> = {}, m = model()) =>
    m.generate(prompt, { maxOutputTokens: 64, ...o }).then(
      () => expect.unreachable("the call should have failed"),
      (err: unknown) => err,
    );

  test("streams the text; the usage is the provider's; one request, no SDK retry", async () => {
    const texts: string[] = [];
    const result = await model().generate("Write a haiku about queues", {
      maxOutputTokens: 64,
      onText: (t) => texts.push(t),
    });
    expect(result.text).toContain("Write a haiku about queues");
    expect(texts.at(-1)).toBe(result.text);
    expect(result.finishReason).toBe("stop");
    const [seen] = fake.stats().requests;
    expect(fake.stats().calls).toBe(1);
    expect(seen).toMatchObject({ api: wire, stream: true, maxCompletionTokens: 64 });
    expect(result.usage).toEqual({
      promptTokens: expect.any(Number),
      completionTokens: seen?.completionTokens,
      reasoningTokens: 0,
      cachedTokens: 0,
      source: "provider",
    });
    expect(result.serviceTier).toBe("default");
  });

  test("on a reasoning model (gpt-5.4-mini): its default reasoning, cached input and the tier that served it are the provider's", async () => {
    const m = model({ model: "gpt-5.4-mini" });
    const flex = await m.generate("[fake:cached:4] hi", {
      maxOutputTokens: 256,
      serviceTier: "flex",
    });
    const [bill] = fake.stats().requests;
    expect(flex.serviceTier).toBe("flex");
    expect(flex.usage).toEqual({
      promptTokens: bill?.promptTokens,
      completionTokens: bill?.outputTokens,
      reasoningTokens: 64,
      cachedTokens: 4,
      source: "provider",
    });
    expect(bill?.outputTokens).toBe((bill?.completionTokens ?? 0) + 64);
    // Flex asked, the default tier served: the call says what served it.
    const other = await m.generate("[fake:served_tier:default] hi", {
      maxOutputTokens: 256,
      serviceTier: "flex",
    });
    expect(other.serviceTier).toBe("default");
  });

  test("the tier and the safety identifier are sent when given, and only then", async () => {
    await model({ model: "gpt-5.4-mini" }).generate("hi", {
      maxOutputTokens: 256,
      serviceTier: "flex",
      safetyIdentifier: "u_4f2a",
    });
    await model().generate("hi", { maxOutputTokens: 64 });
    expect(fake.stats().requests).toMatchObject([
      { serviceTier: "flex", safetyIdentifier: "u_4f2a" },
      { serviceTier: null, safetyIdentifier: null },
    ]);
  });

  test("the output bound ends the answer with finish reason length, the text kept", async () => {
    const result = await model().generate("[fake:tokens:500] go on", { maxOutputTokens: 16 });
    expect(result.finishReason).toBe("length");
    expect(result.usage).toMatchObject({ completionTokens: 16, source: "provider" });
  });

  test("a reasoning model's silent start: onThinking before any text, reasoning billed as output", async () => {
    const events: string[] = [];
    const result = await model().generate("[fake:reasoning:200:300] think", {
      maxOutputTokens: 1_000,
      onThinking: (n) => events.push(`thinking ${n}`),
      onText: () => events.push("text"),
    });
    const firstText = events.indexOf("text");
    expect(firstText).toBeGreaterThan(0);
    expect(events.slice(firstText).every((e) => e === "text")).toBe(true);
    const [seen] = fake.stats().requests;
    expect(seen?.reasoningTokens).toBe(200);
    expect(result.usage).toEqual({
      promptTokens: expect.any(Number),
      completionTokens: (seen?.completionTokens ?? 0) + 200,
      reasoningTokens: 200,
      cachedTokens: 0,
      source: "provider",
    });
  });

  test("a refusal is a ModelOutputError, refused, with the usage the provider billed", async () => {
    const err = await failure("[fake:refuse] do something bad");
    expect((err as ModelCallError).cause).toBeInstanceOf(ModelOutputError);
    expectRefusedBilled(err);
  });

  test("a server that holds the connection open after the last event: the call ends at that event", async () => {
    const started = Date.now();
    const result = await model({ timeoutMs: 3_000 }).generate("[fake:hold_open] hi", {
      maxOutputTokens: 64,
    });
    expect(result).toMatchObject({ finishReason: "stop", usage: { source: "provider" } });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  test("no text at all is refused", async () => {
    expect(classifyModelError(await failure('[fake:say:""]'))).toMatchObject({
      kind: "refused",
      message: "the model returned no text",
    });
  });

  describe("structured output and instructions", () => {
    const INSTRUCTIONS =
      "Extract from the user's text the data the schema describes; use null where the text says nothing.";
    /**
     * The fake's record of the call with this output bound: a stream's record lands just after
     * its last event (so an earlier test's may land after the reset, hence the bound as its key).
     */
    const recorded = async (bound: number) => {
      const deadline = Date.now() + 2_000;
      for (;;) {
        const found = fake.stats().requests.find((r) => r.maxCompletionTokens === bound);
        if (found || Date.now() > deadline) return found;
        await new Promise((r) => setTimeout(r, 10));
      }
    };

    test("a format call answers JSON that parses and conforms to the schema", async () => {
      const result = await model().generate("Ada Lovelace, 36, of London", {
        maxOutputTokens: 1_001,
        instructions: INSTRUCTIONS,
        format: FORMAT,
      });
      expect(result.finishReason).toBe("stop");
      const value: unknown = JSON.parse(result.text);
      expect(conforms(value), JSON.stringify(conforms.errors)).toBe(true);
      expect(await recorded(1_001)).toMatchObject({
        api: wire,
        stream: true,
        instructions: true,
        format: "extraction",
      });
    });

    test("instructions are billed as input: the prompt tokens grow by the instructions' system message", async () => {
      const plain = await model().generate("Ada Lovelace", { maxOutputTokens: 65 });
      const told = await model().generate("Ada Lovelace", {
        maxOutputTokens: 66,
        instructions: INSTRUCTIONS,
      });
      // OpenAI's chat-message count: 3 per message plus its role and content.
      expect(told.usage.promptTokens - plain.usage.promptTokens).toBe(
        3 + tokens("system") + tokens(INSTRUCTIONS),
      );
      expect(await recorded(65)).toMatchObject({ instructions: false, format: null });
      expect(await recorded(66)).toMatchObject({
        instructions: true,
        format: null,
        promptTokens: told.usage.promptTokens,
      });
    });

    test("a call cut short counts the instructions as input with the prompt", async () => {
      const cut = (o: Partial<GenerateOptions>) =>
        failure("[fake:stream_cut:2] Ada Lovelace", o).then(usageOfFailure);
      const plain = await cut({});
      const told = await cut({ instructions: INSTRUCTIONS });
      expect(plain).toMatchObject({ source: "counted" });
      expect(told).toMatchObject({ source: "counted" });
      expect((told?.promptTokens ?? 0) - (plain?.promptTokens ?? 0)).toBe(tokens(INSTRUCTIONS));
    });

    test("[fake:json_invalid]: well-formed JSON that breaks the schema comes back as text (the kind judges it)", async () => {
      const result = await model().generate("[fake:json_invalid] Ada Lovelace", {
        maxOutputTokens: 1_000,
        format: FORMAT,
      });
      expect(result.finishReason).toBe("stop");
      expect(conforms(JSON.parse(result.text))).toBe(false);
    });

    test("a refusal with a format is refused, billed as the provider reports", async () => {
      const err = await failure("[fake:refuse] Ada Lovelace", { format: FORMAT });
      expectRefusedBilled(err);
    });

    test("the output bound cuts the JSON: finish reason length, a prefix that does not parse", async () => {
      const whole = await model().generate("[fake:tokens:300] Ada Lovelace", {
        maxOutputTokens: 1_000,
        format: FORMAT,
      });
      const cut = await model().generate("[fake:tokens:300] Ada Lovelace", {
        maxOutputTokens: 40,
        format: FORMAT,
      });
      expect(whole.finishReason).toBe("stop");
      expect(conforms(JSON.parse(whole.text))).toBe(true);
      expect(cut.finishReason).toBe("length");
      expect(cut.usage).toMatchObject({ completionTokens: 40, source: "provider" });
      expect(whole.text.startsWith(cut.text)).toBe(true);
      expect(() => JSON.parse(cut.text)).toThrow(SyntaxError);
    });

    test("a schema outside strict mode: the provider's 400 is refused (the user's schema), nothing consumed", async () => {
      const open = { ...SCHEMA, additionalProperties: true };
      const err = await failure("Ada Lovelace", { format: { ...FORMAT, schema: open } });
      expect(classifyModelError(err)).toEqual({
        kind: "refused",
        status: 400,
        message:
          "400 Invalid schema for response_format 'extraction': In context=(), 'additionalProperties' is required to be supplied and to be false.",
      });
      expect(usageOfFailure(err)).toMatchObject({ promptTokens: 0, completionTokens: 0 });
    });
  });

  describe("before the stream", () => {
    test("429 rate_limit_exceeded → provider_quota with the provider's wait; nothing consumed", async () => {
      fake.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 7 });
      const err = await failure("hi");
      expect(classifyModelError(err)).toEqual({
        kind: "provider_quota",
        reason: "rate_limit_exceeded",
        retryAfterSeconds: 7,
      });
      expect(usageOfFailure(err)).toEqual({
        promptTokens: 0,
        completionTokens: 0,
        reasoningTokens: 0,
        source: "counted",
      });
      expect(fake.calls()).toBe(1); // maxRetries: 0 — the queue owns retries
    });

    test("429 insufficient_quota → provider_quota / insufficient_quota", async () => {
      fake.failNext("insufficient_quota");
      expect(classifyModelError(await failure("hi"))).toEqual({
        kind: "provider_quota",
        reason: "insufficient_quota",
        retryAfterSeconds: null,
      });
    });

    test("flex out of capacity: 429 Resource Unavailable → capacity_unavailable, never a rate limit", async () => {
      fake.setFlexCapacity(false);
      const err = await failure("hi", { serviceTier: "flex" }, model({ model: "gpt-5.4-mini" }));
      expect((err as ModelCallError).cause).toBeInstanceOf(RateLimitError);
      expect(classifyModelError(err)).toEqual({
        kind: "capacity_unavailable",
        retryAfterSeconds: null,
      });
      // The default tier is served meanwhile: it was flex capacity, not our limit.
      expect((await model().generate("hi", { maxOutputTokens: 64 })).finishReason).toBe("stop");
    });

    test("a 500 → transient with its status", async () => {
      fake.failNext("server_error");
      expect(classifyModelError(await failure("hi"))).toMatchObject({
        kind: "transient",
        status: 500,
      });
    });

    test("no answer in time → transient, no status", async () => {
      fake.failNext("slow", 1, { delayMs: 30_000 });
      const err = await failure("hi", {}, model({ timeoutMs: 200 }));
      expect(classifyModelError(err)).toEqual({
        kind: "transient",
        status: null,
        message: expect.stringMatching(/timed out/i),
      });
    });

    test("connection refused → transient, no status", async () => {
      const port = await freePort();
      const err = await failure("hi", {}, model({ baseURL: `http://127.0.0.1:${port}/v1` }));
      expect(classifyModelError(err)).toMatchObject({ kind: "transient", status: null });
    });

    test("400 context_length_exceeded → refused (the prompt's fault)", async () => {
      fake.failNext("bad_request");
      expect(classifyModelError(await failure("hi"))).toMatchObject({
        kind: "refused",
        status: 400,
        message: expect.stringContaining("maximum context length"),
      });
    });

    test.each([
      ["401 invalid_api_key", "invalid_api_key", 401, "api_key"],
      [
        "403 unsupported_country_region_territory",
        "unsupported_country_region_territory",
        403,
        "region",
      ],
      ["404 model_not_found", "model_not_found", 404, "model"],
      ["400 unsupported_parameter on our bound", "unsupported_parameter", 400, "request"],
    ] as const)("%s → operator_fault, no secret in it", async (_what, kind, status, fault) => {
      fake.failNext(kind);
      const err = await failure("hi", {}, model({ apiKey: "sk-proj-abcdefghijklmnop1234" }));
      const classified = classifyModelError(err);
      expect(classified).toMatchObject({ kind: "operator_fault", fault, status });
      expect(JSON.stringify(classified)).not.toContain("sk-proj");
      expect(JSON.stringify(classified)).not.toContain("1234");
    });

    test("404 Invalid URL (OPENAI_BASE_URL points at the wrong path) → operator_fault model", async () => {
      const err = await failure("hi", {}, model({ baseURL: `${fake.url}/nope` }));
      expect(classifyModelError(err)).toMatchObject({
        kind: "operator_fault",
        fault: "model",
        status: 404,
      });
    });
  });

  describe("inside the stream", () => {
    const texts: string[] = [];
    const streamed = { onText: (t: string) => texts.push(t) };
    beforeEach(() => {
      texts.length = 0;
    });

    test.each(["stream_error", "stream_failed"] as const)(
      "%s after 3 tokens → transient; the text so far was seen and its tokens counted",
      async (kind) => {
        fake.failNext(kind, 1, { afterTokens: 3 });
        const err = await failure("hello there", streamed);
        expect(classifyModelError(err)).toMatchObject({ kind: "transient", status: null });
        expect(texts.length).toBe(3);
        expect(usageOfFailure(err)?.completionTokens).toBeGreaterThanOrEqual(3);
      },
    );

    test("a failure inside the stream with a quota code → provider_quota; a prompt's code → refused", async () => {
      fake.failNext("stream_failed", 1, { afterTokens: 0, code: "rate_limit_exceeded" });
      expect(classifyModelError(await failure("hi"))).toMatchObject({
        kind: "provider_quota",
        reason: "rate_limit_exceeded",
      });
      fake.failNext("stream_error", 1, { afterTokens: 0, code: "invalid_prompt" });
      expect(classifyModelError(await failure("hi"))).toMatchObject({
        kind: "refused",
        status: 200,
      });
    });

    test.each([
      [
        "insufficient_quota",
        "insufficient_quota",
        { kind: "provider_quota", reason: "insufficient_quota", retryAfterSeconds: null },
        { kind: "provider_quota", reason: "insufficient_quota", retryAfterSeconds: null },
      ],
      [
        "credit_balance_exhausted",
        "insufficient_quota",
        { kind: "provider_quota", reason: "insufficient_quota", retryAfterSeconds: null },
        { kind: "provider_quota", reason: "insufficient_quota", retryAfterSeconds: null },
      ],
      [
        "rate_limit_exceeded",
        "rate_limit_exceeded",
        // Over HTTP the wait is the retry-after header (7 s); in the stream, the message's 150 ms.
        { kind: "provider_quota", reason: "rate_limit_exceeded", retryAfterSeconds: 7 },
        { kind: "provider_quota", reason: "rate_limit_exceeded", retryAfterSeconds: 1 },
      ],
      [
        "context_length_exceeded",
        "bad_request",
        { kind: "refused", status: 400, message: expect.stringContaining("maximum context") },
        { kind: "refused", status: 200, message: expect.stringContaining("maximum context") },
      ],
    ] as const)(
      "[fake:stream_error:%s]: a 200 whose next event is the error, classified as its HTTP twin",
      async (code, httpKind, overHttp, inStream) => {
        fake.failNext(httpKind, 1, { retryAfterSeconds: 7 });
        expect(classifyModelError(await failure("hi"))).toEqual(overHttp);
        const err = await failure(`[fake:stream_error:${code}] hi`, streamed);
        expect(classifyModelError(err)).toEqual(inStream);
        expect(texts).toEqual([]);
        expect(fake.stats().requests.at(-1)).toMatchObject({
          finishReason: "stream_error",
          outputTokens: 0,
        });
      },
    );

    test("an in-stream invalid_request_error about our parameter is an operator fault, as over HTTP", () => {
      const inStream = new APIError(
        undefined,
        {
          type: "invalid_request_error",
          code: null,
          message: "Unsupported value: 'service_tier' does not support 'flex' with this model.",
          param: "service_tier",
        },
        undefined,
        undefined,
      );
      expect(classifyModelError(inStream)).toMatchObject({
        kind: "operator_fault",
        fault: "request",
        status: 200,
      });
    });

    test("a cut connection → transient, what streamed counted", async () => {
      fake.failNext("stream_cut", 1, { afterTokens: 3 });
      const err = await failure("hello there", streamed);
      expect(classifyModelError(err)).toMatchObject({ kind: "transient", status: null });
      expect(usageOfFailure(err)).toMatchObject({ source: "counted" });
      expect(usageOfFailure(err)?.completionTokens).toBeGreaterThanOrEqual(3);
    });

    test("a stalled stream times out (the deadline covers the stream), what streamed counted", async () => {
      const started = Date.now();
      const err = await failure("[fake:chunk_ms:5000] hello", {}, model({ timeoutMs: 500 }));
      expect(Date.now() - started).toBeLessThan(3_000);
      expect(classifyModelError(err)).toMatchObject({ kind: "transient", status: null });
      expect(usageOfFailure(err)).toMatchObject({ completionTokens: 0, source: "counted" });
      expect(usageOfFailure(err)?.promptTokens).toBeGreaterThan(0);
    });

    test("the caller's abort cuts the stream at once: the fake sees the client leave, what streamed is counted", async () => {
      const controller = new AbortController();
      const err = await failure("[fake:tokens:2000] [fake:chunk_ms:20] long", {
        signal: controller.signal,
        onText: (t) => {
          texts.push(t);
          if (texts.length === 5) controller.abort();
        },
      });
      expect(err).toBeInstanceOf(ModelCallError);
      expect(classifyModelError(err)).toMatchObject({ kind: "transient" });
      expect(usageOfFailure(err)).toMatchObject({ source: "counted" });
      expect(usageOfFailure(err)?.completionTokens).toBeGreaterThanOrEqual(5);
      const deadline = Date.now() + 2_000;
      while (fake.stats().requests.length === 0 && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 20));
      expect(fake.stats().requests[0]).toMatchObject({ finishReason: "client_closed" });
      expect(fake.stats().streamedTokens).toBeLessThan(50);
    });
  });
});

describe("classifyModelError, the cases the fake does not answer", () => {
  const headers = new Headers({ "x-request-id": "req_1" });
  const rateLimit = (error: Record<string, unknown>) =>
    new RateLimitError(429, error, undefined, headers);
  const usage = { promptTokens: 0, completionTokens: 0, source: "counted" as const };

  test("a flex 429 without the words: capacity_unavailable on flex, a rate limit on the default tier", () => {
    const body = { message: "Please try again later.", type: "invalid_request_error", code: null };
    expect(classifyModelError(new ModelCallError(rateLimit(body), usage, "flex"))).toEqual({
      kind: "capacity_unavailable",
      retryAfterSeconds: null,
    });
    expect(classifyModelError(new ModelCallError(rateLimit(body), usage))).toMatchObject({
      kind: "provider_quota",
      reason: "rate_limit_exceeded",
    });
  });

  test("a real rate limit on a flex request is still a rate limit (our limits are shared)", () => {
    const body = { message: "Rate limit reached", type: "requests", code: "rate_limit_exceeded" };
    expect(classifyModelError(new ModelCallError(rateLimit(body), usage, "flex"))).toMatchObject({
      kind: "provider_quota",
      reason: "rate_limit_exceeded",
    });
  });

  test("403 model_not_found (the project may not use the model) → operator_fault model", () => {
    const err = new PermissionDeniedError(
      403,
      {
        message: "Project `proj_abc` does not have access to model `gpt-4o-mini`",
        code: "model_not_found",
      },
      undefined,
      headers,
    );
    expect(classifyModelError(err)).toMatchObject({ kind: "operator_fault", fault: "model" });
  });

  test("a 400 on the output format: a model without Structured Outputs is ours (operator_fault), a schema the user's (refused)", () => {
    const badRequest = (error: Record<string, unknown>) =>
      new BadRequestError(400, error, undefined, headers);
    const unsupported = badRequest({
      message:
        "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
      type: "invalid_request_error",
      param: "response_format",
      code: null,
    });
    expect(classifyModelError(unsupported)).toMatchObject({
      kind: "operator_fault",
      fault: "request",
      status: 400,
    });
    const schemaOnChat = badRequest({
      message:
        "Invalid schema for response_format 'extraction': In context=(), 'additionalProperties' is required to be supplied and to be false.",
      type: "invalid_request_error",
      param: "response_format",
      code: null,
    });
    const schemaOnResponses = badRequest({
      message:
        "Invalid schema for response_format 'extraction': In context=(), 'additionalProperties' is required to be supplied and to be false.",
      type: "invalid_request_error",
      param: "text.format.schema",
      code: "invalid_json_schema",
    });
    expect(classifyModelError(schemaOnChat)).toMatchObject({ kind: "refused", status: 400 });
    expect(classifyModelError(schemaOnResponses)).toMatchObject({ kind: "refused", status: 400 });
  });

  test("anything unknown is transient", () => {
    expect(classifyModelError(new TypeError("boom"))).toEqual({
      kind: "transient",
      status: null,
      message: "boom",
    });
  });
});

describe("retryAfterSeconds", () => {
  test("prefers retry-after-ms, then seconds, then a date; garbage is null", () => {
    const now = new Date("2026-03-01T12:00:00Z");
    expect(
      retryAfterSeconds(new Headers({ "retry-after-ms": "500", "retry-after": "30" }), now),
    ).toBe(1);
    expect(retryAfterSeconds(new Headers({ "retry-after-ms": "1276" }), now)).toBe(2);
    expect(retryAfterSeconds(new Headers({ "retry-after": "30" }), now)).toBe(30);
    expect(
      retryAfterSeconds(new Headers({ "retry-after": "Sun, 01 Mar 2026 12:01:30 GMT" }), now),
    ).toBe(90);
    expect(
      retryAfterSeconds(new Headers({ "retry-after": "Sun, 01 Mar 2026 11:00:00 GMT" }), now),
    ).toBe(0);
    expect(retryAfterSeconds(new Headers({ "retry-after": "soon" }), now)).toBeNull();
    expect(retryAfterSeconds(undefined, now)).toBeNull();
  });
});
