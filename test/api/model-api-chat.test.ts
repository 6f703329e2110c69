/**
 * `OPENAI_API=chat_completions`: the same worker, unchanged, completes a job through Chat
 * Completions (for an OpenAI-compatible endpoint that speaks only it), one streamed, bounded call.
 */
import { expect, test } from "vitest";
import { useApi } from "../support/api.ts";

const app = useApi({ env: { OPENAI_API: "chat_completions" } });

test("with OPENAI_API=chat_completions a job completes through Chat Completions: one streamed, bounded call", async () => {
  const user = await app.newUser("free");
  const id = await app.enqueueOk(user, "Write a short report about queues");
  const res = await app.deliver(app.qstash.latestFor(id));
  expect(((await res.json()) as { outcome: string }).outcome).toBe("completed");
  expect(app.model.stats().requests).toMatchObject([
    { api: "chat", stream: true, maxCompletionTokens: 512, finishReason: "stop" },
  ]);
});
