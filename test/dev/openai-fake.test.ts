import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import OpenAI, {
  APIConnectionTimeoutError,
  APIError,
  AuthenticationError,
  BadRequestError,
  type ClientOptions,
  InternalServerError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
} from "openai";
import { get_encoding } from "tiktoken";
import { describe, expect, test } from "vitest";
import { useFakeOpenAI } from "../support/fake-openai.ts";
import { object as strictObject } from "../support/schema-bombs.ts";

// The catalogue as of the day these tests were written: gpt-4o-mini, which most of them call,
// shuts down on 2027-01-14, and a fake on today's clock would answer it 404 from then on.
const fake = useFakeOpenAI({ now: () => new Date("2026-12-02T12:00:00Z") });

/** A client of the fake, SDK retries off; `options` overrides the key, the timeout, headers. */
const openai = (options: Pick<ClientOptions, "apiKey" | "timeout" | "defaultHeaders"> = {}) =>
  new OpenAI({ apiKey: "test", baseURL: fake.url, maxRetries: 0, ...options });
const chat = (content: string, client = openai()) =>
  client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content }] });
const failureOf = (promise: Promise<unknown>) =>
  promise.then(
    () => expect.unreachable("the request should have failed"),
    (error: unknown) => error,
  );

// The fake's queued failures and call count are shared state: the tests in this file run one
// after another (vitest's default within a file), and each one that queues failures consumes them.
describe("fake OpenAI model, through the openai SDK", () => {
  test("chat completions answer deterministically from the last user message", async () => {
    const first = await chat("Summarise the quarterly report in three bullets.");
    const again = await chat("Summarise the quarterly report in three bullets.");
    const other = await chat("Write a haiku about queues.");
    const text = first.choices[0]?.message.content ?? "";
    expect(text).toContain("Summarise the quarterly report");
    expect(again.choices[0]?.message.content).toBe(text);
    expect(other.choices[0]?.message.content).not.toBe(text);
    expect(first.choices[0]?.finish_reason).toBe("stop");
    expect(first.object).toBe("chat.completion");
    expect(first.usage?.total_tokens).toBe(
      (first.usage?.prompt_tokens ?? 0) + (first.usage?.completion_tokens ?? 0),
    );
    expect(first._request_id).toMatch(/^req_/);
  });

  test("the responses API returns the same text as output_text", async () => {
    const prompt = "Explain idempotency keys.";
    const viaResponses = await openai().responses.create({ model: "gpt-4o-mini", input: prompt });
    const viaChat = await chat(prompt);
    expect(viaResponses.status).toBe("completed");
    expect(viaResponses.output_text).toBe(viaChat.choices[0]?.message.content);
  });

  test("max_completion_tokens truncates with finish_reason length", async () => {
    const result = await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "A long answer please." }],
      max_completion_tokens: 3,
    });
    expect(result.choices[0]?.finish_reason).toBe("length");
    expect(result.usage?.completion_tokens).toBeLessThanOrEqual(3);
  });

  test("JSON schema output parses and fills the schema", async () => {
    const result = await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Classify this ticket." }],
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "ticket",
          strict: true,
          schema: {
            type: "object",
            properties: {
              label: { type: "string", enum: ["bug", "question"] },
              score: { type: "number" },
            },
            required: ["label", "score"],
            additionalProperties: false,
          },
        },
      },
    });
    const parsed = JSON.parse(result.choices[0]?.message.content ?? "");
    expect(parsed.label).toBe("bug");
    expect(typeof parsed.score).toBe("number");
  });

  test("insufficient_quota arrives as RateLimitError with that type and code, no retry-after", async () => {
    fake.failNext("insufficient_quota");
    const error = await failureOf(chat("hello"));
    expect(error).toBeInstanceOf(RateLimitError);
    const e = error as RateLimitError;
    expect(e.status).toBe(429);
    expect(e.code).toBe("insufficient_quota");
    expect(e.type).toBe("insufficient_quota");
    expect(e.message).toMatch(/^429 You exceeded your current quota/);
    expect(e.headers.get("retry-after")).toBeNull();
    expect(e.requestID).toMatch(/^req_/);
  });

  test("rate_limit_exceeded arrives as RateLimitError with a readable retry-after", async () => {
    fake.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 7 });
    const error = await failureOf(chat("hello"));
    expect(error).toBeInstanceOf(RateLimitError);
    const e = error as RateLimitError;
    expect(e.code).toBe("rate_limit_exceeded");
    expect(e.type).toBe("requests");
    expect(e.headers.get("retry-after")).toBe("7");
    expect(e.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    expect(e.message).toMatch(/Please try again in 7s/);
  });

  test("a failure queued with a count hits exactly that many requests", async () => {
    fake.failNext("server_error", 2);
    expect(await failureOf(chat("one"))).toBeInstanceOf(InternalServerError);
    expect(await failureOf(chat("two"))).toBeInstanceOf(InternalServerError);
    expect((await chat("three")).choices[0]?.message.content).toContain("three");
  });

  test("500 → InternalServerError, 400 → BadRequestError", async () => {
    fake.failNext("server_error");
    const server = (await failureOf(chat("x"))) as InternalServerError;
    expect(server).toBeInstanceOf(InternalServerError);
    expect(server.type).toBe("server_error");
    fake.failNext("bad_request");
    const bad = (await failureOf(chat("x"))) as BadRequestError;
    expect(bad).toBeInstanceOf(BadRequestError);
    expect(bad.type).toBe("invalid_request_error");
  });

  test("prompt markers ask for failures on every request that carries them", async () => {
    for (let i = 0; i < 2; i++) {
      const quota = (await failureOf(
        chat("please [fake:insufficient_quota] now"),
      )) as RateLimitError;
      expect(quota.code).toBe("insufficient_quota");
    }
    const limited = (await failureOf(chat("[fake:rate_limit_exceeded:30]"))) as RateLimitError;
    expect(limited.code).toBe("rate_limit_exceeded");
    expect(limited.headers.get("retry-after")).toBe("30");
    expect(await failureOf(chat("[fake:server_error]"))).toBeInstanceOf(InternalServerError);
    expect(await failureOf(chat("[fake:bad_request]"))).toBeInstanceOf(BadRequestError);
    const slow = await failureOf(chat("[fake:slow:5000]", openai({ timeout: 100 })));
    expect(slow).toBeInstanceOf(APIConnectionTimeoutError);
    const quick = await chat("[fake:slow:10]");
    expect(quick.choices[0]?.finish_reason).toBe("stop");
  });

  test("slow + a client timeout → APIConnectionTimeoutError; the next request is served", async () => {
    fake.failNext("slow", 1, { delayMs: 30_000 });
    const started = Date.now();
    const error = await failureOf(chat("take your time", openai({ timeout: 200 })));
    expect(error).toBeInstanceOf(APIConnectionTimeoutError);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((await chat("next")).choices[0]?.message.content).toContain("next");
  });

  test("a request without a bearer key is refused with 401", async () => {
    const anonymous = openai({ defaultHeaders: { authorization: null } });
    const error = (await failureOf(chat("hi", anonymous))) as AuthenticationError;
    expect(error).toBeInstanceOf(AuthenticationError);
    expect(error.type).toBe("invalid_request_error");
  });

  test("the operator's faults, as OpenAI answers them: 401 invalid_api_key (the key masked), 403 region, 404 model_not_found", async () => {
    const keyed = openai({ apiKey: "sk-proj-abcdefghijklmnop1234" });
    fake.failNext("invalid_api_key");
    const auth = (await failureOf(chat("hi", keyed))) as AuthenticationError;
    expect(auth).toBeInstanceOf(AuthenticationError);
    expect(auth).toMatchObject({
      status: 401,
      type: "invalid_request_error",
      code: "invalid_api_key",
      param: null,
    });
    expect(auth.message).toBe(
      "401 Incorrect API key provided: sk-proj-****************1234. You can find your API key at https://platform.openai.com/account/api-keys.",
    );
    expect(auth.requestID).toMatch(/^req_/);

    const region = (await failureOf(
      chat("hi [fake:unsupported_country_region_territory]"),
    )) as PermissionDeniedError;
    expect(region).toBeInstanceOf(PermissionDeniedError);
    expect(region).toMatchObject({
      status: 403,
      type: "request_forbidden",
      code: "unsupported_country_region_territory",
      message: "403 Country, region, or territory not supported",
    });

    const model = (await failureOf(chat("hi [fake:model_not_found]"))) as NotFoundError;
    expect(model).toBeInstanceOf(NotFoundError);
    expect(model).toMatchObject({
      status: 404,
      type: "invalid_request_error",
      code: "model_not_found",
    });
    expect(model.message).toBe(
      "404 The model `gpt-4o-mini` does not exist or you do not have access to it.",
    );
  });

  test("a revoked key gets 401 invalid_api_key on every request until reset; other keys are served", async () => {
    const revoked = openai({ apiKey: "sk-revoked-0000000000" });
    fake.revokeKey("sk-revoked-0000000000");
    for (let i = 0; i < 2; i++) {
      const error = (await failureOf(chat("hi", revoked))) as AuthenticationError;
      expect(error).toBeInstanceOf(AuthenticationError);
      expect(error.code).toBe("invalid_api_key");
    }
    expect((await chat("hi")).choices[0]?.message.content).toContain("hi");
    fake.reset();
    expect((await chat("hi", revoked)).choices[0]?.message.content).toContain("hi");
  });

  test("calls() counts model requests, failed ones included; reset() clears count and queue", async () => {
    fake.reset();
    await chat("a");
    fake.failNext("server_error");
    await failureOf(chat("b"));
    await openai().responses.create({ model: "gpt-4o-mini", input: "c" });
    expect(fake.calls()).toBe(3);
    fake.failNext("insufficient_quota", 5);
    fake.reset();
    expect(fake.calls()).toBe(0);
    await chat("d"); // not failed: the queue was cleared
    expect(fake.calls()).toBe(1);
  });

  test("the control API lets another process queue failures and read stats", async () => {
    const control = fake.url.replace(/\/v1$/, "/__fake");
    await fetch(`${control}/reset`, { method: "POST" });
    const queued = await fetch(`${control}/fail`, {
      method: "POST",
      body: JSON.stringify({ kind: "rate_limit_exceeded", count: 1, retryAfterSeconds: 3 }),
    });
    expect(await queued.json()).toEqual({ queued: 1 });
    const error = (await failureOf(chat("x"))) as RateLimitError;
    expect(error.headers.get("retry-after")).toBe("3");
    expect(await (await fetch(`${control}/stats`)).json()).toEqual({
      calls: 1,
      completionTokens: 0,
      streamedTokens: 0,
      requests: [],
      concurrent: 0,
      maxConcurrent: 1,
      startedAt: [expect.any(Number)],
    });
    const invalid = await fetch(`${control}/fail`, {
      method: "POST",
      body: JSON.stringify({ kind: "nope" }),
    });
    expect(invalid.status).toBe(400);
  });

  test("the load the provider saw: requests open at once (a stream until its end or the client leaves) and when each arrived", async () => {
    fake.reset();
    const t0 = Date.now();
    // Each held 1 s: all four are open at once however late a loaded machine sends the last.
    await Promise.all([1, 2, 3, 4].map((n) => chat(`[fake:slow:1000] ${n}`)));
    expect(fake.stats()).toMatchObject({ concurrent: 0, maxConcurrent: 4 });
    await chat("one more, alone");
    const stream = await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "[fake:tokens:400] [fake:chunk_ms:5] long" }],
      stream: true,
    });
    for await (const _ of stream) {
      // Open while it streams; the client leaves after the first chunk.
      expect(fake.stats().concurrent).toBe(1);
      break;
    }
    await expect.poll(() => fake.stats().concurrent, { timeout: 3000, interval: 20 }).toBe(0);
    const { maxConcurrent, startedAt } = fake.stats();
    expect(maxConcurrent).toBe(4);
    expect(startedAt).toHaveLength(6);
    expect(startedAt.every((at, i) => at >= t0 && at >= (startedAt[i - 1] ?? t0))).toBe(true);
    fake.reset();
    expect(fake.stats()).toMatchObject({ maxConcurrent: 0, startedAt: [] });
  });
});

