/**
 * A provider 429 in a browser. In a file (and stack) of its own: the 429 closes the shared
 * provider gate in Redis for its Retry-After, which would hold every other test's jobs too.
 */
import { expect, test } from "vitest";
import {
  card,
  devSignIn,
  ledger,
  tokyoClock,
  until,
  useBrowserStack,
  userIdOf,
} from "../support/browser.ts";

const h = useBrowserStack();

test("a provider 429 shows 'waiting for the AI provider' with the local time it resumes, no progress bar", async () => {
  const { page } = await h.open();
  await devSignIn(page, "free");
  // every model call carrying this marker answers 429 rate_limit_exceeded, retry-after 900 s
  await page
    .getByLabel("What should it write?")
    .fill("[fake:rate_limit_exceeded:900] Summarise this week's news");
  await page.getByRole("button", { name: "Generate" }).click();

  const job = card(page);
  await job.and(page.locator('[data-phase="waiting_for_provider"]')).waitFor();
  const userId = await userIdOf(page);
  const { jobs } = await ledger(h.stack(), userId);
  const resumeAt = jobs[0]?.resume_at;
  expect(resumeAt).toBeInstanceOf(Date);
  expect(await job.locator(".job-phase").textContent()).toBe(
    `Waiting for the AI provider, resumes around ${tokyoClock(resumeAt as Date)}. You can close this page.`,
  );
  expect(await job.locator(".badge").textContent()).toBe("Waiting for the AI provider");
  expect(await page.locator("progress, meter, [role=progressbar]").count()).toBe(0);
  await until("the announcement", async () =>
    (await page.locator("#announcer").textContent())?.includes("Waiting for the AI provider"),
  );
  // the unit stays reserved while it waits, and the job can still be canceled
  expect(await page.locator("#usage").textContent()).toMatch(/^Free plan: 1 of 1/);
  await h.screenshot(page, "10-waiting-for-provider");

  await job.getByRole("button", { name: /^Cancel/ }).click();
  await job.and(page.locator('[data-phase="canceled"]')).waitFor();
  expect(await job.locator(".job-phase").textContent()).toBe(
    "Canceled. Your generation was refunded.",
  );
  expect((await ledger(h.stack(), userId)).unitsUsed).toBe(0);
});
