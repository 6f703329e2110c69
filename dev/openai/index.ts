/**
 * An OpenAI-compatible fake model for the local stack and tests, driven through the `openai`
 * SDK at `OPENAI_BASE_URL=http://127.0.0.1:<port>/v1`.
 *
 * - `POST /v1/chat/completions` and `POST /v1/responses` answer deterministically from the
 *   prompt (same prompt → same text: a short document with a digest and an echo of the last
 *   user message), in OpenAI's shapes, with `content-type: application/json` and an
 *   `x-request-id` header.
 * - Instructions: Responses `instructions`, Chat Completions `system` / `developer` messages,
 *   billed as input like every message (a Responses response echoes its `instructions`).
 * - Structured Outputs: a `json_schema` format (Responses `text.format`, Chat Completions
 *   `response_format.json_schema`) answers a JSON value that conforms to the schema, made by
 *   schema.ts (every property, enums, bounds, arrays within minItems/maxItems, anyOf, local
 *   `$ref`, recursion bounded), streamed as text deltas like any answer, usage counted the same
 *   way; `json_object` answers a small JSON object. With `strict: true` a schema outside the
 *   strict subset gets OpenAI's 400 "Invalid schema for response_format '<name>': …" (Chat:
 *   param `response_format`, code null; Responses: param `text.format.schema`, code
 *   `invalid_json_schema`). Markers with a format:
 *        [fake:json_invalid]              well-formed JSON that breaks the schema (a required
 *                                         property missing), as a provider not enforcing it could send
 *        [fake:refuse]                    a refusal instead of JSON
 *        [fake:tokens:N]                  the first free-text string is about N tokens long, so
 *                                         the output bound cuts the JSON (a prefix, `length`)
 * - Models (catalogue.ts, the fake's own list): only the catalogue's, each until its shutdown date
 *   (a retired or unknown model is OpenAI's 404 `model_not_found`); `GET /v1/models` and
 *   `GET /v1/models/{id}` answer openai-node's `Model` with `shutdown_date`. A test moves a date
 *   with the `shutdownDates` option, `setShutdownDate`, `POST /__fake/models` or
 *   `FAKE_OPENAI_SHUTDOWN_DATES`. Flex is per model (400 `service_tier` on one without it);
 *   the response's `service_tier` is the tier that served it:
 *        [fake:served_tier:default]       served (and reported) at another tier than asked
 *   A reasoning model reasons by default (64 hidden tokens at medium effort, `reasoning.effort` /
 *   `reasoning_effort` sets it), streamed or not, inside the output bound and billed as output;
 *   `max_output_tokens` below 16 is OpenAI's 400 `integer_below_min_value`.
 *        [fake:cached:N]                  N of the input tokens reported as cached
 * - `Authorization: Bearer <anything non-empty>` is required (else 401, OpenAI's error shape).
 * - Failures, exactly as OpenAI answers them (see errors.ts), come from
 *   1. `failNext(kind, count, opts)` or the control API, consumed one per model request, else
 *   2. a marker anywhere in the prompt, applied on every request that carries it:
 *        [fake:insufficient_quota]        429, type and code insufficient_quota
 *        [fake:rate_limit_exceeded:30]    429, code rate_limit_exceeded, retry-after: 30 (default 20)
 *        [fake:server_error]              500, type server_error
 *        [fake:slow:5000]                 answers after 5000 ms (default 10000); stops if the client leaves
 *        [fake:bad_request]               400, invalid_request_error (context_length_exceeded)
 *        [fake:invalid_api_key]           401, code invalid_api_key (the key echoed, masked)
 *        [fake:unsupported_country_region_territory]  403, type request_forbidden
 *        [fake:model_not_found]           404, code model_not_found
 * - `revokeKey(key)`: every later request with that key gets OpenAI's 401 invalid_api_key, as
 *   after the key is revoked in the dashboard (until `reset`).
 *        [fake:unsupported_parameter]     400, code unsupported_parameter on our output bound
 * - Streaming (`stream: true`, both APIs; stream.ts, frames.ts): server-sent events as OpenAI
 *   sends them, one per token: Chat Completions chunks (the usage chunk when
 *   `stream_options.include_usage`, then `data: [DONE]`), or Responses events (`event:` names,
 *   `sequence_number`, `response.created` … `response.completed`); the output bound
 *   (`max_output_tokens`, `max_completion_tokens`, `max_tokens`) stops it with finish_reason
 *   "length" / `response.incomplete` (`max_output_tokens`); it stops when the client disconnects.
 *   Every failure above answers before the stream starts, as OpenAI's do. Prompt markers shape a
 *   stream:
 *        [fake:chunk_ms:200]              200 ms before each token's chunk (else the control API's)
 *        [fake:tokens:5000]               an answer of about 5000 tokens (still cut by the bound)
 *        [fake:say:"<JSON string>"*N]     the answer is exactly that text, N times (*N optional):
 *                                         special tokens, lone surrogates, huge words (answers.ts)
 *        [fake:reasoning:800:3000]        a reasoning model's silent start: 800 hidden reasoning
 *                                         tokens over 3000 ms before the first visible token,
 *                                         billed as output (else the control API's)
 *        [fake:stream_failed:N]           after N tokens (default 3): `response.failed`, code
 *                                         server_error (Chat Completions: an error chunk)
 *        [fake:stream_error:N]            after N tokens: an `error` event (Chat: an error chunk),
 *                                         its fields nested under `error` as OpenAI sends them
 *        [fake:stream_error:insufficient_quota]  right after the response opens, an `error` event
 *                                         of that code and its HTTP type (also
 *                                         `credit_balance_exhausted`, `rate_limit_exceeded`,
 *                                         `context_length_exceeded`; `:N` after N tokens)
 *        [fake:stream_cut:N]              after N tokens the connection drops, no last event
 *        [fake:refuse]                    the model refuses: the text streams as a refusal
 *        [fake:hold_open]                 the connection stays open after the last event
 * - Flex capacity: a flex request (to a model with flex) gets OpenAI's 429 "Resource
 *   Unavailable" (errors.ts) while the fake is out of flex capacity (`setFlexCapacity(false)`,
 *   the control API) or the prompt says `[fake:flex_unavailable]`; other tiers are served.
 * - Non-streamed calls are served on both APIs; an unknown request parameter is refused with
 *   OpenAI's 400 `unknown_parameter` (answers.ts).
 * - Control API for other processes (no auth):
 *     POST /__fake/fail  {"kind","count","retryAfterSeconds","delayMs"} → {"queued": n}
 *     POST /__fake/stream {"chunkMs"} → {"chunkMs": n}: the pause before each streamed token
 *     POST /__fake/reasoning {"tokens","ms"} → the same: every later stream's silent start
 *     POST /__fake/flex {"available"} → {"available": b}: flex capacity
 *     POST /__fake/models {"id","shutdownDate"} → the model as listed: a shutdown date moved
 *     GET  /__fake/stats → {"calls", "completionTokens", "streamedTokens", "requests",
 *                           "concurrent", "maxConcurrent", "startedAt"}
 *     POST /__fake/reset → {"ok": true}
 * `calls` counts every request that reached a model endpoint, whatever its outcome.
 * `completionTokens` is every completion token the fake sent (what a provider would bill);
 * `streamedTokens` the streamed part of it, counted as each chunk is written, so a stream the
 * client cut counts only what was written. `requests` lists the last 1000 model requests that
 * got an answer, the bill of each: `{api, model, stream, serviceTier, servedTier, safetyIdentifier,
 * instructions, format, promptTokens, cachedTokens, maxCompletionTokens, completionTokens,
 * reasoningTokens, outputTokens, finishReason}` (instructions: whether any came; format: the
 * json_schema's name, `json_object` or null; completionTokens: visible ones; outputTokens: every
 * output token billed, reasoning included, whether or not the client saw them; finishReason
 * `client_closed` for a stream the client cut, or the mid-stream failure's kind). The load the provider saw: `concurrent` model requests open now (arrived, answer not
 * yet wholly sent: a stream until its last byte or the client leaving), `maxConcurrent` the
 * most at once, `startedAt` when each arrived (the last 10,000), so a test can count the
 * requests in any window; `reset` starts them again.
 */