const stream = (
  content: string,
  extra: { max_completion_tokens?: number } = {},
  client = openai(),
) =>
  client.chat.completions.create(
    {
      model: "gpt-4o-mini",
      messages: [{ role: "user", content }],
      stream: true,
      stream_options: { include_usage: true },
      ...extra,
    },
    {},
  );

describe("fake OpenAI model, streaming through the openai SDK", () => {
  test("the chunks add up to the non-streamed answer; usage comes last, with choices []", async () => {
    fake.reset();
    const prompt = "Summarise the quarterly report in three bullets.";
    const whole = (await chat(prompt)).choices[0]?.message.content;
    const chunks = [];
    for await (const chunk of await stream(prompt)) chunks.push(chunk);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe(whole);
    expect(chunks[0]?.choices[0]?.delta.role).toBe("assistant");
    expect(chunks.every((c) => c.object === "chat.completion.chunk")).toBe(true);
    const last = chunks.at(-1);
    expect(last?.choices).toEqual([]);
    const content = chunks.filter((c) => c.choices[0]?.delta.content);
    expect(last?.usage?.completion_tokens).toBe(content.length);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("stop");
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    expect(fake.stats()).toMatchObject({ calls: 2, streamedTokens: content.length });
    expect(fake.stats().requests.at(-1)).toEqual({
      api: "chat",
      stream: true,
      serviceTier: null,
      safetyIdentifier: null,
      instructions: false,
      format: null,
      promptTokens: last?.usage?.prompt_tokens,
      cachedTokens: 0,
      maxCompletionTokens: null,
      reasoningTokens: 0,
      completionTokens: content.length,
      outputTokens: content.length,
      model: "gpt-4o-mini",
      servedTier: "default",
      finishReason: "stop",
    });
  });

  test("[fake:say:…] streams exactly any text: special tokens as plain text, lone surrogates, a huge word; usage as OpenAI bills", async () => {
    fake.reset();
    const said = `<|im_start|>system<|im_end|> <|endoftext|> \ud800 \udfff x ${"😀".repeat(300)} தமிழ்`;
    const prompt = `repeat [fake:say:${JSON.stringify(said)}*2]`;
    const chunks = [];
    for await (const c of await stream(prompt)) chunks.push(c);
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe(said.repeat(2));
    const usage = chunks.at(-1)?.usage;
    // OpenAI's tokenizer, special-token strings as plain text; a lone surrogate is one token.
    const enc = get_encoding("o200k_base");
    const billed = said
      .repeat(2)
      .split(/([\uD800-\uDFFF])/u)
      .reduce(
        (n, part) => n + (/^[\uD800-\uDFFF]$/u.test(part) ? 1 : enc.encode_ordinary(part).length),
        0,
      );
    expect(usage?.completion_tokens).toBe(billed);
    // The prompt: 3 per message + its role + its content, + 3 for the reply's priming.
    expect(usage?.prompt_tokens).toBe(3 + 1 + enc.encode_ordinary(prompt).length + 3);
    expect(fake.stats().streamedTokens).toBe(usage?.completion_tokens);
  });

  test("a huge adversarial answer under max_tokens streams with the fake's process free: made as it is sent, its tokens those of the whole text", async () => {
    fake.reset();
    // 400 unspaced Tamil words of 1,500 characters: BPE on all of it takes seconds, and the
    // fake shares its process with the stand-ins and the test.
    const said = `${"தமிழ்".repeat(300)} and `;
    const prompt = `repeat [fake:say:${JSON.stringify(said)}*400]`;
    let last = performance.now();
    let longestGapMs = 0;
    const ticker = setInterval(() => {
      const now = performance.now();
      longestGapMs = Math.max(longestGapMs, now - last);
      last = now;
    }, 5);
    const chunks = [];
    try {
      const answer = await openai().chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: prompt }],
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 2_048,
      });
      for await (const c of answer) chunks.push(c);
    } finally {
      clearInterval(ticker);
    }
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("length");
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(2_048);
    expect(said.repeat(400).startsWith(text)).toBe(true);
    // Tokenizing the 602,000 characters first blocked the process 5 s on a quiet machine.
    expect(longestGapMs).toBeLessThan(1_000);

    // Cut into segments, the tokens are the whole text's where it has spaces to cut at.
    const { tokenPieces } = await import("../../dev/openai/stream.ts");
    const enc = get_encoding("o200k_base");
    const spaced = Array.from({ length: 3_000 }, (_, i) => `word${i} தமிழ் 😀,  x`).join(" ");
    const pieces = [...tokenPieces(enc, spaced)];
    expect(pieces.map((p) => p.text).join("")).toBe(spaced);
    expect(pieces.reduce((n, p) => n + p.tokens, 0)).toBe(enc.encode_ordinary(spaced).length);
    enc.free();
  });

  test("the wire format is SSE exactly: content type, data lines, [DONE]", async () => {
    const res = await fetch(`${fake.url}/chat/completions`, {
      method: "POST",
      headers: { authorization: "Bearer test", "content-type": "application/json" },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "hi" }],
        stream: true,
      }),
    });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const body = await res.text();
    const events = body.split("\n\n").filter(Boolean);
    expect(events.every((e) => e.startsWith("data: "))).toBe(true);
    expect(events.at(-1)).toBe("data: [DONE]");
    // Without include_usage: no usage chunk and no usage field.
    const parsed = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)));
    expect(parsed.every((c) => !("usage" in c) && c.choices.length === 1)).toBe(true);
  });

  test("max_completion_tokens stops the stream with finish_reason length", async () => {
    fake.reset();
    const chunks = [];
    for await (const c of await stream("[fake:tokens:500] go on", { max_completion_tokens: 7 }))
      chunks.push(c);
    expect(chunks.at(-2)?.choices[0]?.finish_reason).toBe("length");
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(7);
    expect(fake.stats()).toMatchObject({ streamedTokens: 7 });
    expect(fake.stats().requests[0]).toMatchObject({
      maxCompletionTokens: 7,
      finishReason: "length",
    });
  });

  test("a slowed stream stops when the client aborts: only what was written is counted", async () => {
    fake.reset();
    const controller = new AbortController();
    const s = await openai().chat.completions.create(
      {
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "[fake:tokens:1000] [fake:chunk_ms:50] long" }],
        stream: true,
        stream_options: { include_usage: true },
      },
      { signal: controller.signal },
    );
    const started = Date.now();
    let seen = 0;
    for await (const c of s) {
      if (c.choices[0]?.delta.content) seen += 1;
      if (Date.now() - started > 500) controller.abort();
    }
    // The fake notices the closed connection before its next chunk.
    const deadline = Date.now() + 2_000;
    while (fake.stats().requests.length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    const { streamedTokens, requests } = fake.stats();
    expect(requests[0]?.finishReason).toBe("client_closed");
    expect(streamedTokens).toBeGreaterThanOrEqual(seen);
    expect(streamedTokens).toBeLessThanOrEqual(seen + 2);
    expect(streamedTokens).toBeLessThan(30); // ~10 tokens in 500 ms at 50 ms a chunk, not 1000
  });

  test("the control API sets the chunk pause; reset() restores it", async () => {
    const control = fake.url.replace(/\/v1$/, "/__fake");
    const set = await fetch(`${control}/stream`, {
      method: "POST",
      body: JSON.stringify({ chunkMs: 30 }),
    });
    expect(await set.json()).toEqual({ chunkMs: 30 });
    const started = Date.now();
    let n = 0;
    for await (const c of await stream("[fake:tokens:10] x")) if (c.choices[0]?.delta.content) n++;
    expect(Date.now() - started).toBeGreaterThanOrEqual(n * 30 - 30);
    expect((await fetch(`${control}/stream`, { method: "POST", body: "{}" })).status).toBe(400);
    fake.reset();
  });

  test("every failure switch answers a streamed request before the stream, as OpenAI does", async () => {
    fake.failNext("insufficient_quota");
    const quota = (await failureOf(stream("x"))) as RateLimitError;
    expect(quota).toBeInstanceOf(RateLimitError);
    expect(quota.code).toBe("insufficient_quota");
    const limited = (await failureOf(stream("x [fake:rate_limit_exceeded:7]"))) as RateLimitError;
    expect(limited.headers.get("retry-after")).toBe("7");
    expect(await failureOf(stream("x [fake:server_error]"))).toBeInstanceOf(InternalServerError);
    expect(await failureOf(stream("x [fake:bad_request]"))).toBeInstanceOf(BadRequestError);
    fake.failNext("slow", 1, { delayMs: 30_000 });
    expect(await failureOf(stream("x", {}, openai({ timeout: 200 })))).toBeInstanceOf(
      APIConnectionTimeoutError,
    );
    const ok = [];
    for await (const c of await stream("after [fake:slow:10]")) ok.push(c);
    expect(ok.at(-2)?.choices[0]?.finish_reason).toBe("stop");
  });

  test("an unknown request parameter is refused with OpenAI's 400 unknown_parameter", async () => {
    const error = (await failureOf(
      openai().chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "x" }],
        // @ts-expect-error: a parameter the API does not take
        max_output_tokens: 5,
      }),
    )) as BadRequestError;
    expect(error).toBeInstanceOf(BadRequestError);
    expect(error).toMatchObject({ code: "unknown_parameter", param: "max_output_tokens" });
  });
});

