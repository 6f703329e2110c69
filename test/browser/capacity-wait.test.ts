/**
 * The economy plan's flex wait and a reasoning model's silent start, in a browser: the page
 * says what is happening ("Waiting for cheaper capacity", "Thinking…"), never a progress bar.
 * A stack of its own: the fake's flex capacity is switched off here.
 */
import { expect, test } from "vitest";
import {
  cancelRefunded,
  card,
  devSignIn,
  expectWaitingCard,
  generate,
  until,
  useBrowserStack,
} from "../support/browser.ts";

// A long wait, so the card holds still while it is read.
const h = useBrowserStack({ PROVIDER_BACKOFF_SECONDS: "900" });

async function setFlexCapacity(available: boolean): Promise<void> {
  const res = await fetch(`${new URL(h.stack().urls.openai).origin}/__fake/flex`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ available }),
  });
  expect(res.status).toBe(200);
}

test("an economy job without flex capacity shows 'Waiting for cheaper capacity' with the local time it tries again, no progress bar", async () => {
  await setFlexCapacity(false);
  try {
    const { page } = await h.open();
    const userId = await devSignIn(page, "pro");
    await h
      .stack()
      .sql.query("update public.user_plans set plan_id = 'economy' where user_id = $1", [userId]);
    await generate(page, "Summarise this week's news");

    const job = await expectWaitingCard(h, page, userId, {
      phase: "waiting_for_capacity",
      says: "Waiting for cheaper capacity",
      when: "tries again around",
    });
    await h.screenshot(page, "11-waiting-for-cheaper-capacity");
    await cancelRefunded(h, page, job, userId);
  } finally {
    await setFlexCapacity(true);
  }
});

test("a reasoning model's silent start shows 'Thinking…', then the text as it streams", async () => {
  const { page } = await h.open();
  await devSignIn(page, "pro");
  // 400 hidden reasoning tokens over 5 s before the first visible token
  await generate(page, "[fake:reasoning:400:5000] Explain the plan in one paragraph");

  const job = card(page);
  await until("Thinking…", async () =>
    /^Thinking…/.test((await job.locator(".job-phase").textContent()) ?? ""),
  );
  expect(await job.locator(".job-phase").textContent()).toMatch(
    /^Thinking…(,| [\d,]+ reasoning tokens so far,) running for \d+ s\.$/,
  );
  expect(await page.locator("progress, meter, [role=progressbar]").count()).toBe(0);
  await h.screenshot(page, "12-thinking");
  await job.and(page.locator('[data-phase="succeeded"]')).waitFor({ timeout: 30_000 });
});
