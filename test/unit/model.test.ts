import { delay, HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { AuthenticationError, BadRequestError, NotFoundError, PermissionDeniedError } from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import {
  classifyModelError,
  createModel,
  ModelCallError,
  ModelOutputError,
  retryAfterSeconds,
  usageOfFailure,
} from "../../lib/model.ts";
import { freePort } from "../support/ports.ts";

const baseURL = "https://api.openai.com/v1";
const completions = `${baseURL}/chat/completions`;
const requestHeaders = { "x-request-id": "req_123", "openai-processing-ms": "12" };

const server = setupServer();
beforeAll(() =>
  server.listen({
    // The connection-refused test talks to a closed loopback port for real.
    onUnhandledRequest: (req, print) => {
      if (new URL(req.url).hostname !== "127.0.0.1") print.error();
    },
  }),
);
afterEach(() => server.resetHandlers());
afterAll(() => server.close());

const model = (overrides: { baseURL?: string; timeoutMs?: number } = {}) =>
  createModel({
    apiKey: "sk-test-key-000000",
    model: "gpt-4o-mini",
    timeoutMs: 5_000,
    baseURL,
    ...overrides,
  });

/** A chat.completion.chunk stream as OpenAI sends it with stream_options.include_usage. */
function streamed(delta: Record<string, unknown>, finishReason = "stop") {
  const chunk = (choices: unknown[], usage: unknown = null) =>
    `data: ${JSON.stringify({
      id: "chatcmpl-1",
      object: "chat.completion.chunk",
      created: 1_700_000_000,
      model: "gpt-4o-mini",
      system_fingerprint: "fp_1",
      choices,
      usage,
    })}\n\n`;
  const body = [
    chunk([
      {
        index: 0,
        delta: { role: "assistant", content: "", refusal: null },
        logprobs: null,
        finish_reason: null,
      },
    ]),
    chunk([{ index: 0, delta, logprobs: null, finish_reason: null }]),
    chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: finishReason }]),
    chunk([], { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 }),
    "data: [DONE]\n\n",
  ].join("");
  return new HttpResponse(body, {
    headers: { ...requestHeaders, "content-type": "text/event-stream; charset=utf-8" },
  });
}

/** What a model call throws, through the real SDK. */
async function failure(overrides: { baseURL?: string; timeoutMs?: number } = {}) {
  return model(overrides)
    .generate("hello", { maxOutputTokens: 64 })
    .then(
      () => {
        throw new Error("expected the call to fail");
      },
      (err: unknown) => err,
    );
}

describe("generate", () => {
  test("returns the completion text and sends one request, no SDK retry", async () => {
    const seen: { auth: string | null; body: unknown }[] = [];
    server.use(
      http.post(completions, async ({ request }) => {
        seen.push({ auth: request.headers.get("authorization"), body: await request.json() });
        return streamed({ content: "Hello there." });
      }),
    );
    expect(await model().generate("hello", { maxOutputTokens: 64 })).toEqual({
      text: "Hello there.",
      usage: { promptTokens: 5, completionTokens: 3, source: "provider" },
      finishReason: "stop",
    });
    expect(seen).toEqual([
      {
        auth: "Bearer sk-test-key-000000",
        body: {
          model: "gpt-4o-mini",
          messages: [{ role: "user", content: "hello" }],
          max_completion_tokens: 64,
          stream: true,
          stream_options: { include_usage: true },
        },
      },
    ]);
  });

  test("a refusal is a ModelOutputError, classified as refused", async () => {
    server.use(http.post(completions, () => streamed({ refusal: "I can't help with that." })));
    const err = await failure();
    expect(err).toBeInstanceOf(ModelCallError);
    expect((err as ModelCallError).cause).toBeInstanceOf(ModelOutputError);
    expect(classifyModelError(err)).toMatchObject({ kind: "refused" });
    // The provider billed the refusal: its usage comes with the failure.
    expect(usageOfFailure(err)).toEqual({
      promptTokens: 5,
      completionTokens: 3,
      source: "provider",
    });
  });

  test("a content filter is refused; a 429 before the stream consumed nothing", async () => {
    server.use(http.post(completions, () => streamed({ content: "partial" }, "content_filter")));
    expect(classifyModelError(await failure())).toMatchObject({ kind: "refused" });
    // No text at all: refused too.
    server.use(http.post(completions, () => streamed({ content: "" })));
    expect(classifyModelError(await failure())).toMatchObject({
      kind: "refused",
      message: "the model returned no text",
    });
    server.use(
      http.post(completions, () =>
        HttpResponse.json(
          {
            error: {
              message: "quota",
              type: "insufficient_quota",
              param: null,
              code: "insufficient_quota",
            },
          },
          { status: 429 },
        ),
      ),
    );
    expect(usageOfFailure(await failure())).toEqual({
      promptTokens: 0,
      completionTokens: 0,
      source: "counted",
    });
  });
});