/** The raw SSE events of a streamed Responses call: `event:` name and parsed `data:`. */
async function rawResponsesEvents(body: Record<string, unknown>) {
  const res = await fetch(`${fake.url}/responses`, {
    method: "POST",
    headers: { authorization: "Bearer test", "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-4o-mini", stream: true, ...body }),
  });
  expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
  const text = await res.text();
  return text
    .split("\n\n")
    .filter(Boolean)
    .map((block) => {
      const [eventLine, dataLine, ...rest] = block.split("\n");
      expect(rest).toEqual([]);
      expect(eventLine).toMatch(/^event: /);
      expect(dataLine).toMatch(/^data: /);
      return {
        event: (eventLine ?? "").slice("event: ".length),
        data: JSON.parse((dataLine ?? "").slice("data: ".length)),
      };
    });
}

const respond = (input: string, extra: Record<string, unknown> = {}, client = openai()) =>
  client.responses.create({ model: "gpt-4o-mini", input, stream: true, store: false, ...extra });

describe("fake OpenAI model, the Responses API streaming through the openai SDK", () => {
  test("the events come in OpenAI's order, named, numbered, no [DONE]; the deltas add up to the answer", async () => {
    fake.reset();
    const prompt = "Summarise the quarterly report in three bullets.";
    const events = await rawResponsesEvents({ input: prompt });
    const names = events.map((e) => e.event);
    const deltas = names.filter((n) => n === "response.output_text.delta").length;
    expect(names).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      ...Array(deltas).fill("response.output_text.delta"),
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.every((e) => e.data.type === e.event)).toBe(true);
    expect(events.map((e) => e.data.sequence_number)).toEqual(events.map((_, i) => i));
    const text = events
      .filter((e) => e.event === "response.output_text.delta")
      .map((e) => e.data.delta)
      .join("");
    expect(text).toBe((await chat(prompt)).choices[0]?.message.content);
    const completed = events.at(-1)?.data.response;
    expect(completed).toMatchObject({
      object: "response",
      status: "completed",
      incomplete_details: null,
      service_tier: "default",
      output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text }] }],
      usage: {
        input_tokens: expect.any(Number),
        input_tokens_details: { cached_tokens: 0 },
        output_tokens: deltas,
        output_tokens_details: { reasoning_tokens: 0 },
      },
    });
    expect(completed.usage.total_tokens).toBe(completed.usage.input_tokens + deltas);
    expect(fake.stats().requests.at(-2)).toMatchObject({
      api: "responses",
      stream: true,
      completionTokens: deltas,
      finishReason: "stop",
    });
  });

  test("through the SDK: the same text and usage as Chat Completions bills", async () => {
    const prompt = '[fake:say:"queues and workers"*3]';
    let text = "";
    let usage: { input_tokens: number; output_tokens: number } | undefined;
    for await (const event of await respond(prompt)) {
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed") usage = event.response.usage;
    }
    const chunks = [];
    for await (const c of await stream(prompt)) chunks.push(c);
    expect(text).toBe("queues and workers".repeat(3));
    expect(usage?.output_tokens).toBe(chunks.at(-1)?.usage?.completion_tokens);
    expect(usage?.input_tokens).toBe(chunks.at(-1)?.usage?.prompt_tokens);
  });

  test("max_output_tokens ends it with response.incomplete, reason max_output_tokens", async () => {
    fake.reset();
    const events = await rawResponsesEvents({
      input: "[fake:tokens:500] go",
      max_output_tokens: 16,
    });
    const last = events.at(-1);
    expect(last?.event).toBe("response.incomplete");
    expect(last?.data.response).toMatchObject({
      status: "incomplete",
      incomplete_details: { reason: "max_output_tokens" },
      usage: { output_tokens: 16 },
    });
    expect(events.find((e) => e.event === "response.output_item.done")?.data.item.status).toBe(
      "incomplete",
    );
    expect(fake.stats().requests[0]).toMatchObject({
      maxCompletionTokens: 16,
      finishReason: "length",
    });
  });

  test("a reasoning model's silent start: a reasoning item, nothing visible for T ms, reasoning tokens billed as output", async () => {
    fake.reset();
    const started = Date.now();
    const events: { event: string; at: number }[] = [];
    let usage:
      | { output_tokens: number; output_tokens_details: { reasoning_tokens: number } }
      | undefined;
    let visible = 0;
    for await (const e of await respond("[fake:reasoning:300:400] think hard")) {
      events.push({ event: e.type, at: Date.now() - started });
      if (e.type === "response.output_text.delta") visible += 1;
      if (e.type === "response.completed") usage = e.response.usage;
    }
    const names = events.map((e) => e.event);
    expect(names.slice(0, 4)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.output_item.done",
    ]);
    const firstText = events.find((e) => e.event === "response.output_text.delta");
    expect(firstText?.at).toBeGreaterThanOrEqual(350);
    expect(usage?.output_tokens_details.reasoning_tokens).toBe(300);
    expect(usage?.output_tokens).toBe(visible + 300);
    expect(fake.stats()).toMatchObject({
      completionTokens: visible + 300,
      streamedTokens: visible,
    });
    // Chat Completions too: the reasoning is in completion_tokens_details, billed as completion.
    fake.setReasoning({ tokens: 50, ms: 0 });
    const chunks = [];
    for await (const c of await stream("think")) chunks.push(c);
    expect(chunks.at(-1)?.usage?.completion_tokens_details?.reasoning_tokens).toBe(50);
  });

  test("flex out of capacity: a flex request gets 429 Resource Unavailable, the default tier is served", async () => {
    fake.reset();
    fake.setFlexCapacity(false);
    const flex = { model: "gpt-5.4-mini", service_tier: "flex" } as const;
    const error = (await failureOf(respond("x", flex))) as RateLimitError;
    expect(error).toBeInstanceOf(RateLimitError);
    expect(error.message).toMatch(/^429 Resource Unavailable/);
    expect(error.code).not.toBe("rate_limit_exceeded");
    expect(error.headers.get("retry-after")).toBeNull();
    expect(Number(error.headers.get("x-ratelimit-remaining-requests"))).toBeGreaterThan(0);
    const chatFlex = await failureOf(
      openai().chat.completions.create({
        model: "gpt-5.4-mini",
        messages: [{ role: "user", content: "x" }],
        service_tier: "flex",
      }),
    );
    expect(chatFlex).toBeInstanceOf(RateLimitError);
    for await (const _ of await respond("x")) {
      // drained: the default tier is served
    }
    const control = fake.url.replace(/\/v1$/, "/__fake");
    await fetch(`${control}/flex`, { method: "POST", body: JSON.stringify({ available: true }) });
    let tier: string | null | undefined;
    for await (const e of await respond("x", flex))
      if (e.type === "response.completed") tier = e.response.service_tier;
    expect(tier).toBe("flex");
    expect(await failureOf(respond("x [fake:flex_unavailable]", flex))).toBeInstanceOf(
      RateLimitError,
    );
  });

  test("failures inside the stream: an error event throws an APIError, response.failed arrives as an event, a cut ends the stream", async () => {
    fake.reset();
    fake.failNext("stream_error", 1, { afterTokens: 2, code: "server_error" });
    let seen = 0;
    const thrown = await failureOf(
      (async () => {
        for await (const e of await respond("hello"))
          if (e.type === "response.output_text.delta") seen++;
      })(),
    );
    expect(thrown).toBeInstanceOf(APIError);
    expect(thrown).toMatchObject({ status: undefined, code: "server_error" });
    expect(seen).toBe(2);
    fake.failNext("stream_failed", 1, { afterTokens: 1 });
    let failed: { status?: string; error: { code: string } | null } | undefined;
    for await (const e of await respond("hello"))
      if (e.type === "response.failed") failed = e.response;
    expect(failed).toMatchObject({ status: "failed", error: { code: "server_error" } });
    fake.failNext("stream_cut", 1, { afterTokens: 1 });
    const names: string[] = [];
    await (async () => {
      for await (const e of await respond("hello")) names.push(e.type);
    })().catch(() => undefined);
    expect(names).toContain("response.output_text.delta");
    expect(names).not.toContain("response.completed");
    expect(fake.stats().requests.map((r) => r.finishReason)).toEqual([
      "stream_error",
      "stream_failed",
      "stream_cut",
    ]);
  });

  test("a refusal streams as a refusal part: response.refusal.delta events, no output text", async () => {
    const names: string[] = [];
    let refusal = "";
    for await (const e of await respond("[fake:refuse] x")) {
      names.push(e.type);
      if (e.type === "response.refusal.delta") refusal += e.delta;
    }
    expect(refusal).toMatch(/can't help/);
    expect(names).not.toContain("response.output_text.delta");
    expect(names).toContain("response.refusal.done");
  });

  test("JSON mode on the Responses API (text.format json_schema) fills the schema", async () => {
    const result = await openai().responses.create({
      model: "gpt-4o-mini",
      input: "Classify this ticket.",
      text: {
        format: {
          type: "json_schema",
          name: "ticket",
          strict: true,
          schema: {
            type: "object",
            properties: { label: { type: "string", enum: ["bug", "question"] } },
            required: ["label"],
            additionalProperties: false,
          },
        },
      },
    });
    expect(JSON.parse(result.output_text)).toEqual({ label: "bug" });
  });
});

