/**
 * The worker is the same on both model APIs: a job completes through the Responses API by
 * default, its one call streamed through the fake model's Responses endpoint and bounded by the
 * plan (model-api-chat.test.ts: the same through Chat Completions).
 */
import { expect, test } from "vitest";
import { deliveredFreeJob, useApi } from "../support/api.ts";

const app = useApi();

test("by default a job completes through the Responses API: one streamed, bounded call", async () => {
  const { outcome, requests } = await deliveredFreeJob(app, "Write a short report about queues");
  expect(outcome).toBe("completed");
  expect(requests).toMatchObject([
    { api: "responses", stream: true, maxCompletionTokens: 512, finishReason: "stop" },
  ]);
});
