/**
 * A provider 429 in a browser. In a file (and stack) of its own: the 429 closes the shared
 * provider gate in Redis for its Retry-After, which would hold every other test's jobs too.
 */
import { expect, test } from "vitest";
import {
  cancelRefunded,
  devSignIn,
  expectWaitingCard,
  generate,
  useBrowserStack,
} from "../support/browser.ts";

const h = useBrowserStack();

test("a provider 429 shows 'waiting for the AI provider' with the local time it resumes, no progress bar", async () => {
  const { page } = await h.open();
  const userId = await devSignIn(page, "free");
  // every model call carrying this marker answers 429 rate_limit_exceeded, retry-after 900 s
  await generate(page, "[fake:rate_limit_exceeded:900] Summarise this week's news");

  const job = await expectWaitingCard(h, page, userId, {
    phase: "waiting_for_provider",
    says: "Waiting for the AI provider",
    when: "resumes around",
  });
  // the unit stays reserved while it waits, and the job can still be canceled
  expect(await page.locator("#usage").textContent()).toMatch(/^Free plan: 1 of 1/);
  await h.screenshot(page, "10-waiting-for-provider");
  await cancelRefunded(h, page, job, userId);
});
