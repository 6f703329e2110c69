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
 *
 * Laid out as dev/qstash/ is: state.ts (what it holds between requests), routes.ts (the HTTP
 * surface and the load), call.ts (an accepted call answered and billed), control.ts (the
 * control API), replies.ts (the JSON replies); this file starts it.
 */
import { serve } from "../http/serve.ts";
import type { CatalogueModel, ShutdownDates } from "./catalogue.ts";
import type { FailKind, FailOptions } from "./errors.ts";
import { send } from "./replies.ts";
import { measured } from "./routes.ts";
import { type FakeReasoning, FakeState, type FakeStats } from "./state.ts";
import { tokenizer } from "./stream.ts";

export type { CatalogueModel, ShutdownDates } from "./catalogue.ts";
export type { FailKind, FailOptions } from "./errors.ts";
export type { FakeReasoning, FakeRequest, FakeStats } from "./state.ts";

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

export async function startFakeOpenAI(options: FakeOpenAIOptions): Promise<FakeOpenAI> {
  const host = options.host ?? "127.0.0.1";
  const state = new FakeState(options);
  // The tokenizer of the current models, loaded before the first request is served: its load
  // (a second or more) must not count against a client's timeout.
  await tokenizer("gpt-4o-mini");
  const server = await serve((request) => measured(state, request), {
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
      for (const controller of state.inFlight) controller.abort();
      await server.close();
    },
    failNext: (kind, count, opts) => state.failNext(kind, count, opts),
    calls: () => state.calls,
    stats: () => state.stats(),
    setChunkMs: (ms) => state.setChunkMs(ms),
    revokeKey: (key) => void state.revoked.add(key),
    setFlexCapacity: (available) => {
      state.flexAvailable = available;
    },
    setReasoning: (reasoning) => state.setReasoning(reasoning),
    setShutdownDate: (model, date) => state.setShutdownDate(model, date),
    models: () => [...state.catalogue.values()],
    reset: () => state.reset(),
  };
}