/** Schemas inside the strict subset, each answered with a value that must conform. */
const STRICT_SCHEMAS: Record<string, Record<string, unknown>> = {
  scalars: strictObject({
    s: { type: "string" },
    n: { type: "number" },
    i: { type: "integer" },
    b: { type: "boolean" },
    z: { type: "null" },
  }),
  "enums and const": strictObject({
    e: { type: "string", enum: ["low", "high"] },
    k: { type: "integer", enum: [3, 5] },
    c: { const: "fixed" },
  }),
  bounds: strictObject({
    short: { type: "string", minLength: 3, maxLength: 5 },
    small: { type: "integer", minimum: 2, maximum: 4 },
    open: { type: "number", exclusiveMinimum: 0, exclusiveMaximum: 1 },
    step: { type: "integer", multipleOf: 7, minimum: 10 },
    far: { type: "number", minimum: 5000 },
  }),
  formats: strictObject({
    when: { type: "string", format: "date-time" },
    day: { type: "string", format: "date" },
    mail: { type: "string", format: "email" },
    id: { type: "string", format: "uuid" },
    host: { type: "string", format: "hostname" },
    v4: { type: "string", format: "ipv4" },
  }),
  arrays: strictObject({
    none: { type: "array", items: { type: "string" }, maxItems: 0 },
    three: { type: "array", items: { type: "integer" }, minItems: 3, maxItems: 3 },
    objects: { type: "array", items: strictObject({ a: { type: "string" } }), minItems: 1 },
  }),
  "anyOf and nullable types": strictObject({
    either: { anyOf: [{ type: "string" }, { type: "integer" }] },
    maybe: { anyOf: [{ type: "null" }, strictObject({ x: { type: "boolean" } })] },
    typed: { type: ["string", "null"] },
  }),
  "recursion through $defs": strictObject(
    { root: { $ref: "#/$defs/node" } },
    {
      $defs: {
        node: strictObject({
          name: { type: "string" },
          next: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] },
          children: { type: "array", items: { $ref: "#/$defs/node" } },
        }),
      },
    },
  ),
  "recursion to the root (#) and definitions": strictObject(
    {
      label: { $ref: "#/definitions/label" },
      parent: { anyOf: [{ $ref: "#" }, { type: "null" }] },
    },
    { definitions: { label: { type: "string", maxLength: 8 } } },
  ),
};

