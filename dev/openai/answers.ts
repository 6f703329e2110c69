/**
 * What the fake model answers: a short document derived only from the prompt (same prompt,
 * same text), in the minimal Chat Completions / Responses shapes of openai-node's types
 * (src/resources/chat, src/resources/responses).
 */
import { createHash } from "node:crypto";
import { type ErrorReply, openAIError } from "./errors.ts";

export interface Prompt {
  model: string;
  /** The last user message (or every text when there is none). */
  lastUser: string;
  /** Every text of the request, searched for `[fake:…]` markers. */
  all: string;
  /** Each message's role and text, as OpenAI bills them. */
  messages: { role: string; text: string }[];
  maxTokens: number | undefined;
  /** Which API was called: it frames the answer. */
  api: "chat" | "responses";
  /** `stream: true`, and (Chat Completions) whether the usage chunk was asked for. */
  stream: boolean;
  includeUsage: boolean;
  /** `service_tier` as sent (`auto`, `default`, `flex`, ...). */
  serviceTier: string | undefined;
  safetyIdentifier: string | undefined;
  /** Responses `store` (default true, as OpenAI's). */
  store: boolean;
  /** A JSON schema to fill, `true` for plain JSON mode, `false` for text. */
  json: Record<string, unknown> | boolean;
}

type Body = Record<string, unknown>;

/**
 * The request parameters each API takes that the fake serves (openai-node's
 * `ChatCompletionCreateParamsBase` / `ResponseCreateParamsBase`, the ones a text answer needs).
 * Anything else is refused as OpenAI refuses a parameter it does not know, 400
 * `unknown_parameter`, so a misspelt parameter fails here as it would in production.
 */
const CHAT_PARAMS = new Set([
  "model",
  "messages",
  "stream",
  "stream_options",
  "max_completion_tokens",
  "max_tokens",
  "response_format",
  "service_tier",
  "safety_identifier",
  "prompt_cache_key",
  "store",
  "metadata",
  "temperature",
  "top_p",
  "user",
  "reasoning_effort",
]);
const RESPONSES_PARAMS = new Set([
  "model",
  "input",
  "instructions",
  "stream",
  "max_output_tokens",
  "text",
  "service_tier",
  "safety_identifier",
  "prompt_cache_key",
  "store",
  "metadata",
  "temperature",
  "top_p",
  "user",
  "reasoning",
  "truncation",
]);
const SERVICE_TIERS = new Set(["auto", "default", "flex", "scale", "priority"]);

function unknownParameter(body: Body, known: Set<string>): ErrorReply | undefined {
  const unknown = Object.keys(body).find((key) => !known.has(key));
  if (unknown === undefined) return undefined;
  return openAIError(
    400,
    `Unknown parameter: '${unknown}'.`,
    "invalid_request_error",
    unknown,
    "unknown_parameter",
  );
}

export function parseChatRequest(body: Body): Prompt | ErrorReply {
  const invalid = unknownParameter(body, CHAT_PARAMS) ?? validate(body, "messages");
  if (invalid) return invalid;
  const messages = (body.messages as unknown[]).filter(isRecord);
  const format = isRecord(body.response_format) ? body.response_format : {};
  const schema = isRecord(format.json_schema) ? format.json_schema.schema : undefined;
  return prompt(
    "chat",
    body,
    messages,
    format.type,
    schema,
    body.max_completion_tokens ?? body.max_tokens,
  );
}

export function parseResponsesRequest(body: Body): Prompt | ErrorReply {
  const invalid = unknownParameter(body, RESPONSES_PARAMS) ?? validate(body, "input");
  if (invalid) return invalid;
  const input =
    typeof body.input === "string" ? [{ role: "user", content: body.input }] : body.input;
  const items = [
    { role: "system", content: body.instructions },
    ...(input as unknown[]).filter(isRecord),
  ];
  const text = isRecord(body.text) ? body.text : {};
  const format = isRecord(text.format) ? text.format : {};
  return prompt("responses", body, items, format.type, format.schema, body.max_output_tokens);
}