import { randomBytes } from "node:crypto";
import { serve } from "../http/serve.ts";
import {
  answer,
  chatCompletion,
  isRecord,
  type Prompt,
  parseChatRequest,
  parseResponsesRequest,
  response,
} from "./answers.ts";
import {
  type CatalogueModel,
  catalogueWith,
  checkDate,
  DEFAULT_EFFORT,
  modelObject,
  parseShutdownDates,
  REASONING_MS_PER_TOKEN,
  REASONING_TOKENS,
  retired,
  type ShutdownDates,
} from "./catalogue.ts";
import {
  type ErrorReply,
  FAIL_KINDS,
  type FailKind,
  type FailOptions,
  type Failure,
  failureReply,
  flexNotSupported,
  flexUnavailable,
  httpTwin,
  incorrectKey,
  invalidUrl,
  MID_STREAM_KINDS,
  type MidStreamKind,
  markerFailure,
  missingKey,
  modelNotFound,
  unparsableBody,
} from "./errors.ts";
import { type MidStream, promptTokens, streamAnswer, tokenizer } from "./stream.ts";

export type { CatalogueModel, ShutdownDates } from "./catalogue.ts";
export type { FailKind, FailOptions } from "./errors.ts";

export interface FakeOpenAIOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  /** The pause before each streamed token's chunk. @default 0 */
  chunkMs?: number;
  /**
   * Shutdown dates moved from the catalogue's (catalogue.ts), by model: `YYYY-MM-DD`, or null
   * for none announced. @default the `FAKE_OPENAI_SHUTDOWN_DATES` environment variable's
   */
  shutdownDates?: ShutdownDates;
  /** Today, for shutdown dates. @default () => new Date() */
  now?: () => Date;
}

