/**
 * How each API frames a streamed answer, event by event, as OpenAI sends it.
 *
 * Chat Completions (openai-node src/resources/chat/completions/completions.ts,
 * `ChatCompletionChunk`; tests/lib/ChatCompletionStream.test.ts): `data: {chunk}` lines, the first
 * with the assistant role, one per token, the last with the finish reason; with
 * `stream_options.include_usage` a chunk with `choices: []` and the usage (every other chunk then
 * carries `usage: null`); then `data: [DONE]`. An error inside the stream is a
 * `data: {"error": {...}}` chunk, and the connection closes.
 *
 * Responses (src/resources/responses/responses.ts, `ResponseStreamEvent` and each event's type;
 * tests/lib/__snapshots__/ResponseStream.test.ts.snap): `event: <type>` + `data: {type,
 * sequence_number, ...}` per event — `response.created`, `response.in_progress`, for a
 * reasoning model `response.output_item.added`/`done` of a `reasoning` item (its summary empty:
 * none was asked for), `response.output_item.added` (message), `response.content_part.added`,
 * one `response.output_text.delta` per token, `response.output_text.done`,
 * `response.content_part.done`, `response.output_item.done`, then `response.completed`, or
 * `response.incomplete` with `incomplete_details.reason: "max_output_tokens"`; the final response's
 * `service_tier` is the tier that served it. The usage is
 * `{input_tokens, input_tokens_details: {cached_tokens, cache_write_tokens}, output_tokens,
 * output_tokens_details: {reasoning_tokens}, total_tokens}` (`ResponseUsage`). A failure is a
 * `response.failed` event (the response with `status: "failed"` and `error: {code, message}`)
 * or an `error` event. openai-node's `ResponseErrorEvent` type has the fields flat, but OpenAI
 * sends them nested, `{"type":"error","error":{"type","code","message","param"},
 * "sequence_number":n}` (as frames captured from the API show), and the SDK's streaming code raises `APIError(undefined, data.error ?? data)` from it: the fake sends
 * the nested shape. No `[DONE]`: the stream ends with its last event.
 */
import { chatUsage, textFormat } from "./answers.ts";
import { streamErrorObject } from "./errors.ts";
import type { StreamOptions } from "./stream.ts";

export interface Usage {
  prompt: number;
  /** Visible and reasoning tokens: reasoning is billed as output. */
  completion: number;
  reasoning: number;
  /** Input tokens served from the prompt cache (part of `prompt`). */
  cached: number;
}

export interface Frame {
  open(): string;
  reasoningStart(): string;
  reasoningDone(): string;
  delta(text: string): string;
  finish(reason: "stop" | "length", usage: Usage): string;
  fail(kind: "stream_failed" | "stream_error", code: string | null, usage: Usage): string;
}

const SERVER_ERROR =
  "The server had an error while processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if the error persists.";

/** The tier a response reports: the one that served it. */
const tierOf = (o: StreamOptions) => o.servedTier;

export function chatFrame(o: StreamOptions): Frame {
  const created = Math.floor(Date.now() / 1000);
  const chunk = (choices: unknown[], usage?: unknown) => {
    const body: Record<string, unknown> = {
      id: `chatcmpl-${o.id}`,
      object: "chat.completion.chunk",
      created,
      model: o.prompt.model,
      service_tier: tierOf(o),
      system_fingerprint: "fp_fake",
      choices,
    };
    if (o.prompt.includeUsage) body.usage = usage ?? null;
    return `data: ${JSON.stringify(body)}\n\n`;
  };
  const choice = (delta: Record<string, unknown>, finish: string | null = null) => [
    { index: 0, delta, logprobs: null, finish_reason: finish },
  ];
  return {
    open: () => chunk(choice({ role: "assistant", content: "", refusal: null })),
    reasoningStart: () => "",
    reasoningDone: () => "",
    delta: (text) => chunk(choice(o.result.refusal ? { refusal: text } : { content: text })),
    finish: (reason, u) =>
      chunk(choice({}, reason)) +
      (o.prompt.includeUsage
        ? chunk([], chatUsage(u.prompt, u.completion, u.cached, u.reasoning))
        : "") +
      "data: [DONE]\n\n",
    fail: (_kind, code) =>
      `data: ${JSON.stringify({ error: streamErrorObject(code, o.prompt.model, "chat") })}\n\n`,
  };
}

