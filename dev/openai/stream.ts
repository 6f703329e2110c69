/**
 * The fake model's streamed answer, token by token, as OpenAI streams it with `stream: true`
 * (`content-type: text/event-stream`); the framing of each API is in frames.ts: Chat Completions
 * chunks ending in `data: [DONE]`, or Responses events (`event:` names, `sequence_number`).
 *
 * Tokens are the model's tokens as OpenAI's own tokenizer makes them: `tiktoken` (the WASM
 * build of OpenAI's tiktoken), not the app's tokenizer, so a bug in the app's counting shows up
 * as a disagreement. Special-token strings in the text (`<|endoftext|>`, `<|im_start|>`, ...)
 * are plain text (`encode_ordinary`), as OpenAI encodes them in message content; the prompt is
 * billed as OpenAI bills chat messages (OpenAI cookbook, "How to count tokens with tiktoken": 3
 * per message, its role and content, plus 3 for the reply's priming; a Responses `input` string
 * is one user message). Any text streams, even text no tokenizer makes: a lone surrogate is a
 * piece (and a token) of its own, sent JSON-escaped. The output bound (`max_output_tokens`,
 * `max_completion_tokens` or `max_tokens`) stops the stream: finish_reason "length", or a
 * Responses `response.incomplete` with reason `max_output_tokens`.
 *
 * A reasoning model's silent start (`reasoning`): N hidden reasoning tokens over T ms before the
 * first visible token, billed as output (they count against the bound, and are in the usage's
 * `reasoning_tokens` and in the output tokens). The stream stops the moment the client
 * disconnects: what was generated until then is what a provider would bill, and `onToken` /
 * `onReasoning` count it.
 */
import type { Tiktoken, TiktokenModel } from "tiktoken";
import type { Answer, Prompt } from "./answers.ts";
import { chatFrame, type Frame, responsesFrame, type Usage } from "./frames.ts";

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

/** A failure inside a stream OpenAI had accepted (HTTP 200). */
export type MidStream = {
  /**
   * `stream_failed`: a Responses `response.failed` event; `stream_error`: an `error` event (Chat
   * Completions: an error chunk, for both); `stream_cut`: the connection drops, no last event.
   */
  kind: "stream_failed" | "stream_error" | "stream_cut";
  /** Visible tokens streamed before it. */
  afterTokens: number;
  code: string | null;
};

export interface StreamOptions {
  id: string;
  prompt: Prompt;
  result: Answer;
  /** Pause before each token's chunk. */
  chunkMs: number;
  headers: Record<string, string>;
  /** Hidden reasoning before the first visible token: `tokens` over `ms`. */
  reasoning: { tokens: number; ms: number } | null;
  /** The effort a reasoning response echoes (null for a model that does not reason). */
  reasoningEffort: string | null;
  /** The tier the final response or usage chunk reports (what served it). */
  servedTier: string;
  /** Input tokens the usage reports as cached (`[fake:cached:N]`). */
  cachedTokens: number;
  midStream: MidStream | null;
  /** Called once per visible completion token written to the client. */
  onToken(): void;
  /** Called with reasoning tokens as they are spent (billed, never sent). */
  onReasoning(tokens: number): void;
}