/** A reasoning model's silent start: hidden tokens spent over `ms` before the first visible one. */
export interface FakeReasoning {
  tokens: number;
  ms: number;
}

/** One answered model request, as `stats()` lists it. */
export interface FakeRequest {
  api: "chat" | "responses";
  stream: boolean;
  serviceTier: string | null;
  safetyIdentifier: string | null;
  /** Whether instructions came (Responses `instructions`, a Chat Completions system or developer message). */
  instructions: boolean;
  /** The `json_schema` format's name, `json_object`, or null for text. */
  format: string | null;
  /** The input tokens billed (instructions included). */
  promptTokens: number;
  /** Of the prompt tokens, those billed as cached input (`[fake:cached:N]`). */
  cachedTokens: number;
  maxCompletionTokens: number | null;
  /** Visible completion tokens. */
  completionTokens: number;
  /** Hidden reasoning tokens (billed as output too). */
  reasoningTokens: number;
  /**
   * Every output token billed: visible and reasoning, whether or not the client saw them (a
   * stream cut short reports no usage, yet what was generated is billed).
   */
  outputTokens: number;
  model: string;
  /** The tier that served it (what the response reports), not what was asked (`serviceTier`). */
  servedTier: string;
  finishReason: string;
}

export interface FakeStats {
  calls: number;
  completionTokens: number;
  streamedTokens: number;
  requests: FakeRequest[];
  /** Model requests open now: arrived, and their answer (a whole stream) not yet sent or cut. */
  concurrent: number;
  /** The most model requests open at once. */
  maxConcurrent: number;
  /** When each of the last 10,000 model requests arrived (ms since the epoch), in order. */
  startedAt: number[];
}

