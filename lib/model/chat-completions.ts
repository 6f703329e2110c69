/**
 * The Chat Completions adapter (`OPENAI_API=chat_completions`, for OpenAI-compatible endpoints
 * that speak only this API): one streamed `chat.completions.create` call with the usage chunk
 * asked for (`stream_options.include_usage`), its chunks mapped to the port's steps
 * (lib/model/steps.ts): `delta.content` → text, `delta.refusal` → refusal, `finish_reason` →
 * finish, the usage chunk → usage (reasoning from `completion_tokens_details`, cached input from
 * `prompt_tokens_details`, the served tier from the chunks' `service_tier`), a chunk that adds
 * no text → thinking (null: this API reports no reasoning while it streams). An error inside the
 * stream (`data: {"error": …}`) is thrown by the SDK as an APIError without status.
 *
 * Instructions go as a leading `system` message (every OpenAI-compatible endpoint knows that
 * role; `developer` is OpenAI's newer name for it), a format as `response_format` (a strict
 * `json_schema`); both only when the call has them. The JSON answer streams as `delta.content`.
 */
import type { ChatCompletionChunk } from "openai/resources/chat/completions";
import type { Adapter, Step } from "./steps.ts";

export const chatCompletionsAdapter: Adapter = async (client, r, signal) => {
  const stream = await client.chat.completions.create(
    {
      model: r.model,
      messages: [
        ...(r.instructions ? [{ role: "system" as const, content: r.instructions }] : []),
        { role: "user" as const, content: r.prompt },
      ],
      max_completion_tokens: r.maxOutputTokens,
      stream: true,
      stream_options: { include_usage: true },
      ...(r.serviceTier ? { service_tier: r.serviceTier } : {}),
      ...(r.reasoningEffort
        ? { reasoning_effort: r.reasoningEffort as "low" | "medium" | "high" }
        : {}),
      ...(r.safetyIdentifier ? { safety_identifier: r.safetyIdentifier } : {}),
      ...(r.format
        ? {
            response_format: {
              type: "json_schema",
              json_schema: { name: r.format.name, schema: r.format.schema, strict: true },
            },
          }
        : {}),
    },
    { signal },
  );
  return {
    steps: steps(stream, () => stream.controller.abort()),
    close: () => stream.controller.abort(),
  };
};

async function* steps(
  chunks: AsyncIterable<ChatCompletionChunk>,
  close: () => void,
): AsyncGenerator<Step> {
  let finished = false;
  let tier: string | null = null;
  for await (const chunk of chunks) {
    if (chunk.service_tier) tier = chunk.service_tier;
    const choice = chunk.choices[0];
    if (choice?.delta?.refusal) yield { kind: "refusal", delta: choice.delta.refusal };
    if (choice?.delta?.content) yield { kind: "text", delta: choice.delta.content };
    else if (choice && !choice.finish_reason && !choice.delta?.refusal)
      yield { kind: "thinking", reasoningTokens: null };
    if (choice?.finish_reason) {
      finished = true;
      yield { kind: "finish", reason: choice.finish_reason };
    }
    if (chunk.usage) {
      yield {
        kind: "usage",
        promptTokens: chunk.usage.prompt_tokens,
        completionTokens: chunk.usage.completion_tokens,
        reasoningTokens: chunk.usage.completion_tokens_details?.reasoning_tokens ?? 0,
        cachedTokens: chunk.usage.prompt_tokens_details?.cached_tokens ?? 0,
        serviceTier: tier,
      };
      // The usage after the finish reason is the last chunk that matters: stop here rather than
      // wait on `[DONE]`, after which the SDK awaits the body's cancellation (openai 7
      // src/core/streaming.ts), which a body that never settles would hold forever.
      if (finished) {
        close();
        return;
      }
    }
  }
}