export interface StreamOutcome {
  completionTokens: number;
  reasoningTokens: number;
  finishReason: "stop" | "length" | "client_closed" | MidStream["kind"];
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
 *
 * Made as they are streamed, a segment of text at a time, never the whole answer at once: the
 * fake runs in the process of the stand-ins and the tests, and BPE on an adversarial answer
 * (`[fake:say:…*400]` of long unspaced words) takes seconds, during which nothing else in the
 * process runs, while a stream bounded by `max_output_tokens` needs only its first few
 * segments. A segment ends before a space between two non-spaces, where the tokenizer's own
 * pre-split cuts (so the tokens are those of the whole text), or, in text with no such space for
 * a long way, at a character boundary.
 */
export function* tokenPieces(enc: Tiktoken, text: string): Generator<Piece> {
  for (const part of text.split(/([\uD800-\uDFFF])/u)) {
    if (part === "") continue;
    if (/^[\uD800-\uDFFF]$/u.test(part)) {
      yield { text: part, tokens: 1 };
      continue;
    }
    for (const segment of segments(part)) yield* segmentPieces(enc, segment);
  }
}

/** Segments at least `SEGMENT` characters long (the last may be shorter), cut as above. */
const SEGMENT = 2_048;
const SEGMENT_MAX = 8 * SEGMENT;

function* segments(text: string): Generator<string> {
  let start = 0;
  while (text.length - start > SEGMENT_MAX) {
    const space = /(?<=\S) (?=\S)/g;
    space.lastIndex = start + SEGMENT;
    const found = space.exec(text.slice(0, start + SEGMENT_MAX));
    let cut = found ? found.index : start + SEGMENT_MAX;
    // Never between the two halves of a surrogate pair.
    if (!found && /[\uDC00-\uDFFF]/.test(text[cut] ?? "")) cut -= 1;
    yield text.slice(start, cut);
    start = cut;
  }
  if (start < text.length) yield text.slice(start);
}

function* segmentPieces(enc: Tiktoken, text: string): Generator<Piece> {
  // A token may end inside a character: its bytes wait for the next token's until they are
  // whole UTF-8.
  let pending: number[] = [];
  let tokens = 0;
  for (const token of plainTokens(enc, text)) {
    pending.push(...enc.decode_single_token_bytes(token));
    tokens += 1;
    let piece: string;
    try {
      piece = utf8.decode(new Uint8Array(pending));
    } catch {
      continue;
    }
    yield { text: piece, tokens };
    pending = [];
    tokens = 0;
  }
  if (tokens > 0) yield { text: new TextDecoder().decode(new Uint8Array(pending)), tokens };
}

/**
 * The streamed answer as a Response whose body is written as the tokens come, and the outcome,
 * settled when the last event is written or the client has gone (`signal`, or the body
 * cancelled by the server when the connection closes).
 */
export function streamAnswer(
  o: StreamOptions,
  signal: AbortSignal,
): { response: Response; outcome: Promise<StreamOutcome> } {
  let cancelled = false;
  let cut = false;
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
    if (!closed() && text) controller?.enqueue(encoder.encode(text));
  };
  const frame = o.prompt.api === "responses" ? responsesFrame(o) : chatFrame(o);
  const outcome = writeEvents(o, frame, write, closed)
    .then(async (r) => {
      // `[fake:hold_open]`: a server (a proxy) that keeps the connection open after the last
      // event, until the client leaves (at most a minute).
      if (o.prompt.all.includes("[fake:hold_open]"))
        for (let i = 0; i < 3_000 && !closed(); i++) await sleep(20);
      if (r.finishReason !== "stream_cut") return r;
      cut = true;
      // Erroring a body discards what it still queues: let the written events go out first.
      for (let i = 0; i < 100 && !closed() && (controller?.desiredSize ?? 1) < 1; i++)
        await sleep(10);
      await sleep(20);
      return r;
    })
    .finally(() => {
      if (cancelled) return;
      // A cut connection: the body errors, and the server drops the connection mid-response.
      if (cut) controller?.error(new Error("connection cut by the fake model"));
      else controller?.close();
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
  frame: Frame,
  write: (text: string) => void,
  closed: () => boolean,
): Promise<StreamOutcome> {
  const enc = await tokenizer(o.prompt.model);
  const max = o.prompt.maxTokens;
  let sent = 0;
  let reasoned = 0;
  const usage = (): Usage => ({
    prompt: promptTokens(enc, o.prompt.messages),
    completion: sent + reasoned,
    reasoning: reasoned,
    cached: o.cachedTokens,
  });
  const gone = (): StreamOutcome => ({
    completionTokens: sent,
    reasoningTokens: reasoned,
    finishReason: "client_closed",
  });
  // After `afterTokens` visible tokens, or at the end when the answer is shorter.
  const broken = (atEnd = false): StreamOutcome | null => {
    const m = o.midStream;
    if (!m || (sent < m.afterTokens && !atEnd)) return null;
    if (m.kind !== "stream_cut") write(frame.fail(m.kind, m.code, usage()));
    return { completionTokens: sent, reasoningTokens: reasoned, finishReason: m.kind };
  };

  write(frame.open());
  // A failure before any token (a quota, a limit) comes right after the response opens, before
  // the model has reasoned or written anything.
  if (o.midStream?.afterTokens === 0) {
    const failed = broken();
    if (failed) return failed;
  }
  if (o.reasoning && o.reasoning.tokens > 0) {
    // Silent: spent (and billed) as time passes, nothing visible is sent.
    const want = max === undefined ? o.reasoning.tokens : Math.min(o.reasoning.tokens, max);
    write(frame.reasoningStart());
    const slices = 10;
    for (let i = 1; i <= slices; i++) {
      await sleep(o.reasoning.ms / slices);
      if (closed()) return gone();
      const spent = Math.round((want * i) / slices);
      o.onReasoning(spent - reasoned);
      reasoned = spent;
    }
    write(frame.reasoningDone());
  }

  const pieces = tokenPieces(enc, o.result.text);
  let truncated = max !== undefined && reasoned >= max;
  for (const piece of truncated ? [] : pieces) {
    const failed = broken();
    if (failed) return failed;
    if (max !== undefined && reasoned + sent + piece.tokens > max) {
      truncated = true;
      break;
    }
    if (o.chunkMs > 0) await sleep(o.chunkMs);
    if (closed()) return gone();
    write(frame.delta(piece.text));
    sent += piece.tokens;
    for (let i = 0; i < piece.tokens; i++) o.onToken();
  }
  if (closed()) return gone();
  const failed = broken(true);
  if (failed) return failed;
  const finishReason = truncated ? "length" : "stop";
  write(frame.finish(finishReason, usage()));
  return { completionTokens: sent, reasoningTokens: reasoned, finishReason };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
