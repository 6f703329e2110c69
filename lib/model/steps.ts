/**
 * What an API adapter (lib/model/responses.ts, lib/model/chat-completions.ts) turns its
 * provider's stream into: the few facts the port (lib/model.ts) acts on, the same for every API.
 * The port owns the loop around them (the deadline, the cancel race, the usage of an early end).
 */
import type OpenAI from "openai";

/** A strict Structured Outputs format: the schema must be inside OpenAI's strict subset. */
export interface OutputFormat {
  type: "json_schema";
  /** a-z, A-Z, 0-9, `_` and `-`, at most 64 characters. */
  name: string;
  schema: Record<string, unknown>;
  strict: true;
}

/** One model call as the port asks for it; every field but the prompt is ours. */
export interface CallRequest {
  model: string;
  prompt: string;
  maxOutputTokens: number;
  serviceTier: "flex" | "default" | "priority" | undefined;
  /** Sent only when given: Responses `reasoning.effort`, Chat Completions `reasoning_effort`. */
  reasoningEffort: string | undefined;
  safetyIdentifier: string | undefined;
  /** Sent only when given: Responses `instructions`, Chat Completions a leading system message. */
  instructions: string | undefined;
  /** Sent only when given: Responses `text.format`, Chat Completions `response_format`. */
  format: OutputFormat | undefined;
}

export type Step =
  /** Visible text the model added. */
  | { kind: "text"; delta: string }
  /** Refusal text (the model declined the request). */
  | { kind: "refusal"; delta: string }
  /** The model is working without visible text; the reasoning tokens so far, if reported. */
  | { kind: "thinking"; reasoningTokens: number | null }
  /**
   * What the provider will bill for the call (reasoning included in completionTokens, cached
   * input in promptTokens) and the tier that served it (null when it did not say).
   */
  | {
      kind: "usage";
      promptTokens: number;
      completionTokens: number;
      reasoningTokens: number;
      cachedTokens: number;
      serviceTier: string | null;
    }
  /** The call ended: `stop`, `length` (the output bound), `content_filter`, or another reason. */
  | { kind: "finish"; reason: string }
  /** The provider reported a failure inside the stream (not thrown: usage may follow). */
  | { kind: "failed"; error: unknown };

/** An accepted call: its steps, and how to close the connection when we stop reading early. */
export interface Opened {
  steps: AsyncIterator<Step>;
  close(): void;
}

/** Sends one streamed request; rejects with the SDK's error when the provider refuses it. */
export type Adapter = (
  client: OpenAI,
  request: CallRequest,
  signal: AbortSignal,
) => Promise<Opened>;
