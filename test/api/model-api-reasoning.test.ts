/**
 * The worker on a model that reasons by default (`OPENAI_MODEL=gpt-5.4-mini`, the coming
 * default): a job completes through the Responses API, and the usage its event records is what
 * the provider billed, hidden reasoning included.
 */
import { expect, test } from "vitest";
import { deliveredFreeJob, useApi } from "../support/api.ts";

const app = useApi({ env: { OPENAI_MODEL: "gpt-5.4-mini" } });

test("on gpt-5.4-mini a job completes; its recorded completion tokens are the provider's bill, reasoning included", async () => {
  const { outcome, requests } = await deliveredFreeJob(app, "Write a short report about queues");
  expect(outcome).toBe("completed");
  const [bill] = requests;
  expect(bill).toMatchObject({
    api: "responses",
    model: "gpt-5.4-mini",
    stream: true,
    maxCompletionTokens: 512,
    reasoningTokens: 64,
    finishReason: "stop",
  });
  const { rows } = await app.admin.query(
    "select detail from public.job_events where event = 'completed' order by id desc limit 1",
  );
  expect(rows[0]?.detail.usage).toMatchObject({
    prompt_tokens: bill?.promptTokens,
    completion_tokens: bill?.outputTokens,
    source: "provider",
  });
  expect(bill?.outputTokens).toBe((bill?.completionTokens ?? 0) + 64);
});
