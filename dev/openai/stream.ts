/**
 * The fake model's streamed Chat Completions answer, as OpenAI sends it with `stream: true`:
 * `content-type: text/event-stream`, one `data: {chat.completion.chunk}\n\n` event per token
 * (the first with the assistant role, the last with the finish reason), then, when
 * `stream_options.include_usage` is set, a chunk with `choices: []` and the usage (every other
 * chunk then carries `usage: null`), then `data: [DONE]\n\n`.
 *
 * Tokens are the model's tokens as OpenAI's own tokenizer makes them: `tiktoken` (the WASM
 * build of OpenAI's tiktoken), not the app's tokenizer, so a bug in the app's counting shows up
 * as a disagreement. Special-token strings in the text (`<|endoftext|>`, `<|im_start|>`, ...)
 * are plain text (`encode_ordinary`), as OpenAI encodes them in message content; the prompt is
 * billed as OpenAI bills chat messages (OpenAI cookbook, "How to count tokens with tiktoken": 3
 * per message, its role and content, plus 3 for the reply's priming). Any text streams, even
 * text no tokenizer makes: a lone surrogate is a piece (and a token) of its own, sent
 * JSON-escaped. `max_completion_tokens` (or `max_tokens`) stops the stream with finish_reason
 * "length". The stream stops the moment the client disconnects: what was written until then is
 * what a provider would bill, and `onToken` counts it.
 */
import type { Tiktoken, TiktokenModel } from "tiktoken";
import type { Answer, Prompt } from "./answers.ts";

type EncodingName = "o200k_base" | "cl100k_base";
const encoders = new Map<EncodingName, Promise<Tiktoken>>();

/**
 * The tokenizer OpenAI uses for `model`, by tiktoken's model map (cl100k_base for gpt-4,
 * gpt-4-turbo and gpt-3.5); o200k_base for a model it does not list (the current models).
 * Loaded once per encoding, on the first stream that needs it.
 */
export async function tokenizer(model: string): Promise<Tiktoken> {
  const tiktoken = await import("tiktoken");
  let name: EncodingName = "o200k_base";
  try {
    if (tiktoken.get_encoding_name_for_model(model as TiktokenModel) === "cl100k_base")
      name = "cl100k_base";
  } catch {
    // not in tiktoken's map: a current model
  }
  let encoder = encoders.get(name);
  if (!encoder) {
    encoder = Promise.resolve(tiktoken.get_encoding(name));
    encoders.set(name, encoder);
  }
  return encoder;
}

/** Tokens of `text` as plain text: special-token strings are not special in message content. */
export const plainTokens = (enc: Tiktoken, text: string): Uint32Array => enc.encode_ordinary(text);

/** The prompt tokens OpenAI bills for these chat messages. */
export function promptTokens(enc: Tiktoken, messages: { role: string; text: string }[]): number {
  let n = 3; // the reply is primed with <|start|>assistant<|message|>
  for (const m of messages)
    n += 3 + plainTokens(enc, m.role).length + plainTokens(enc, m.text).length;
  return n;
}

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

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Text streamed in one chunk, and the tokens it is. */
export interface Piece {
  text: string;
  tokens: number;
}

/**
 * Token-sized pieces of `text`: one per token (merged where a token splits a character), and one
 * per lone surrogate, which no tokenizer encodes (UTF-8 has no bytes for it).
 */
export function tokenPieces(enc: Tiktoken, text: string): Piece[] {
  const pieces: Piece[] = [];
  for (const part of text.split(/([\uD800-\uDFFF])/u)) {
    if (part === "") continue;
    if (/^[\uD800-\uDFFF]$/u.test(part)) {
      pieces.push({ text: part, tokens: 1 });
      continue;
    }
    // A token may end inside a character: its bytes wait for the next token's until they are
    // whole UTF-8.
    let pending: number[] = [];
    let tokens = 0;
    for (const token of plainTokens(enc, part)) {
      pending.push(...enc.decode_single_token_bytes(token));
      tokens += 1;
      let text: string;
      try {
        text = utf8.decode(new Uint8Array(pending));
      } catch {
        continue;
      }
      pieces.push({ text, tokens });
      pending = [];
      tokens = 0;
    }
    if (tokens > 0)
      pieces.push({ text: new TextDecoder().decode(new Uint8Array(pending)), tokens });
  }
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

  const enc = await tokenizer(o.prompt.model);
  const pieces = tokenPieces(enc, o.result.text);
  const max = o.prompt.maxTokens;
  let sent = 0;
  let truncated = false;
  for (const piece of pieces) {
    if (max !== undefined && sent + piece.tokens > max) {
      truncated = true;
      break;
    }
    if (o.chunkMs > 0) await sleep(o.chunkMs);
    if (closed()) return { completionTokens: sent, finishReason: "client_closed" };
    chunk(choice({ content: piece.text }));
    sent += piece.tokens;
    for (let i = 0; i < piece.tokens; i++) o.onToken();
  }
  if (closed()) return { completionTokens: sent, finishReason: "client_closed" };
  const finishReason = truncated ? "length" : "stop";
  chunk(choice({}, finishReason));
  if (o.includeUsage) {
    const prompt = promptTokens(enc, o.prompt.messages);
    chunk([], {
      prompt_tokens: prompt,
      completion_tokens: sent,
      total_tokens: prompt + sent,
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
