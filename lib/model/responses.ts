/**
 * The Responses API adapter (the default; OpenAI recommends it for new projects): one streamed
 * `responses.create` call, its events mapped to the port's steps (lib/model/steps.ts).
 *
 * | event                                   | step                                            |
 * | --------------------------------------- | ----------------------------------------------- |
 * | `response.created` / `queued` / `in_progress` | thinking (reasoning tokens if usage is there) |
 * | `response.output_item.added` (reasoning), `response.reasoning_*` | thinking (null)        |
 * | `response.output_text.delta`            | text                                            |
 * | `response.refusal.delta`                | refusal                                         |
 * | `response.completed`                    | usage (with the served `service_tier`), finish `stop` |
 * | `response.incomplete`                   | usage, finish `length` (`max_output_tokens`) or the reason |
 * | `response.failed`                       | usage (if any), failed (an APIError of `response.error`) |
 * | `error`                                 | thrown by the SDK as an APIError without status |
 * | anything else (`*.done`, `keepalive`, ...) | nothing                                      |
 *
 * A terminal event (`completed`, `incomplete`, `failed`) is the last that matters: the adapter
 * stops there and closes the connection rather than wait for a server that holds it open.
 *
 * `instructions` and `text.format` (a strict `json_schema`, Structured Outputs) are sent only
 * when the call has them; the JSON answer streams as `response.output_text.delta` like any text.
 *
 * `store: false`: the response (and so the prompt) is not kept by OpenAI for later retrieval;
 * nothing here reads a response back.
 */
import { APIError } from "openai";
import type { ResponseStreamEvent, ResponseUsage } from "openai/resources/responses/responses";
import type { Adapter, Step } from "./steps.ts";

export const responsesAdapter: Adapter = async (client, r, signal) => {
  const stream = await client.responses.create(
    {
      model: r.model,
      input: r.prompt,
      max_output_tokens: r.maxOutputTokens,
      stream: true,
      store: false,
      ...(r.serviceTier ? { service_tier: r.serviceTier } : {}),
      ...(r.reasoningEffort
        ? { reasoning: { effort: r.reasoningEffort as "low" | "medium" | "high" } }
        : {}),
      ...(r.safetyIdentifier ? { safety_identifier: r.safetyIdentifier } : {}),
      ...(r.instructions ? { instructions: r.instructions } : {}),
      ...(r.format
        ? {
            text: {
              format: {
                type: "json_schema",
                name: r.format.name,
                schema: r.format.schema,
                strict: true,
              },
            },
          }
        : {}),
    },
    { signal },
  );
  const close = () => stream.controller.abort();
  return { steps: steps(stream, close), close };
};

async function* steps(
  events: AsyncIterable<ResponseStreamEvent>,
  close: () => void,
): AsyncGenerator<Step> {
  for await (const event of events) {
    switch (event.type) {
      case "response.created":
      case "response.queued":
      case "response.in_progress":
        yield {
          kind: "thinking",
          reasoningTokens: event.response.usage?.output_tokens_details?.reasoning_tokens ?? null,
        };
        break;
      case "response.output_item.added":
        if (event.item.type === "reasoning") yield { kind: "thinking", reasoningTokens: null };
        break;
      case "response.reasoning_summary_part.added":
      case "response.reasoning_summary_text.delta":
      case "response.reasoning_text.delta":
        yield { kind: "thinking", reasoningTokens: null };
        break;
      case "response.output_text.delta":
        if (event.delta) yield { kind: "text", delta: event.delta };
        break;
      case "response.refusal.delta":
        if (event.delta) yield { kind: "refusal", delta: event.delta };
        break;
      case "response.completed":
        if (event.response.usage) yield usage(event.response.usage, event.response.service_tier);
        yield { kind: "finish", reason: "stop" };
        return close();
      case "response.incomplete": {
        if (event.response.usage) yield usage(event.response.usage, event.response.service_tier);
        const reason = event.response.incomplete_details?.reason ?? "incomplete";
        yield { kind: "finish", reason: reason === "max_output_tokens" ? "length" : reason };
        return close();
      }
      case "response.failed": {
        if (event.response.usage) yield usage(event.response.usage, event.response.service_tier);
        const error = event.response.error;
        // The shape the SDK gives an `error` event: a status-less APIError with the code.
        yield {
          kind: "failed",
          error: new APIError(
            undefined,
            {
              type: "response.failed",
              code: error?.code ?? null,
              message: error?.message ?? "the response failed",
              param: null,
            },
            undefined,
            undefined,
          ),
        };
        return close();
      }
    }
  }
}

/** The usage, and the tier the final response says served it (price by that, not the ask). */
function usage(u: ResponseUsage, tier: string | null | undefined): Step {
  return {
    kind: "usage",
    promptTokens: u.input_tokens,
    completionTokens: u.output_tokens,
    reasoningTokens: u.output_tokens_details?.reasoning_tokens ?? 0,
    cachedTokens: u.input_tokens_details?.cached_tokens ?? 0,
    serviceTier: tier ?? null,
  };
}