describe("fake OpenAI model, Structured Outputs and instructions", () => {
  const ajv = addFormats.default(new Ajv2020({ allErrors: true }));
  const chatFormat = (schema: unknown, extra: Record<string, unknown> = {}) => ({
    type: "json_schema" as const,
    json_schema: {
      name: "extraction",
      schema: schema as Record<string, unknown>,
      strict: true,
      ...extra,
    },
  });
  const textFormat = (schema: unknown, extra: Record<string, unknown> = {}) => ({
    format: {
      type: "json_schema" as const,
      name: "extraction",
      schema: schema as Record<string, unknown>,
      strict: true,
      ...extra,
    },
  });
  /** The streamed text of a Chat Completions call with this format. */
  const chatStreamed = async (content: string, schema: unknown, max?: number) => {
    let text = "";
    let refusal = "";
    let finish: string | null = null;
    for await (const chunk of await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content }],
      stream: true,
      response_format: chatFormat(schema),
      ...(max ? { max_completion_tokens: max } : {}),
    })) {
      text += chunk.choices[0]?.delta.content ?? "";
      refusal += chunk.choices[0]?.delta.refusal ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    return { text, refusal, finish };
  };
  /** The streamed text and last event of a Responses call with this format. */
  const responsesStreamed = async (input: string, schema: unknown, max?: number) => {
    let text = "";
    let refusal = "";
    let last = "";
    for await (const e of await respond(input, {
      text: textFormat(schema),
      ...(max ? { max_output_tokens: max } : {}),
    })) {
      if (e.type === "response.output_text.delta") text += e.delta;
      if (e.type === "response.refusal.delta") refusal += e.delta;
      last = e.type;
    }
    return { text, refusal, last };
  };

  test.each(Object.entries(STRICT_SCHEMAS))(
    "%s: both APIs, streamed or not, answer the same JSON, and it conforms",
    async (_, schema) => {
      const conforms = ajv.compile(schema);
      const input = "Ada Lovelace wrote the first program in 1843.";
      const whole = await openai().chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: input }],
        response_format: chatFormat(schema),
      });
      const text = whole.choices[0]?.message.content ?? "";
      expect(conforms(JSON.parse(text)), JSON.stringify(conforms.errors)).toBe(true);
      expect((await chatStreamed(input, schema)).text).toBe(text);
      expect((await responsesStreamed(input, schema)).text).toBe(text);
    },
  );

  test("[fake:json_invalid]: well-formed JSON that the schema rejects, on both APIs", async () => {
    for (const schema of [STRICT_SCHEMAS.scalars, strictObject({})]) {
      const conforms = ajv.compile(schema as object);
      const chat = await chatStreamed("[fake:json_invalid] Ada", schema);
      const responses = await responsesStreamed("[fake:json_invalid] Ada", schema);
      expect(chat.finish).toBe("stop");
      expect(conforms(JSON.parse(chat.text))).toBe(false);
      expect(conforms(JSON.parse(responses.text))).toBe(false);
    }
  });

  test("[fake:refuse] with a format: a refusal, no JSON, on both APIs", async () => {
    const chat = await chatStreamed("[fake:refuse] Ada", STRICT_SCHEMAS.scalars);
    const responses = await responsesStreamed("[fake:refuse] Ada", STRICT_SCHEMAS.scalars);
    expect(chat).toMatchObject({ text: "", refusal: expect.stringMatching(/can't help/) });
    expect(responses).toMatchObject({ text: "", refusal: expect.stringMatching(/can't help/) });
  });

  test("[fake:tokens:N] past the bound: a JSON prefix, finish_reason length / response.incomplete", async () => {
    const schema = STRICT_SCHEMAS.scalars;
    const whole = await chatStreamed("[fake:tokens:200] Ada", schema);
    expect(JSON.parse(whole.text)).toMatchObject({ s: expect.any(String) });
    const chat = await chatStreamed("[fake:tokens:200] Ada", schema, 30);
    const responses = await responsesStreamed("[fake:tokens:200] Ada", schema, 30);
    expect(chat.finish).toBe("length");
    expect(responses.last).toBe("response.incomplete");
    for (const cut of [chat.text, responses.text]) {
      expect(whole.text.startsWith(cut)).toBe(true);
      expect(cut.length).toBeLessThan(whole.text.length);
      expect(() => JSON.parse(cut)).toThrow(SyntaxError);
    }
  });

  /** What OpenAI answers a strict schema outside its subset, through the SDK on each API. */
  const refusalOf = async (schema: unknown) => {
    const viaChat = await failureOf(
      openai().chat.completions.create({
        model: "gpt-4o-mini",
        messages: [{ role: "user", content: "x" }],
        response_format: chatFormat(schema),
      }),
    );
    const viaResponses = await failureOf(
      openai().responses.create({ model: "gpt-4o-mini", input: "x", text: textFormat(schema) }),
    );
    for (const err of [viaChat, viaResponses]) {
      expect(err).toBeInstanceOf(BadRequestError);
      expect(err).toMatchObject({ status: 400, type: "invalid_request_error" });
    }
    expect(viaChat).toMatchObject({ param: "response_format", code: null });
    expect(viaResponses).toMatchObject({
      param: "text.format.schema",
      code: "invalid_json_schema",
    });
    const message = (viaChat as BadRequestError).error as { message: string };
    expect((viaResponses as BadRequestError).error).toMatchObject({ message: message.message });
    return message.message;
  };

  test("a strict schema outside the subset: OpenAI's 400 on both APIs, the first problem named", async () => {
    const before = fake.stats().completionTokens;
    expect(await refusalOf({ type: "array", items: { type: "string" } })).toBe(
      "Invalid schema for response_format 'extraction': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"array\"'.",
    );
    expect(await refusalOf({ anyOf: [strictObject({})] })).toBe(
      "Invalid schema for response_format 'extraction': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"None\"'.",
    );
    expect(
      await refusalOf({ type: "object", properties: { a: { type: "string" } }, required: ["a"] }),
    ).toBe(
      "Invalid schema for response_format 'extraction': In context=(), 'additionalProperties' is required to be supplied and to be false.",
    );
    expect(
      await refusalOf(
        strictObject({
          person: {
            type: "object",
            properties: { name: { type: "string" }, age: { type: "integer" } },
            required: ["name"],
            additionalProperties: false,
          },
        }),
      ),
    ).toBe(
      "Invalid schema for response_format 'extraction': In context=('properties', 'person'), 'required' is required to be supplied and to be an array including every key in properties. Missing 'age'.",
    );
    expect(
      await refusalOf(
        strictObject({ list: { type: "array", items: { description: "anything" } } }),
      ),
    ).toBe(
      "Invalid schema for response_format 'extraction': In context=('properties', 'list', 'items'), schema must have a 'type' key.",
    );
    expect(
      await refusalOf(
        strictObject(
          { n: { $ref: "#/$defs/n" } },
          { $defs: { n: { type: "object", properties: {} } } },
        ),
      ),
    ).toBe(
      "Invalid schema for response_format 'extraction': In context=('$defs', 'n'), 'additionalProperties' is required to be supplied and to be false.",
    );
    expect(fake.stats().completionTokens).toBe(before);
  });

  test("strict: false is not checked (OpenAI does not), and the answer still fills the schema", async () => {
    const loose = { type: "object", properties: { a: { type: "string" } } };
    const result = await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Ada" }],
      response_format: chatFormat(loose, { strict: false }),
    });
    expect(JSON.parse(result.choices[0]?.message.content ?? "")).toEqual({ a: "Ada" });
  });

  test("a format without a name is refused as OpenAI refuses a missing parameter", async () => {
    const err = await failureOf(
      openai().responses.create({
        model: "gpt-4o-mini",
        input: "x",
        text: { format: { type: "json_schema", schema: strictObject({}) } as never },
      }),
    );
    expect(err).toMatchObject({
      status: 400,
      param: "text.format.name",
      code: "missing_required_parameter",
    });
  });

  test("instructions: billed as a system message, echoed by the Responses API, seen in stats", async () => {
    fake.reset();
    const instructions =
      "Extract the data the schema describes; use null where the text says nothing.";
    const enc = get_encoding("o200k_base");
    const asSystem =
      3 + enc.encode_ordinary("system").length + enc.encode_ordinary(instructions).length;
    const usageOf = async (extra: Record<string, unknown>) => {
      let usage: { input_tokens: number } | undefined;
      let echoed: unknown;
      for await (const e of await respond("Ada Lovelace", extra))
        if (e.type === "response.completed") {
          usage = e.response.usage ?? undefined;
          echoed = e.response.instructions;
        }
      return { input: usage?.input_tokens ?? 0, echoed };
    };
    const plain = await usageOf({});
    const told = await usageOf({ instructions });
    expect(plain.echoed).toBeNull();
    expect(told.echoed).toBe(instructions);
    expect(told.input - plain.input).toBe(asSystem);
    let chatInput = 0;
    for await (const chunk of await openai().chat.completions.create({
      model: "gpt-4o-mini",
      messages: [
        { role: "system", content: instructions },
        { role: "user", content: "Ada Lovelace" },
      ],
      stream: true,
      stream_options: { include_usage: true },
    }))
      chatInput = chunk.usage?.prompt_tokens ?? chatInput;
    expect(chatInput).toBe(told.input);
    const deadline = Date.now() + 2_000;
    while (fake.stats().requests.length < 3 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(fake.stats().requests.map((r) => r.instructions)).toEqual([false, true, true]);
    enc.free();
  });
});
