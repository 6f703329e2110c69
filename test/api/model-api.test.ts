/**
 * The worker is the same on both model APIs: a job completes through the Responses API by
 * default, its one call streamed through the fake model's Responses endpoint and bounded by the
 * plan (model-api-chat.test.ts: the same through Chat Completions).
 */
import { expect, test } from "vitest";
import { useApi } from "../support/api.ts";

const app = useApi();

test("by default a job completes through the Responses API: one streamed, bounded call", async () => {
  const user = await app.newUser("free");
  const id = await app.enqueueOk(user, "Write a short report about queues");
  const res = await app.deliver(app.qstash.latestFor(id));
  expect(((await res.json()) as { outcome: string }).outcome).toBe("completed");
  expect(app.model.stats().requests).toMatchObject([
    { api: "responses", stream: true, maxCompletionTokens: 512, finishReason: "stop" },
  ]);
});