export function responsesFrame(o: StreamOptions): Frame {
  let sequence = 0;
  let text = "";
  const createdAt = Math.floor(Date.now() / 1000);
  const reasoningItem = { id: `rs_${o.id}`, type: "reasoning", summary: [] };
  const messageId = `msg_${o.id}`;
  let reasoned = false;
  let messageStarted = false;
  const messageIndex = () => (reasoned ? 1 : 0);
  const event = (type: string, data: Record<string, unknown>) =>
    `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`;
  const refusal = o.result.refusal;
  const part = () =>
    refusal
      ? { type: "refusal", refusal: text }
      : { type: "output_text", text, annotations: [], logprobs: [] };
  const message = (status: "in_progress" | "completed" | "incomplete") => ({
    id: messageId,
    type: "message",
    status,
    role: "assistant",
    content: status === "in_progress" ? [] : [part()],
  });
  const response = (
    status: "in_progress" | "completed" | "incomplete" | "failed",
    extra: Record<string, unknown> = {},
  ) => ({
    id: `resp_${o.id}`,
    object: "response",
    created_at: createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: null,
    instructions: o.prompt.instructions,
    max_output_tokens: o.prompt.maxTokens ?? null,
    model: o.prompt.model,
    output: [] as unknown[],
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: o.reasoningEffort, summary: null },
    safety_identifier: o.prompt.safetyIdentifier ?? null,
    // Echoed as asked while in progress; the tier that served it at the end.
    service_tier: status === "in_progress" ? (o.prompt.serviceTier ?? "auto") : tierOf(o),
    store: o.prompt.store,
    temperature: 1,
    text: { format: textFormat(o.prompt), verbosity: "medium" },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage: null,
    user: null,
    metadata: {},
    ...extra,
  });
  const usage = (u: Usage) => ({
    input_tokens: u.prompt,
    input_tokens_details: { cached_tokens: u.cached, cache_write_tokens: 0 },
    output_tokens: u.completion,
    output_tokens_details: { reasoning_tokens: u.reasoning },
    total_tokens: u.prompt + u.completion,
  });
  const output = (status: "completed" | "incomplete") => [
    ...(reasoned ? [reasoningItem] : []),
    ...(messageStarted ? [message(status)] : []),
  ];
  const startMessage = () => {
    if (messageStarted) return "";
    messageStarted = true;
    return (
      event("response.output_item.added", {
        output_index: messageIndex(),
        item: message("in_progress"),
      }) +
      event("response.content_part.added", {
        item_id: messageId,
        output_index: messageIndex(),
        content_index: 0,
        part: refusal
          ? { type: "refusal", refusal: "" }
          : { type: "output_text", text: "", annotations: [], logprobs: [] },
      })
    );
  };
  const endMessage = (status: "completed" | "incomplete") =>
    messageStarted
      ? (refusal
          ? event("response.refusal.done", {
              item_id: messageId,
              output_index: messageIndex(),
              content_index: 0,
              refusal: text,
            })
          : event("response.output_text.done", {
              item_id: messageId,
              output_index: messageIndex(),
              content_index: 0,
              text,
              logprobs: [],
            })) +
        event("response.content_part.done", {
          item_id: messageId,
          output_index: messageIndex(),
          content_index: 0,
          part: part(),
        }) +
        event("response.output_item.done", {
          output_index: messageIndex(),
          item: message(status),
        })
      : "";
  return {
    open: () =>
      event("response.created", { response: response("in_progress") }) +
      event("response.in_progress", { response: response("in_progress") }),
    reasoningStart: () => {
      reasoned = true;
      return event("response.output_item.added", { output_index: 0, item: reasoningItem });
    },
    reasoningDone: () =>
      event("response.output_item.done", { output_index: 0, item: reasoningItem }),
    delta: (delta) => {
      const start = startMessage();
      text += delta;
      return (
        start +
        event(
          refusal ? "response.refusal.delta" : "response.output_text.delta",
          refusal
            ? { item_id: messageId, output_index: messageIndex(), content_index: 0, delta }
            : {
                item_id: messageId,
                output_index: messageIndex(),
                content_index: 0,
                delta,
                logprobs: [],
              },
        )
      );
    },
    finish: (reason, u) => {
      const status = reason === "length" ? "incomplete" : "completed";
      return (
        endMessage(status) +
        event(`response.${status}`, {
          response: response(status, {
            output: output(status),
            usage: usage(u),
            ...(status === "incomplete"
              ? { incomplete_details: { reason: "max_output_tokens" } }
              : {}),
          }),
        })
      );
    },
    fail: (kind, code, u) =>
      kind === "stream_error"
        ? event("error", { error: streamErrorObject(code, o.prompt.model, "responses") })
        : event("response.failed", {
            response: response("failed", {
              output: output("incomplete"),
              usage: usage(u),
              error: { code: code ?? "server_error", message: SERVER_ERROR },
            }),
          }),
  };
}