describe("a stream that stalls or is cut", () => {
  /** One content chunk, then nothing: the connection stays open. */
  const stalled = () =>
    new HttpResponse(
      new ReadableStream({
        start(controller) {
          const chunk = {
            id: "chatcmpl-1",
            object: "chat.completion.chunk",
            created: 1_700_000_000,
            model: "gpt-4o-mini",
            choices: [{ index: 0, delta: { content: "Hello there, queues" }, finish_reason: null }],
            usage: null,
          };
          controller.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(chunk)}\n\n`));
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    );

  test("MODEL_TIMEOUT_MS covers the stream, not only the headers: a stalled stream times out, transient, with what it streamed", async () => {
    // The SDK's own timeout stops at the response headers; without the model's deadline this
    // call would wait for the stalled stream forever.
    server.use(http.post(completions, stalled));
    const started = Date.now();
    const err = await failure({ timeoutMs: 300 });
    expect(Date.now() - started).toBeLessThan(3_000);
    expect(classifyModelError(err)).toMatchObject({ kind: "transient", status: null });
    expect(usageOfFailure(err)).toEqual({
      promptTokens: 1,
      completionTokens: 4, // "Hello there, queues" in o200k_base
      source: "counted",
    });
  });

  test("the caller's abort cuts the stream at once; what streamed is counted", async () => {
    server.use(http.post(completions, stalled));
    const controller = new AbortController();
    const texts: string[] = [];
    const call = model({ timeoutMs: 10_000 }).generate("hello", {
      maxOutputTokens: 64,
      signal: controller.signal,
      onText: (t) => {
        texts.push(t);
        controller.abort();
      },
    });
    const err = await call.then(
      () => expect.unreachable("aborted"),
      (e: unknown) => e,
    );
    expect(texts).toEqual(["Hello there, queues"]);
    expect(err).toBeInstanceOf(ModelCallError);
    expect(usageOfFailure(err)).toMatchObject({ completionTokens: 4, source: "counted" });
  });
});

describe("classifyModelError through the real SDK", () => {
  test("429 insufficient_quota → provider_quota / insufficient_quota (the provider retried once: no)", async () => {
    let calls = 0;
    server.use(
      http.post(completions, () => {
        calls += 1;
        return HttpResponse.json(
          {
            error: {
              message:
                "You exceeded your current quota, please check your plan and billing details.",
              type: "insufficient_quota",
              param: null,
              code: "insufficient_quota",
            },
          },
          { status: 429, headers: requestHeaders },
        );
      }),
    );
    expect(classifyModelError(await failure())).toEqual({
      kind: "provider_quota",
      reason: "insufficient_quota",
      retryAfterSeconds: null,
    });
    expect(calls).toBe(1); // maxRetries: 0 — the queue owns retries
  });

  test("429 rate_limit_exceeded with retry-after-ms", async () => {
    server.use(
      http.post(completions, () =>
        HttpResponse.json(
          {
            error: {
              message:
                "Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 1.276s.",
              type: "requests",
              param: null,
              code: "rate_limit_exceeded",
            },
          },
          {
            status: 429,
            headers: {
              ...requestHeaders,
              "retry-after-ms": "1276",
              "x-ratelimit-limit-requests": "3",
              "x-ratelimit-remaining-requests": "0",
              "x-ratelimit-reset-requests": "1.276s",
            },
          },
        ),
      ),
    );
    expect(classifyModelError(await failure())).toEqual({
      kind: "provider_quota",
      reason: "rate_limit_exceeded",
      retryAfterSeconds: 2,
    });
  });

  test("429 rate_limit_exceeded with retry-after in seconds", async () => {
    server.use(
      http.post(completions, () =>
        HttpResponse.json(
          {
            error: {
              message: "Rate limit reached for tokens",
              type: "tokens",
              param: null,
              code: "rate_limit_exceeded",
            },
          },
          { status: 429, headers: { ...requestHeaders, "retry-after": "20" } },
        ),
      ),
    );
    expect(classifyModelError(await failure())).toMatchObject({
      reason: "rate_limit_exceeded",
      retryAfterSeconds: 20,
    });
  });

  test("429 with retry-after as an HTTP date, measured from `now`", async () => {
    const now = new Date("2026-03-01T12:00:00Z");
    server.use(
      http.post(completions, () =>
        HttpResponse.json(
          {
            error: {
              message: "Rate limit reached",
              type: "requests",
              param: null,
              code: "rate_limit_exceeded",
            },
          },
          { status: 429, headers: { "retry-after": "Sun, 01 Mar 2026 12:01:30 GMT" } },
        ),
      ),
    );
    expect(classifyModelError(await failure(), now)).toMatchObject({ retryAfterSeconds: 90 });
  });

  test("500 → transient with its status", async () => {
    server.use(
      http.post(completions, () =>
        HttpResponse.json(
          {
            error: {
              message: "The server had an error while processing your request. Sorry about that!",
              type: "server_error",
              param: null,
              code: null,
            },
          },
          { status: 500, headers: requestHeaders },
        ),
      ),
    );
    expect(classifyModelError(await failure())).toMatchObject({ kind: "transient", status: 500 });
  });

  test("503 and 408 → transient", async () => {
    for (const status of [503, 408]) {
      server.use(
        http.post(completions, () =>
          HttpResponse.json(
            { error: { message: "busy", type: "server_error", param: null, code: null } },
            { status },
          ),
        ),
      );
      expect(classifyModelError(await failure())).toMatchObject({ kind: "transient", status });
    }
  });

  test("a timeout → transient, no status", async () => {
    server.use(
      http.post(completions, async () => {
        await delay("infinite");
        return streamed({ content: "too late" });
      }),
    );
    const err = await failure({ timeoutMs: 100 });
    expect(classifyModelError(err)).toEqual({
      kind: "transient",
      status: null,
      message: expect.stringMatching(/timed out/i),
    });
  });

  test("connection refused → transient, no status", async () => {
    const port = await freePort();
    const err = await failure({ baseURL: `http://127.0.0.1:${port}/v1` });
    expect(classifyModelError(err)).toMatchObject({ kind: "transient", status: null });
  });

  test("400 context_length_exceeded → refused with the provider's message (the prompt's fault)", async () => {
    server.use(
      http.post(completions, () =>
        HttpResponse.json(
          {
            error: {
              message:
                "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
              type: "invalid_request_error",
              param: "messages",
              code: "context_length_exceeded",
            },
          },
          { status: 400, headers: requestHeaders },
        ),
      ),
    );
    const err = await failure();
    expect((err as ModelCallError).cause).toBeInstanceOf(BadRequestError);
    expect(classifyModelError(err)).toMatchObject({
      kind: "refused",
      status: 400,
      message: expect.stringContaining("maximum context length"),
    });
  });

  // Each body as OpenAI sends it (its error-code guide; bodies as reported from the API).
  const operatorFaults: Array<
    [string, number, Record<string, unknown>, new (...args: never[]) => Error, string]
  > = [
    [
      "401 invalid_api_key (a revoked or wrong key)",
      401,
      {
        message:
          "Incorrect API key provided: sk-test-*******0000. You can find your API key at https://platform.openai.com/account/api-keys.",
        type: "invalid_request_error",
        param: null,
        code: "invalid_api_key",
      },
      AuthenticationError,
      "api_key",
    ],
    [
      "401 without a code (a key lacking the model.request scope)",
      401,
      {
        message:
          "You have insufficient permissions for this operation. Missing scopes: model.request.",
        type: "invalid_request_error",
        param: null,
        code: null,
      },
      AuthenticationError,
      "api_key",
    ],
    [
      "403 unsupported_country_region_territory",
      403,
      {
        message: "Country, region, or territory not supported",
        type: "request_forbidden",
        param: null,
        code: "unsupported_country_region_territory",
      },
      PermissionDeniedError,
      "region",
    ],
    [
      "403 model_not_found (the project may not use the model)",
      403,
      {
        message: "Project `proj_abc123` does not have access to model `gpt-4o-mini`",
        type: "invalid_request_error",
        param: null,
        code: "model_not_found",
      },
      PermissionDeniedError,
      "model",
    ],
    [
      "404 model_not_found (OPENAI_MODEL is unknown)",
      404,
      {
        message: "The model `gpt-4o-mini` does not exist or you do not have access to it.",
        type: "invalid_request_error",
        param: null,
        code: "model_not_found",
      },
      NotFoundError,
      "model",
    ],
    [
      "404 Invalid URL (OPENAI_BASE_URL points at the wrong path)",
      404,
      {
        message: "Invalid URL (POST /v1/chat/completion)",
        type: "invalid_request_error",
        param: null,
        code: null,
      },
      NotFoundError,
      "model",
    ],
    [
      "400 unsupported_parameter (the model takes another parameter than ours)",
      400,
      {
        message:
          "Unsupported parameter: 'max_completion_tokens' is not supported with this model. Use 'max_tokens' instead.",
        type: "invalid_request_error",
        param: "max_completion_tokens",
        code: "unsupported_parameter",
      },
      BadRequestError,
      "request",
    ],
    [
      "400 unsupported_value on stream (a model that does not stream)",
      400,
      {
        message:
          "Unsupported value: 'stream' does not support true with this model. Supported values are: false.",
        type: "invalid_request_error",
        param: "stream",
        code: "unsupported_value",
      },
      BadRequestError,
      "request",
    ],
  ];
  test.each(operatorFaults)(
    "%s → operator_fault, no secret in it",
    async (_what, status, body, SdkError, fault) => {
      server.use(
        http.post(completions, () =>
          HttpResponse.json({ error: body }, { status, headers: requestHeaders }),
        ),
      );
      const err = await failure();
      expect((err as ModelCallError).cause).toBeInstanceOf(SdkError);
      const classified = classifyModelError(err);
      expect(classified).toMatchObject({
        kind: "operator_fault",
        fault,
        status,
        code: body.code,
        message: expect.any(String),
      });
      // The 401 echoes the key, masked: neither part of it leaves.
      expect(JSON.stringify(classified)).not.toContain("sk-test");
      expect(JSON.stringify(classified)).not.toContain("0000");
    },
  );

  test("a 400 the prompt may cause (no code, or a code of the prompt's) stays refused: no user can page on-call", async () => {
    const bodies = [
      {
        message: "Invalid prompt: your prompt was flagged.",
        type: "invalid_request_error",
        param: null,
        code: "invalid_prompt",
      },
      {
        message: "Something about the request.",
        type: "invalid_request_error",
        param: null,
        code: null,
      },
      {
        message: "Invalid 'messages[0].content': string too long.",
        type: "invalid_request_error",
        param: "messages[0].content",
        code: "string_above_max_length",
      },
    ];
    for (const body of bodies) {
      server.use(
        http.post(completions, () =>
          HttpResponse.json({ error: body }, { status: 400, headers: requestHeaders }),
        ),
      );
      expect(classifyModelError(await failure())).toMatchObject({ kind: "refused", status: 400 });
    }
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
    expect(retryAfterSeconds(new Headers({ "retry-after": "30" }), now)).toBe(30);
    expect(
      retryAfterSeconds(new Headers({ "retry-after": "Sun, 01 Mar 2026 11:00:00 GMT" }), now),
    ).toBe(0);
    expect(retryAfterSeconds(new Headers({ "retry-after": "soon" }), now)).toBeNull();
    expect(retryAfterSeconds(undefined, now)).toBeNull();
  });
});