export interface FakeOpenAI {
  /** `http://127.0.0.1:<port>/v1`, the OPENAI_BASE_URL */
  url: string;
  close(): Promise<void>;
  /** The next `count` model requests fail this way. @default count 1 */
  failNext(kind: FailKind, count?: number, opts?: FailOptions): void;
  /** Model requests received since start or the last reset. */
  calls(): number;
  /** Calls, billed completion tokens and the answered requests since start or the last reset. */
  stats(): FakeStats;
  /** The pause before each streamed token's chunk when the prompt names none. */
  setChunkMs(ms: number): void;
  /** Later requests with this key get 401 invalid_api_key, as after a revocation. */
  revokeKey(key: string): void;
  /** Whether flex capacity is there; without it a flex request gets the 429. @default true */
  setFlexCapacity(available: boolean): void;
  /**
   * Every later stream's silent start when the prompt names none (null: the model's own, none
   * for a model that does not reason).
   */
  setReasoning(reasoning: FakeReasoning | null): void;
  /** Move a model's shutdown date (`YYYY-MM-DD`, null: none announced) until `reset`. */
  setShutdownDate(model: string, date: string | null): void;
  /** The catalogue as served now (shutdown dates as moved). */
  models(): CatalogueModel[];
  /**
   * Forget queued failures, revoked keys, the counts, the chunk pause, flex, reasoning and moved
   * shutdown dates (back to the options').
   */
  reset(): void;
}

const MODEL_ROUTES = new Set(["/v1/chat/completions", "/v1/responses"]);

