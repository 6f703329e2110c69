/** One accepted model call answered, streamed or whole, and billed into the fake's state. */
import { randomBytes } from "node:crypto";
import { answer, chatCompletion, type Prompt, response } from "./answers.ts";
import {
  type CatalogueModel,
  DEFAULT_EFFORT,
  REASONING_MS_PER_TOKEN,
  REASONING_TOKENS,
} from "./catalogue.ts";
import { RATE_HEADERS, send } from "./replies.ts";
import type { FakeReasoning, FakeState } from "./state.ts";
import { type MidStream, promptTokens, streamAnswer, tokenizer } from "./stream.ts";

/** The answer to an accepted call, streamed or whole, and its bill in `requests`. */
export async function answerCall(
  state: FakeState,
  prompt: Prompt,
  served: CatalogueModel,
  midStream: MidStream | null,
  signal: AbortSignal,
): Promise<Response> {
  const id = randomBytes(12).toString("hex");
  const thinks = reasoningFor(prompt, served, state.reasoning);
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
        chunkMs: marker ? Number(marker[1]) : state.chunkMs,
        headers: { "x-request-id": `req_${randomBytes(16).toString("hex")}`, ...RATE_HEADERS },
        reasoning: thinks,
        reasoningEffort: served.reasons ? (prompt.reasoningEffort ?? DEFAULT_EFFORT) : null,
        servedTier,
        cachedTokens,
        midStream,
        onToken: () => {
          state.streamedTokens += 1;
          state.completionTokens += 1;
        },
        onReasoning: (n) => {
          state.completionTokens += n;
        },
      },
      signal,
    );
    void outcome.then((r) =>
      state.answered({
        ...asked,
        stream: true,
        ...r,
        outputTokens: r.completionTokens + r.reasoningTokens,
      }),
    );
    return streamed;
  }
  state.completionTokens += result.completionTokens + reasoned;
  state.answered({
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