function validate(body: Body, field: "messages" | "input"): ErrorReply | undefined {
  if (typeof body.model !== "string" || body.model === "") {
    return openAIError(400, "you must provide a model parameter", "invalid_request_error");
  }
  const value = body[field];
  if (
    value === undefined ||
    !(Array.isArray(value) || (field === "input" && typeof value === "string"))
  ) {
    return openAIError(
      400,
      `Missing required parameter: '${field}'.`,
      "invalid_request_error",
      field,
      "missing_required_parameter",
    );
  }
  if (body.service_tier != null && !SERVICE_TIERS.has(String(body.service_tier))) {
    return openAIError(
      400,
      `Invalid value: '${String(body.service_tier)}'. Supported values are: 'auto', 'default', 'flex', 'scale', and 'priority'.`,
      "invalid_request_error",
      "service_tier",
      "invalid_value",
    );
  }
  return undefined;
}

function prompt(
  api: Prompt["api"],
  body: Body,
  items: Body[],
  formatType: unknown,
  schema: unknown,
  maxTokens: unknown,
): Prompt {
  const texts = items.map((item) => ({ role: item.role, text: contentText(item.content) }));
  const all = texts.map((t) => t.text).join("\n");
  const lastUser = texts.filter((t) => t.role === "user").pop()?.text ?? all;
  const json =
    formatType === "json_schema" && isRecord(schema)
      ? schema
      : formatType === "json_object" || formatType === "json_schema";
  return {
    model: body.model as string,
    lastUser,
    all,
    messages: items
      .filter((item) => item.content !== undefined)
      .map((item) => ({ role: String(item.role ?? "user"), text: contentText(item.content) })),
    maxTokens: typeof maxTokens === "number" ? maxTokens : undefined,
    api,
    stream: body.stream === true,
    includeUsage: isRecord(body.stream_options) && body.stream_options.include_usage === true,
    serviceTier: typeof body.service_tier === "string" ? body.service_tier : undefined,
    safetyIdentifier:
      typeof body.safety_identifier === "string" ? body.safety_identifier : undefined,
    store: body.store !== false,
    json,
  };
}

function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content
    .filter(isRecord)
    .map((part) => (typeof part.text === "string" ? part.text : ""))
    .join("\n");
}

export interface Answer {
  text: string;
  /** `[fake:refuse]`: the text is a refusal (Chat `delta.refusal`, Responses `refusal` part). */
  refusal: boolean;
  truncated: boolean;
  promptTokens: number;
  completionTokens: number;
}

/** The deterministic answer: a digest and an echo of the last user message. */
export function answer(prompt: Prompt): Answer {
  const digest = createHash("sha256").update(prompt.lastUser).digest("hex").slice(0, 12);
  const words = prompt.lastUser.split(/\s+/).filter(Boolean).length;
  const echo = prompt.lastUser.replace(/\s+/g, " ").trim().slice(0, 160);
  let text: string;
  if (prompt.json === false) {
    text = [
      `# Fake answer ${digest}`,
      "",
      `A deterministic answer from the local fake model to a prompt of ${words} words (${prompt.lastUser.length} characters).`,
      "",
      `> ${echo}`,
    ].join("\n");
    const long = /\[fake:tokens:(\d+)\]/.exec(prompt.all);
    if (long) text = longText(text, Number(long[1]));
    const said = sayText(prompt.all);
    if (said !== null) text = said;
    if (prompt.all.includes("[fake:refuse]")) text = "I'm sorry, but I can't help with that.";
  } else if (prompt.json === true) {
    text = JSON.stringify({ digest, words, echo });
  } else {
    text = JSON.stringify(fromSchema(prompt.json, echo, parseInt(digest.slice(0, 6), 16) % 1000));
  }
  const tokens = (s: string) => Math.max(1, Math.ceil(s.length / 4));
  const truncated = prompt.maxTokens !== undefined && tokens(text) > prompt.maxTokens;
  if (truncated) text = text.slice(0, Math.max(0, (prompt.maxTokens ?? 0) * 4));
  return {
    text,
    refusal: prompt.json === false && prompt.all.includes("[fake:refuse]"),
    truncated,
    promptTokens: tokens(prompt.all),
    completionTokens: tokens(text),
  };
}

