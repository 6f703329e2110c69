/**
 * The fake model's streamed Chat Completions answer, as OpenAI sends it with `stream: true`:
 * `content-type: text/event-stream`, one `data: {chat.completion.chunk}\n\n` event per token
 * (the first with the assistant role, the last with the finish reason), then, when
 * `stream_options.include_usage` is set, a chunk with `choices: []` and the usage (every other
 * chunk then carries `usage: null`), then `data: [DONE]\n\n`.
 *
 * Tokens are o200k_base tokens (gpt-tokenizer), so the usage the fake reports and the tokens a
 * client counts on its side agree. `max_completion_tokens` (or `max_tokens`) stops the stream
 * with finish_reason "length". The stream stops the moment the client disconnects: what was
 * written until then is what a provider would bill, and `onToken` counts it.
 */
import { countTokens, decode, encode } from "gpt-tokenizer/encoding/o200k_base";
import type { Answer, Prompt } from "./answers.ts";

export interface StreamOptions {
  id: string;
  prompt: Prompt;
  result: Answer;
  includeUsage: boolean;
  /** Pause before each token's chunk. */
  chunkMs: number;
  headers: Record<string, string>;
  /** Called once per completion token written to the client. */
  onToken(): void;
}

export interface StreamOutcome {
  completionTokens: number;
  finishReason: "stop" | "length" | "client_closed";
}

/** Token-sized pieces of `text`: one per o200k_base token (merged where a token splits a character). */
export function tokenPieces(text: string): string[] {
  const pieces: string[] = [];
  let pending: number[] = [];
  for (const token of encode(text)) {
    pending.push(token);
    const piece = decode(pending);
    if (piece.includes("\uFFFD")) continue;
    pieces.push(piece);
    pending = [];
  }
  if (pending.length > 0) pieces.push(decode(pending));
  return pieces;
}

/**
 * The streamed answer as a Response whose body is written as the tokens come, and the outcome,
 * settled when the last event is written or the client has gone (`signal`, or the body
 * cancelled by the server when the connection closes).
 */
export function streamChatCompletion(
  o: StreamOptions,
  signal: AbortSignal,
): { response: Response; outcome: Promise<StreamOutcome> } {
  let cancelled = false;
  let controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  const body = new ReadableStream<Uint8Array>({
    start: (c) => {
      controller = c;
    },
    cancel: () => {
      cancelled = true;
    },
  });
  const closed = () => cancelled || signal.aborted;
  const encoder = new TextEncoder();
  const write = (text: string) => {
    if (!closed()) controller?.enqueue(encoder.encode(text));
  };
  const outcome = writeEvents(o, write, closed).finally(() => {
    if (!cancelled) controller?.close();
  });
  const response = new Response(body, {
    status: 200,
    headers: {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      ...o.headers,
    },
  });
  return { response, outcome };
}

async function writeEvents(
  o: StreamOptions,
  write: (text: string) => void,
  closed: () => boolean,
): Promise<StreamOutcome> {
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], usage?: unknown) => {
    const body: Record<string, unknown> = {
      id: `chatcmpl-${o.id}`,
      object: "chat.completion.chunk",
      created,
      model: o.prompt.model,
      service_tier: "default",
      system_fingerprint: "fp_fake",
      choices,
    };
    if (o.includeUsage) body.usage = usage ?? null;
    write(`data: ${JSON.stringify(body)}\n\n`);
  };
  const choice = (delta: Record<string, unknown>, finish: string | null = null) => [
    { index: 0, delta, logprobs: null, finish_reason: finish },
  ];

  chunk(choice({ role: "assistant", content: "", refusal: null }));

  let pieces = tokenPieces(o.result.text);
  const max = o.prompt.maxTokens;
  const truncated = max !== undefined && pieces.length > max;
  if (truncated) pieces = pieces.slice(0, max);
  let sent = 0;
  for (const piece of pieces) {
    if (o.chunkMs > 0) await sleep(o.chunkMs);
    if (closed()) return { completionTokens: sent, finishReason: "client_closed" };
    chunk(choice({ content: piece }));
    sent += 1;
    o.onToken();
  }
  if (closed()) return { completionTokens: sent, finishReason: "client_closed" };
  const finishReason = truncated ? "length" : "stop";
  chunk(choice({}, finishReason));
  if (o.includeUsage) {
    const promptTokens = countTokens(o.prompt.all);
    chunk([], {
      prompt_tokens: promptTokens,
      completion_tokens: sent,
      total_tokens: promptTokens + sent,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: {
        reasoning_tokens: 0,
        audio_tokens: 0,
        accepted_prediction_tokens: 0,
        rejected_prediction_tokens: 0,
      },
    });
  }
  write("data: [DONE]\n\n");
  return { completionTokens: sent, finishReason };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
