/**
 * What the fake model answers: a short document derived only from the prompt (same prompt,
 * same text), in the minimal Chat Completions / Responses shapes of openai-node's types
 * (src/resources/chat, src/resources/responses).
 */
import { createHash } from "node:crypto";
import { belowMinimum, type ErrorReply, openAIError } from "./errors.ts";
import { invalidFor, strictSchemaError, valueFor } from "./schema.ts";

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
  /** `true` for plain JSON mode (`json_object`), else `false` (a `json_schema` is `format`). */
  json: boolean;
  /** A `json_schema` format (Structured Outputs): the answer is JSON made from its schema. */
  format: JsonSchemaFormat | null;
  /** Responses `instructions`, as sent (billed as a system message; echoed in the response). */
  instructions: string | null;
  /** Responses `reasoning.effort`, Chat Completions `reasoning_effort`, as sent. */
  reasoningEffort: string | undefined;
}

/** What the call was served with and billed for, beyond the text: the fake's bill of it. */
export interface Served {
  /** The tier the response reports (what served it, not what was asked). */
  tier: string;
  reasoningTokens: number;
  cachedTokens: number;
}

export interface JsonSchemaFormat {
  name: string;
  schema: Record<string, unknown>;
  strict: boolean;
}

type Body = Record<string, unknown>;

/**
 * The request parameters each API takes that the fake serves (openai-node's
 * `ChatCompletionCreateParamsBase` / `ResponseCreateParamsBase`, the ones a text answer needs).
 * Anything else is refused as OpenAI refuses a parameter it does not know, 400
 * `unknown_parameter`, so a misspelt parameter fails here as it would in production.
 */