/**
 * `[fake:tokens:N]`: the answer goes on for about N tokens (four characters each, the fake's
 * usual estimate), so a stream lasts as long as a test needs; max_completion_tokens still cuts it.
 */
function longText(head: string, tokens: number): string {
  const line = "\n\nThe queue holds the job; the worker streams the answer one token at a time.";
  const want = Math.min(tokens, 100_000) * 4;
  let text = head;
  while (text.length < want) text += line;
  return text.slice(0, Math.max(head.length, want));
}

/**
 * `[fake:say:"<JSON string>"]` or `[fake:say:"<JSON string>"*N]`: the answer is exactly that
 * text (repeated N times, at most 1,000,000 characters), so a test can make the model stream
 * anything: special-token strings, lone surrogates (`"\\ud800"`), one huge word, any script.
 * A literal that is not a JSON string is not a directive.
 */
function sayText(all: string): string | null {
  const m = /\[fake:say:("(?:[^"\\]|\\.)*")(?:\*(\d+))?\]/.exec(all);
  if (!m) return null;
  let said: unknown;
  try {
    said = JSON.parse(m[1] as string);
  } catch {
    return null;
  }
  if (typeof said !== "string") return null;
  const times = Math.max(1, Number(m[2] ?? 1));
  return said
    .repeat(Math.min(times, Math.floor(1_000_000 / Math.max(1, said.length))))
    .slice(0, 1_000_000);
}

/** A value that satisfies simple JSON schemas (objects, arrays, enums, scalars; no $ref). */
function fromSchema(schema: Body, echo: string, n: number, depth = 0): unknown {
  if (depth > 8) return null;
  if (Array.isArray(schema.enum)) return schema.enum[0] ?? null;
  if ("const" in schema) return schema.const;
  const variants = schema.anyOf ?? schema.oneOf;
  if (Array.isArray(variants)) {
    const first = variants.filter(isRecord).find((v) => v.type !== "null");
    return first ? fromSchema(first, echo, n, depth + 1) : null;
  }
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type;
  switch (type) {
    case "object": {
      const properties = isRecord(schema.properties) ? schema.properties : {};
      return Object.fromEntries(
        Object.entries(properties).map(([key, sub]) => [
          key,
          isRecord(sub) ? fromSchema(sub, echo, n, depth + 1) : null,
        ]),
      );
    }
    case "array":
      return isRecord(schema.items) ? [fromSchema(schema.items, echo, n, depth + 1)] : [];
    case "string":
      return echo;
    case "integer":
    case "number":
      return n;
    case "boolean":
      return true;
    default:
      return null;
  }
}

export function chatCompletion(id: string, prompt: Prompt, result: Answer) {
  return {
    id: `chatcmpl-${id}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: prompt.model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: result.text, refusal: null },
        logprobs: null,
        finish_reason: result.truncated ? "length" : "stop",
      },
    ],
    usage: usage(result, "prompt_tokens", "completion_tokens"),
  };
}

export function response(id: string, prompt: Prompt, result: Answer) {
  return {
    id: `resp_${id}`,
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status: result.truncated ? "incomplete" : "completed",
    incomplete_details: result.truncated ? { reason: "max_output_tokens" } : null,
    error: null,
    model: prompt.model,
    output: [
      {
        type: "message",
        id: `msg_${id}`,
        status: result.truncated ? "incomplete" : "completed",
        role: "assistant",
        content: [{ type: "output_text", text: result.text, annotations: [] }],
      },
    ],
    usage: usage(result, "input_tokens", "output_tokens"),
  };
}

function usage(result: Answer, input: string, output: string) {
  return {
    [input]: result.promptTokens,
    [output]: result.completionTokens,
    total_tokens: result.promptTokens + result.completionTokens,
  };
}

export function isRecord(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
