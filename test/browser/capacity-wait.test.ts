/**
 * The economy plan's flex wait and a reasoning model's silent start, in a browser: the page
 * says what is happening ("Waiting for cheaper capacity", "Thinking…"), never a progress bar.
 * A stack of its own: the fake's flex capacity is switched off here.
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
    await devSignIn(page, "pro");
    const userId = await userIdOf(page);
    await h
      .stack()
      .sql.query("update public.user_plans set plan_id = 'economy' where user_id = $1", [userId]);
    await page.getByLabel("What should it write?").fill("Summarise this week's news");
    await page.getByRole("button", { name: "Generate" }).click();

    const job = card(page);
    await job.and(page.locator('[data-phase="waiting_for_capacity"]')).waitFor();
    const { jobs } = await ledger(h.stack(), userId);
    const resumeAt = jobs[0]?.resume_at;
    expect(resumeAt).toBeInstanceOf(Date);
    expect(await job.locator(".job-phase").textContent()).toBe(
      `Waiting for cheaper capacity, tries again around ${tokyoClock(resumeAt as Date)}. You can close this page.`,
    );
    expect(await job.locator(".badge").textContent()).toBe("Waiting for cheaper capacity");
    expect(await page.locator("progress, meter, [role=progressbar]").count()).toBe(0);
    await until("the announcement", async () =>
      (await page.locator("#announcer").textContent())?.includes("Waiting for cheaper capacity"),
    );
    await h.screenshot(page, "11-waiting-for-cheaper-capacity");

    await job.getByRole("button", { name: /^Cancel/ }).click();
    await job.and(page.locator('[data-phase="canceled"]')).waitFor();
    expect(await job.locator(".job-phase").textContent()).toBe(
      "Canceled. Your generation was refunded.",
    );
    expect((await ledger(h.stack(), userId)).unitsUsed).toBe(0);
  } finally {
    await setFlexCapacity(true);
  }
});

test("a reasoning model's silent start shows 'Thinking…', then the text as it streams", async () => {
  const { page } = await h.open();
  await devSignIn(page, "pro");
  // 400 hidden reasoning tokens over 5 s before the first visible token
  await page
    .getByLabel("What should it write?")
    .fill("[fake:reasoning:400:5000] Explain the plan in one paragraph");
  await page.getByRole("button", { name: "Generate" }).click();

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
