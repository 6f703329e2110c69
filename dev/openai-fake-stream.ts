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
import type { ServerResponse } from "node:http";
import { countTokens, decode, encode } from "gpt-tokenizer/encoding/o200k_base";
import type { Answer, Prompt } from "./openai-fake-answers.ts";

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

export async function streamChatCompletion(
  res: ServerResponse,
  o: StreamOptions,
): Promise<StreamOutcome> {
  const created = Math.floor(Date.now() / 1000);
  let closed = false;
  res.on("close", () => {
    closed = true;
  });
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
    res.write(`data: ${JSON.stringify(body)}\n\n`);
  };
  const choice = (delta: Record<string, unknown>, finish: string | null = null) => [
    { index: 0, delta, logprobs: null, finish_reason: finish },
  ];

  res.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    ...o.headers,
  });
  chunk(choice({ role: "assistant", content: "", refusal: null }));

  let pieces = tokenPieces(o.result.text);
  const max = o.prompt.maxTokens;
  const truncated = max !== undefined && pieces.length > max;
  if (truncated) pieces = pieces.slice(0, max);
  let sent = 0;
  for (const piece of pieces) {
    if (o.chunkMs > 0) await sleep(o.chunkMs);
    if (closed || res.destroyed) return { completionTokens: sent, finishReason: "client_closed" };
    chunk(choice({ content: piece }));
    sent += 1;
    o.onToken();
  }
  if (closed || res.destroyed) return { completionTokens: sent, finishReason: "client_closed" };
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
  res.end("data: [DONE]\n\n");
  return { completionTokens: sent, finishReason };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