const BOTH_PARAMS = [
  "model",
  "stream",
  "service_tier",
  "safety_identifier",
  "prompt_cache_key",
  "store",
  "metadata",
  "temperature",
  "top_p",
  "user",
];
const CHAT_PARAMS = new Set([
  ...BOTH_PARAMS,
  "messages",
  "stream_options",
  "max_completion_tokens",
  "max_tokens",
  "response_format",
  "reasoning_effort",
]);
const RESPONSES_PARAMS = new Set([
  ...BOTH_PARAMS,
  "input",
  "instructions",
  "max_output_tokens",
  "text",
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
  let schema: JsonSchemaFormat | ErrorReply | null = null;
  if (format.type === "json_schema") {
    const config = isRecord(format.json_schema) ? format.json_schema : undefined;
    if (config === undefined) return missing("response_format.json_schema");
    schema = jsonSchemaFormat("chat", config, "response_format.json_schema");
    if ("status" in schema) return schema;
  }
  return prompt(
    "chat",
    body,
    messages,
    format.type,
    schema,
    body.max_completion_tokens ?? body.max_tokens,
  );
}

const missing = (param: string) =>
  openAIError(
    400,
    `Missing required parameter: '${param}'.`,
    "invalid_request_error",
    param,
    "missing_required_parameter",
  );

/**
 * A `json_schema` format as OpenAI takes it: a `name` (a-z, A-Z, 0-9, `_`, `-`, at most 64) and
 * an object `schema`; with `strict: true` the schema must be in the strict subset (schema.ts).
 */
function jsonSchemaFormat(
  api: "chat" | "responses",
  config: Record<string, unknown>,
  at: string,
): JsonSchemaFormat | ErrorReply {
  if (typeof config.name !== "string") return missing(`${at}.name`);
  if (!/^[a-zA-Z0-9_-]{1,64}$/.test(config.name))
    return openAIError(
      400,
      `Invalid '${at}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'.`,
      "invalid_request_error",
      `${at}.name`,
      "invalid_value",
    );
  if (api === "responses" && config.schema === undefined) return missing(`${at}.schema`);
  const strict = config.strict === true;
  const refused = strict ? strictSchemaError(api, config.name, config.schema) : undefined;
  if (refused) return refused;
  return {
    name: config.name,
    schema: isRecord(config.schema) ? config.schema : {},
    strict,
  };
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
  // OpenAI's minimum: the bound covers reasoning, and fewer than 16 tokens leaves nothing.
  if (typeof body.max_output_tokens === "number" && body.max_output_tokens < 16)
    return belowMinimum("max_output_tokens", 16, body.max_output_tokens);
  const text = isRecord(body.text) ? body.text : {};
  const format = isRecord(text.format) ? text.format : {};
  let schema: JsonSchemaFormat | ErrorReply | null = null;
  if (format.type === "json_schema") {
    schema = jsonSchemaFormat("responses", format, "text.format");
    if ("status" in schema) return schema;
  }
  return prompt("responses", body, items, format.type, schema, body.max_output_tokens);
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
  format: JsonSchemaFormat | null,
  maxTokens: unknown,
): Prompt {
  const texts = items.map((item) => ({ role: item.role, text: contentText(item.content) }));
  const all = texts.map((t) => t.text).join("\n");
  const lastUser = texts.filter((t) => t.role === "user").pop()?.text ?? all;
  return {
    model: body.model as string,
    lastUser,
    all,
    messages: items
      .filter((item) => item.content !== undefined && item.content !== null)
      .map((item) => ({ role: String(item.role ?? "user"), text: contentText(item.content) })),
    maxTokens: typeof maxTokens === "number" ? maxTokens : undefined,
    api,
    stream: body.stream === true,
    includeUsage: isRecord(body.stream_options) && body.stream_options.include_usage === true,
    serviceTier: typeof body.service_tier === "string" ? body.service_tier : undefined,
    safetyIdentifier:
      typeof body.safety_identifier === "string" ? body.safety_identifier : undefined,
    store: body.store !== false,
    json: formatType === "json_object",
    format,
    instructions: typeof body.instructions === "string" ? body.instructions : null,
    reasoningEffort:
      api === "responses"
        ? isRecord(body.reasoning) && typeof body.reasoning.effort === "string"
          ? body.reasoning.effort
          : undefined
        : typeof body.reasoning_effort === "string"
          ? body.reasoning_effort
          : undefined,
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
  const long = /\[fake:tokens:(\d+)\]/.exec(prompt.all);
  const refuse = prompt.all.includes("[fake:refuse]");
  let text: string;
  if (refuse) {
    text = "I'm sorry, but I can't help with that.";
  } else if (prompt.format !== null) {
    // Structured Outputs: a value made from the schema; `[fake:tokens:N]` lengthens its first
    // free-text string, so the output bound cuts the JSON as it cuts a long answer.
    const schema = prompt.format.schema;
    const value = valueFor(schema, {
      text: echo,
      seed: parseInt(digest.slice(0, 6), 16) % 1000,
      longText: long ? longText("", Number(long[1])).trim() : undefined,
    });
    text = JSON.stringify(
      prompt.all.includes("[fake:json_invalid]") ? invalidFor(schema, value) : value,
    );
  } else if (prompt.json) {
    text = JSON.stringify({ digest, words, echo });
  } else {
    text = [
      `# Fake answer ${digest}`,
      "",
      `A deterministic answer from the local fake model to a prompt of ${words} words (${prompt.lastUser.length} characters).`,
      "",
      `> ${echo}`,
    ].join("\n");
    if (long) text = longText(text, Number(long[1]));
    const said = sayText(prompt.all);
    if (said !== null) text = said;
  }
  const tokens = (s: string) => Math.max(1, Math.ceil(s.length / 4));
  const truncated = prompt.maxTokens !== undefined && tokens(text) > prompt.maxTokens;
  if (truncated) text = text.slice(0, Math.max(0, (prompt.maxTokens ?? 0) * 4));
  return {
    text,
    refusal: refuse,
    truncated,
    promptTokens: tokens(prompt.all),
    completionTokens: text === "" ? 0 : tokens(text),
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

export function chatCompletion(id: string, prompt: Prompt, result: Answer, served: Served) {
  const u = usage(result, served);
  return {
    id: `chatcmpl-${id}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: prompt.model,
    service_tier: served.tier,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: result.refusal ? null : result.text,
          refusal: result.refusal ? result.text : null,
        },
        logprobs: null,
        finish_reason: result.truncated ? "length" : "stop",
      },
    ],
    usage: chatUsage(u.input, u.output, u.cached, u.reasoning),
  };
}

export function response(id: string, prompt: Prompt, result: Answer, served: Served) {
  const u = usage(result, served);
  return {
    id: `resp_${id}`,
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status: result.truncated ? "incomplete" : "completed",
    incomplete_details: result.truncated ? { reason: "max_output_tokens" } : null,
    error: null,
    instructions: prompt.instructions,
    text: { format: textFormat(prompt), verbosity: "medium" },
    model: prompt.model,
    service_tier: served.tier,
    reasoning: {
      effort: served.reasoningTokens > 0 ? (prompt.reasoningEffort ?? "medium") : null,
      summary: null,
    },
    output: [
      ...(served.reasoningTokens > 0 ? [{ id: `rs_${id}`, type: "reasoning", summary: [] }] : []),
      {
        type: "message",
        id: `msg_${id}`,
        status: result.truncated ? "incomplete" : "completed",
        role: "assistant",
        content: [
          result.refusal
            ? { type: "refusal", refusal: result.text }
            : { type: "output_text", text: result.text, annotations: [] },
        ],
      },
    ],
    usage: {
      input_tokens: u.input,
      input_tokens_details: { cached_tokens: u.cached, cache_write_tokens: 0 },
      output_tokens: u.output,
      output_tokens_details: { reasoning_tokens: u.reasoning },
      total_tokens: u.input + u.output,
    },
  };
}

/** The `text.format` a response echoes: the format asked for, else plain text. */
export function textFormat(prompt: Prompt): Record<string, unknown> {
  if (prompt.format !== null)
    return {
      type: "json_schema",
      name: prompt.format.name,
      schema: prompt.format.schema,
      strict: prompt.format.strict,
      description: null,
    };
  return { type: prompt.json ? "json_object" : "text" };
}

/** Output tokens include the reasoning ones; cached input tokens are part of the input. */
const usage = (result: Answer, served: Served) => ({
  input: result.promptTokens,
  cached: served.cachedTokens,
  output: result.completionTokens + served.reasoningTokens,
  reasoning: served.reasoningTokens,
});

export function isRecord(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A Chat Completions `usage` object, with the details OpenAI reports (zero where none). */
export function chatUsage(prompt: number, completion: number, cached: number, reasoning: number) {
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}
