/**
 * `OPENAI_API=chat_completions`: the same worker, unchanged, completes a job through Chat
 * Completions (for an OpenAI-compatible endpoint that speaks only it), one streamed, bounded call.
 */
import { expect, test } from "vitest";
import { deliveredFreeJob, useApi } from "../support/api.ts";

const app = useApi({ env: { OPENAI_API: "chat_completions" } });

test("with OPENAI_API=chat_completions a job completes through Chat Completions: one streamed, bounded call", async () => {
  const { outcome, requests } = await deliveredFreeJob(app, "Write a short report about queues");
  expect(outcome).toBe("completed");
  expect(requests).toMatchObject([
    { api: "chat", stream: true, maxCompletionTokens: 512, finishReason: "stop" },
  ]);
});