export async function startFakeOpenAI(options: FakeOpenAIOptions): Promise<FakeOpenAI> {
  const host = options.host ?? "127.0.0.1";
  let calls = 0;
  let completionTokens = 0;
  let streamedTokens = 0;
  let requests: FakeRequest[] = [];
  let chunkMs = options.chunkMs ?? 0;
  let queue: Failure[] = [];
  let flexAvailable = true;
  let reasoning: FakeReasoning | null = null;
  const startDates =
    options.shutdownDates ?? parseShutdownDates(process.env.FAKE_OPENAI_SHUTDOWN_DATES);
  let moved: ShutdownDates = { ...startDates };
  let catalogue = catalogueWith(moved);
  const now = options.now ?? (() => new Date());
  const revoked = new Set<string>();
  const inFlight = new Set<AbortController>();
  let concurrent = 0;
  let maxConcurrent = 0;
  let startedAt: number[] = [];

  const failNext = (kind: FailKind, count = 1, opts: FailOptions = {}) => {
    if (!FAIL_KINDS.includes(kind)) throw new Error(`unknown fail kind: ${kind}`);
    if (!Number.isInteger(count) || count < 1)
      throw new Error(`count must be a positive integer, got ${count}`);
    for (let i = 0; i < count; i++) queue.push({ kind, ...opts });
  };
  const reset = () => {
    calls = 0;
    completionTokens = 0;
    streamedTokens = 0;
    requests = [];
    chunkMs = options.chunkMs ?? 0;
    queue = [];
    revoked.clear();
    flexAvailable = true;
    reasoning = null;
    moved = { ...startDates };
    catalogue = catalogueWith(moved);
    maxConcurrent = concurrent;
    startedAt = [];
  };
  const setReasoning = (r: FakeReasoning | null) => {
    if (r && !(Number.isInteger(r.tokens) && r.tokens >= 0 && Number.isFinite(r.ms) && r.ms >= 0))
      throw new Error("reasoning must be {tokens: whole number >= 0, ms: >= 0}");
    reasoning = r;
  };
  const answered = (r: FakeRequest) => {
    requests.push(r);
    if (requests.length > 1000) requests.shift();
  };
  const stats = (): FakeStats => ({
    calls,
    completionTokens,
    streamedTokens,
    requests: [...requests],
    concurrent,
    maxConcurrent,
    startedAt: [...startedAt],
  });
  const setShutdownDate = (id: string, date: string | null) => {
    moved = { ...moved, [id]: checkDate(date) };
    catalogue = catalogueWith(moved);
  };
  /** The model as served today: undefined when unknown or retired. */
  const serving = (id: string): CatalogueModel | undefined => {
    const m = catalogue.get(id);
    return m && !retired(m, now()) ? m : undefined;
  };
  const setChunkMs = (ms: number) => {
    if (!Number.isFinite(ms) || ms < 0) throw new Error(`chunkMs must be >= 0, got ${ms}`);
    chunkMs = ms;
  };

  async function handle(request: Request): Promise<Response> {
    const signal = request.signal; // taken first, so a client that leaves early is seen
    const path = new URL(request.url).pathname.replace(/\/+$/, "");
    const text = await request.text();
    if (path.startsWith("/__fake/")) return control(request.method, path, text);
    const listing = request.method === "GET" && /^\/v1\/models(\/[^/]+)?$/.test(path);
    if (!listing && (!MODEL_ROUTES.has(path) || request.method !== "POST"))
      return reply(invalidUrl(request.method, path));
    if (!listing) calls += 1;
    if (!/^Bearer \S+/.test(request.headers.get("authorization") ?? "")) return reply(missingKey);
    const apiKey = (request.headers.get("authorization") ?? "").slice("Bearer ".length).trim();
    if (revoked.has(apiKey)) return reply(incorrectKey(apiKey));
    if (listing) return models(decodeURIComponent(path.slice("/v1/models/".length)));

    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return reply(unparsableBody);
    }
    if (!isRecord(body)) return reply(unparsableBody);
    const prompt =
      path === "/v1/chat/completions" ? parseChatRequest(body) : parseResponsesRequest(body);
    if ("status" in prompt) return reply(prompt);
    const served = serving(prompt.model);
    if (!served) return reply(modelNotFound(prompt.model, catalogue.has(prompt.model)));
    if (prompt.serviceTier === "flex" && !served.tiers.includes("flex"))
      return reply(flexNotSupported(prompt.model));
    // Flex capacity is OpenAI's, not a failure of this request: it leaves the queue alone.
    if (
      prompt.serviceTier === "flex" &&
      (!flexAvailable || prompt.all.includes("[fake:flex_unavailable]"))
    )
      return reply(flexUnavailable());
    const failure = queue.shift() ?? markerFailure(prompt.all);
    let midStream: MidStream | null = null;
    if (failure?.kind === "slow") {
      // The client left (or the fake closed): nobody reads this answer.
      if (!(await delay(failure.delayMs ?? 10_000, signal))) return new Response(null);
    } else if (failure && isMidStream(failure.kind)) {
      // Inside a stream; a call that does not stream fails as the same error over HTTP would
      // (a quota as its 429, a prompt too long as its 400), else with a 500.
      if (!prompt.stream)
        return reply(failureReply({ kind: httpTwin(failure.code) }, prompt.model));
      midStream = {
        kind: failure.kind,
        afterTokens: failure.afterTokens ?? 3,
        code:
          failure.code !== undefined
            ? failure.code
            : failure.kind === "stream_error"
              ? null
              : "server_error",
      };
    } else if (failure) {
      const kind = failure.kind as Exclude<FailKind, "slow" | MidStreamKind>;
      return reply(failureReply({ ...failure, kind }, prompt.model, apiKey, prompt.api));
    }
    return answerCall(prompt, served, midStream, signal);
  }

  /** The answer to an accepted call, streamed or whole, and its bill in `requests`. */
  async function answerCall(
    prompt: Prompt,
    served: CatalogueModel,
    midStream: MidStream | null,
    signal: AbortSignal,
  ): Promise<Response> {
    const id = randomBytes(12).toString("hex");
    const thinks = reasoningFor(prompt, served, reasoning);
    const servedTier = tierServed(prompt, served);
    // A stream is cut by tokens as it is written (stream.ts), not here by characters; a call
    // that does not stream has the bound less its reasoning for its text.
    const reasoned = Math.min(thinks?.tokens ?? 0, prompt.maxTokens ?? Number.POSITIVE_INFINITY);
    const result = answer(
      prompt.stream
        ? { ...prompt, maxTokens: undefined }
        : {
            ...prompt,
            maxTokens: prompt.maxTokens === undefined ? undefined : prompt.maxTokens - reasoned,
          },
    );
    const maxCompletionTokens = prompt.maxTokens ?? null;
    const billedPrompt = prompt.stream
      ? promptTokens(await tokenizer(prompt.model), prompt.messages)
      : result.promptTokens;
    const cached = /\[fake:cached:(\d+)\]/.exec(prompt.all);
    const cachedTokens = Math.min(Number(cached?.[1] ?? 0), billedPrompt);
    const asked = {
      api: prompt.api,
      model: prompt.model,
      servedTier,
      cachedTokens,
      serviceTier: prompt.serviceTier ?? null,
      safetyIdentifier: prompt.safetyIdentifier ?? null,
      instructions: prompt.messages.some((m) => m.role === "system" || m.role === "developer"),
      format: prompt.format?.name ?? (prompt.json ? "json_object" : null),
      promptTokens: billedPrompt,
      maxCompletionTokens,
    };
    if (prompt.stream) {
      const marker = /\[fake:chunk_ms:(\d+)\]/.exec(prompt.all);
      const { response: streamed, outcome } = streamAnswer(
        {
          id,
          prompt,
          result,
          chunkMs: marker ? Number(marker[1]) : chunkMs,
          headers: { "x-request-id": `req_${randomBytes(16).toString("hex")}`, ...RATE_HEADERS },
          reasoning: thinks,
          reasoningEffort: served.reasons ? (prompt.reasoningEffort ?? DEFAULT_EFFORT) : null,
          servedTier,
          cachedTokens,
          midStream,
          onToken: () => {
            streamedTokens += 1;
            completionTokens += 1;
          },
          onReasoning: (n) => {
            completionTokens += n;
          },
        },
        signal,
      );
      void outcome.then((r) =>
        answered({
          ...asked,
          stream: true,
          ...r,
          outputTokens: r.completionTokens + r.reasoningTokens,
        }),
      );
      return streamed;
    }
    completionTokens += result.completionTokens + reasoned;
    answered({
      ...asked,
      stream: false,
      completionTokens: result.completionTokens,
      reasoningTokens: reasoned,
      outputTokens: result.completionTokens + reasoned,
      finishReason: result.truncated ? "length" : "stop",
    });
    const bill = { tier: servedTier, reasoningTokens: reasoned, cachedTokens };
    const payload =
      prompt.api === "chat"
        ? chatCompletion(id, prompt, result, bill)
        : response(id, prompt, result, bill);
    return send(200, payload, {
      ...RATE_HEADERS,
      "x-ratelimit-remaining-tokens": String(
        200_000 - result.promptTokens - result.completionTokens - reasoned,
      ),
    });
  }

  /** `GET /v1/models` (a list, retired models left out) and `GET /v1/models/{id}`. */
  function models(id: string): Response {
    const today = now();
    if (id === "")
      return send(200, {
        object: "list",
        data: [...catalogue.values()].filter((m) => !retired(m, today)).map(modelObject),
      });
    const m = serving(id);
    return m ? send(200, modelObject(m)) : reply(modelNotFound(id, catalogue.has(id)));
  }

  /** Waits `ms`, resolving false early if the client disconnects or the fake closes. */
  function delay(ms: number, signal: AbortSignal): Promise<boolean> {
    const controller = new AbortController();
    inFlight.add(controller);
    const gone = AbortSignal.any([signal, controller.signal]);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => done(true), ms);
      const onAbort = () => done(false);
      const done = (completed: boolean) => {
        clearTimeout(timer);
        gone.removeEventListener("abort", onAbort);
        inFlight.delete(controller);
        resolve(completed && !gone.aborted);
      };
      if (gone.aborted) return done(false);
      gone.addEventListener("abort", onAbort);
    });
  }

  function control(method: string, path: string, text: string): Response {
    if (method === "GET" && path === "/__fake/stats") return send(200, stats());
    if (method === "POST" && path === "/__fake/stream") {
      try {
        const body: unknown = JSON.parse(text || "{}");
        if (!isRecord(body) || typeof body.chunkMs !== "number")
          throw new Error('body must be {"chunkMs": <ms>}');
        setChunkMs(body.chunkMs);
        return send(200, { chunkMs });
      } catch (error) {
        return send(400, { error: (error as Error).message });
      }
    }
    if (method === "POST" && path === "/__fake/flex") {
      const body: unknown = JSON.parse(text || "{}");
      if (!isRecord(body) || typeof body.available !== "boolean")
        return send(400, { error: 'body must be {"available": <boolean>}' });
      flexAvailable = body.available;
      return send(200, { available: flexAvailable });
    }
    if (method === "POST" && path === "/__fake/reasoning") {
      try {
        const body: unknown = JSON.parse(text || "{}");
        if (!isRecord(body) || typeof body.tokens !== "number" || typeof body.ms !== "number")
          throw new Error('body must be {"tokens": <n>, "ms": <ms>}');
        setReasoning({ tokens: body.tokens, ms: body.ms });
        return send(200, reasoning);
      } catch (error) {
        return send(400, { error: (error as Error).message });
      }
    }
    if (method === "POST" && path === "/__fake/models") {
      try {
        const body: unknown = JSON.parse(text || "{}");
        if (!isRecord(body) || typeof body.id !== "string" || !("shutdownDate" in body))
          throw new Error('body must be {"id": <model>, "shutdownDate": "YYYY-MM-DD" | null}');
        setShutdownDate(body.id, body.shutdownDate as string | null);
        return send(200, modelObject(catalogue.get(body.id) as CatalogueModel));
      } catch (error) {
        return send(400, { error: (error as Error).message });
      }
    }
    if (method === "POST" && path === "/__fake/reset") {
      reset();
      return send(200, { ok: true });
    }
    if (method === "POST" && path === "/__fake/fail") {
      try {
        const body: unknown = JSON.parse(text || "{}");
        if (!isRecord(body)) throw new Error("body must be a JSON object");
        const number = (value: unknown) => (typeof value === "number" ? value : undefined);
        const opts: FailOptions = {};
        if (number(body.retryAfterSeconds) !== undefined)
          opts.retryAfterSeconds = number(body.retryAfterSeconds);
        if (number(body.delayMs) !== undefined) opts.delayMs = number(body.delayMs);
        if (number(body.afterTokens) !== undefined) opts.afterTokens = number(body.afterTokens);
        if (typeof body.code === "string" || body.code === null) opts.code = body.code;
        failNext(body.kind as FailKind, number(body.count) ?? 1, opts);
        return send(200, { queued: queue.length });
      } catch (error) {
        return send(400, { error: (error as Error).message });
      }
    }
    return send(404, { error: `no control route ${method} ${path}` });
  }

  // The tokenizer of the current models, loaded before the first request is served: its load
  // (a second or more) must not count against a client's timeout.
  await tokenizer("gpt-4o-mini");
  /**
   * The provider's view of the load: a model request is open from its arrival until its answer
   * is sent (a stream: its last byte, or the client leaving), whatever the answer.
   */
  async function measured(request: Request): Promise<Response> {
    if (
      request.method !== "POST" ||
      !MODEL_ROUTES.has(new URL(request.url).pathname.replace(/\/+$/, ""))
    )
      return handle(request);
    concurrent++;
    maxConcurrent = Math.max(maxConcurrent, concurrent);
    startedAt.push(Date.now());
    if (startedAt.length > 10_000) startedAt.shift();
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      concurrent--;
    };
    try {
      const response = await handle(request);
      if (!response.body) {
        close();
        return response;
      }
      const reader = response.body.getReader();
      const body = new ReadableStream<Uint8Array>({
        async pull(controller) {
          try {
            const { done, value } = await reader.read();
            if (done) {
              close();
              controller.close();
            } else controller.enqueue(value);
          } catch (error) {
            close();
            controller.error(error);
          }
        },
        cancel(reason) {
          close();
          return reader.cancel(reason);
        },
      });
      return new Response(body, { status: response.status, headers: response.headers });
    } catch (error) {
      close();
      throw error;
    }
  }

  const server = await serve(measured, {
    port: options.port,
    host,
    name: "fake OpenAI",
    onError: (error) =>
      send(500, {
        error: { message: (error as Error).message, type: "server_error", param: null, code: null },
      }),
  });

  return {
    url: `${server.url}/v1`,
    close: async () => {
      for (const controller of inFlight) controller.abort();
      await server.close();
    },
    failNext,
    calls: () => calls,
    stats,
    setChunkMs,
    revokeKey: (key) => void revoked.add(key),
    setFlexCapacity: (available) => {
      flexAvailable = available;
    },
    setReasoning,
    setShutdownDate,
    models: () => [...catalogue.values()],
    reset,
  };
}

/**
 * The hidden reasoning before the text: the prompt's `[fake:reasoning:N:MS]`, else the control
 * API's, else the model's own (a reasoning model reasons by default, `REASONING_TOKENS` by the
 * effort asked, `medium` when none), else none.
 */
function reasoningFor(
  prompt: Prompt,
  model: CatalogueModel,
  set: FakeReasoning | null,
): FakeReasoning | null {
  const marker = /\[fake:reasoning:(\d+):(\d+)\]/.exec(prompt.all);
  if (marker) return { tokens: Number(marker[1]), ms: Number(marker[2]) };
  if (set) return set;
  if (!model.reasons) return null;
  const tokens = REASONING_TOKENS[prompt.reasoningEffort ?? DEFAULT_EFFORT] ?? 0;
  return tokens > 0 ? { tokens, ms: tokens * REASONING_MS_PER_TOKEN } : null;
}

/**
 * The tier that serves the call: flex when asked (the model has it, else it was refused),
 * priority when asked and the model has it, the default tier otherwise (`auto`, `default`,
 * `scale`, none, a priority the model lacks); `[fake:served_tier:<tier>]` serves another, as
 * OpenAI may serve a flex or priority request at another tier.
 */
function tierServed(prompt: Prompt, model: CatalogueModel): string {
  const marker = /\[fake:served_tier:([a-z]+)\]/.exec(prompt.all);
  if (marker) return marker[1] as string;
  const asked = prompt.serviceTier;
  if (asked === "flex" || (asked === "priority" && model.tiers.includes("priority"))) return asked;
  return "default";
}

const RATE_HEADERS = {
  "openai-processing-ms": "12",
  "x-ratelimit-limit-requests": "500",
  "x-ratelimit-remaining-requests": "499",
  "x-ratelimit-reset-requests": "120ms",
  "x-ratelimit-limit-tokens": "200000",
  "x-ratelimit-remaining-tokens": "199000",
  "x-ratelimit-reset-tokens": "6ms",
};

const isMidStream = (kind: FailKind): kind is MidStreamKind =>
  (MID_STREAM_KINDS as readonly string[]).includes(kind);

function reply(error: ErrorReply): Response {
  return send(error.status, error.body, error.headers);
}

function send(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: {
      "content-type": "application/json",
      "x-request-id": `req_${randomBytes(16).toString("hex")}`,
      "openai-version": "2020-10-01",
      ...headers,
    },
  });
}
