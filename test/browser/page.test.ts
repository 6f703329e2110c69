/**
 * The page a user sees, in a real (headless) Chromium against the whole local stack: sign-in,
 * a job from submit to output, the free quota, cancel with refund, double submits that spend
 * one unit, and markup that stays inert. Screenshots land in test-results/screenshots/.
 */
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import {
  card,
  cardIn,
  devSignIn,
  fitsTheScreen,
  generate,
  ledger,
  shownText,
  tokyoWhen,
  until,
  useBrowserStack,
  userIdOf,
} from "../support/browser.ts";

const h = useBrowserStack();

/** Postgres holds one job of the signed-in user and one unit used: charged once. */
async function expectChargedOnce(page: Page): Promise<void> {
  const { jobs, unitsUsed } = await ledger(h.stack(), await userIdOf(page));
  expect(jobs).toHaveLength(1);
  expect(unitsUsed).toBe(1);
}

const nextUtcMidnight = (now = new Date()) =>
  new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1));

const noProgressBar = "progress, meter, [role=progressbar]";

describe("the job page in a browser", () => {
  test("a new user signs in with the keyboard, submits, and reads the output when the job succeeds", async () => {
    const { page, errors } = await h.open();
    // npm run dev: the local sign-in first, the local Auth stand-in's sign-up after it
    await page.getByRole("button", { name: "Sign in locally" }).waitFor();
    expect(await page.locator("#dev-form + #password-form").isVisible()).toBe(true);
    await h.screenshot(page, "01-sign-in-dev");

    // keyboard only: focus starts on the plan choice, Tab reaches the button
    expect(await page.evaluate(() => (document.activeElement as HTMLInputElement).value)).toBe(
      "free",
    );
    await page.keyboard.press("Tab");
    await page.keyboard.press("Enter");
    const usage = page.locator("#usage");
    await until("the usage line", async () =>
      (await usage.textContent())?.startsWith("Free plan: 0 of 1"),
    );
    expect(await usage.textContent()).toBe(
      `Free plan: 0 of 1 generation used. Resets ${tokyoWhen(nextUtcMidnight())}.`,
    );
    await h.screenshot(page, "02-signed-in");

    // focus moved to the prompt; type, Tab to Generate, Enter
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("document-prompt");
    await page.keyboard.type("Write a haiku about queues");
    await page.keyboard.press("Tab");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("document-submit");
    await page.keyboard.press("Enter");

    const job = await cardIn(page, "succeeded");
    expect(await job.locator(".job-prompt").textContent()).toBe("“Write a haiku about queues”");
    // the fake's answer is markdown: its heading and its quote of the prompt, rendered
    const output = job.locator(".job-output");
    expect(await output.locator("h4").textContent()).toMatch(/^Fake answer [0-9a-f]{12}$/);
    expect(await output.locator("blockquote").textContent()).toContain(
      "Write a haiku about queues",
    );
    expect(await job.locator(".job-phase").textContent()).toMatch(/^Done at \d\d:\d\d\.$/);
    expect(await job.getByRole("button", { name: /Cancel/ }).count()).toBe(0);
    // the change was announced to screen readers, and the usage counts the unit
    await until("the announcement", async () =>
      /Job from \d\d:\d\d: Done at \d\d:\d\d\./.test(
        (await page.locator("#announcer").textContent()) ?? "",
      ),
    );
    await until("usage 1 of 1", async () =>
      (await usage.textContent())?.startsWith("Free plan: 1 of 1"),
    );
    expect(await page.locator(noProgressBar).count()).toBe(0);
    await h.screenshot(page, "03-succeeded");
    expect(errors).toEqual([]);
  });

  test("a free user who has used today's generation reads when it comes back, in local time", async () => {
    const { page } = await h.open();
    await devSignIn(page, "free");
    await generate(page, "A limerick about quotas");
    await cardIn(page, "succeeded");

    await generate(page, "One more, please");
    const alert = page.locator("#document-error");
    expect(await shownText(alert, "the quota sentence")).toBe(
      `You have used today's generation. It comes back ${tokyoWhen(nextUtcMidnight())}.`,
    );
    expect(await alert.getAttribute("role")).toBe("alert");
    // the prompt is kept, so the user can send it once the quota is back
    expect(await page.getByLabel("What should it write?").inputValue()).toBe("One more, please");
    expect(await page.locator("li.job").count()).toBe(1);
    await expectChargedOnce(page);
    await h.screenshot(page, "04-quota-exceeded");
  });

  test("canceling a running job shows it refunded, in the page and in Postgres", async () => {
    const { page } = await h.open();
    await devSignIn(page, "free");
    await generate(page, "[fake:slow:30000] A long essay on patience");

    const job = await cardIn(page, "running");
    const phase = job.locator(".job-phase");
    const first = await phase.textContent();
    expect(first).toMatch(/^Generating now, running for \d+ s\.$/);
    // the elapsed time is real: it moves on its own, without any request
    await until("the elapsed time to move", async () => (await phase.textContent()) !== first);
    await until("usage 1 of 1", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Free plan: 1 of 1"),
    );
    await h.screenshot(page, "05-running");

    await job.getByRole("button", { name: /^Cancel the document from \d\d:\d\d$/ }).click();
    await job.and(page.locator('[data-phase="canceled"]')).waitFor();
    expect(await phase.textContent()).toBe("Canceled. Your generation was refunded.");
    expect(await job.getByRole("button", { name: /Cancel/ }).count()).toBe(0);
    // keyboard focus stays on the card whose button went away
    expect(await page.evaluate(() => document.activeElement?.tagName)).toBe("H3");
    await until("usage 0 of 1", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Free plan: 0 of 1"),
    );
    const { jobs, unitsUsed } = await ledger(h.stack(), await userIdOf(page));
    expect(jobs).toMatchObject([{ status: "canceled", refunded: true }]);
    expect(unitsUsed).toBe(0);
    await h.screenshot(page, "06-canceled");
  });

  test("a running job's output grows on the page as the model writes it; a reload shows the same", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "free");
    await generate(page, "[fake:tokens:3000] [fake:chunk_ms:60] <b>A long essay</b> on streams");
    const job = await cardIn(page, "running");
    const output = job.locator(".job-output");
    await until(
      "the first partial output",
      async () => ((await output.textContent()) ?? "") !== "",
    );
    const first = (await output.textContent()) ?? "";
    await until(
      "the output to grow",
      async () => ((await output.textContent()) ?? "").length > first.length,
    );
    expect((await output.textContent())?.startsWith(first)).toBe(true);
    // text, never markup; and no fake progress bar
    expect(await output.locator("b").count()).toBe(0);
    expect(await page.locator(noProgressBar).count()).toBe(0);
    await h.screenshot(page, "05b-streaming");

    await page.reload();
    const again = card(page).and(page.locator('[data-phase="running"]'));
    await again.waitFor();
    await until("the partial output after a reload", async () =>
      ((await again.locator(".job-output").textContent()) ?? "").startsWith(first),
    );
    await again.getByRole("button", { name: /^Cancel the document from \d\d:\d\d$/ }).click();
    await cardIn(page, "canceled");
    expect(await card(page).locator(".job-output").isHidden()).toBe(true);
    expect(errors).toEqual([]);
  });

  test("a second running cancel the same day: the page asks first, with the honest sentence, and keeps the unit spent", async () => {
    const { page } = await h.open();
    await devSignIn(page, "free");
    const prompt = page.getByLabel("What should it write?");
    const generate = page.getByRole("button", { name: "Generate" });

    // The day's one refunded running cancel: no question asked.
    await prompt.fill("[fake:slow:30000] A first long essay");
    await generate.click();
    const first = await cardIn(page, "running");
    await first.getByRole("button", { name: /^Cancel the document from/ }).click();
    await first.and(page.locator('[data-phase="canceled"]')).waitFor();
    expect(await first.locator(".job-phase").textContent()).toBe(
      "Canceled. Your generation was refunded.",
    );
    await until("usage 0 of 1", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Free plan: 0 of 1"),
    );

    await prompt.fill("[fake:slow:30000] A second long essay");
    await generate.click();
    const second = page.locator("li.job").first();
    await second.and(page.locator('[data-phase="running"]')).waitFor();
    const secondId = await second.getAttribute("data-job-id");
    const job = card(page, secondId ?? undefined);
    await job.getByRole("button", { name: /^Cancel the document from/ }).click();
    const question = job.getByRole("alert");
    await question.waitFor();
    expect(await question.textContent()).toBe(
      "Canceling now stops the generation; this unit will not be refunded (you have used your 1 refunded cancel today).",
    );
    await h.screenshot(page, "06b-cancel-will-not-refund");

    // "Keep generating" sends nothing: the job runs on.
    await job.getByRole("button", { name: "Keep generating" }).click();
    expect(await job.getAttribute("data-phase")).toBe("running");
    expect((await ledger(h.stack(), await userIdOf(page))).jobs[1]?.status).toBe("running");

    await job.getByRole("button", { name: /^Cancel the document from/ }).click();
    await job.getByRole("button", { name: "Cancel anyway" }).click();
    await job.and(page.locator('[data-phase="canceled"]')).waitFor();
    expect(await job.locator(".job-phase").textContent()).toBe(
      "Canceled while generating. The unit stays used: your plan's refunded cancels for this period were used up.",
    );
    await until("usage 1 of 1", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Free plan: 1 of 1"),
    );
    const { jobs, unitsUsed } = await ledger(h.stack(), await userIdOf(page));
    expect(jobs).toMatchObject([
      { status: "canceled", refunded: true },
      { status: "canceled", refunded: false },
    ]);
    expect(unitsUsed).toBe(1);
  });

  test("a double click on Generate spends one unit", async () => {
    const { page } = await h.open();
    await devSignIn(page, "pro"); // 100 units: only idempotency can keep this at one
    const keys: string[] = [];
    page.on("request", (r) => {
      if (r.method() === "POST" && r.url().endsWith("/api/jobs")) {
        keys.push(r.headers()["idempotency-key"] ?? "none");
      }
    });
    await page.getByLabel("What should it write?").fill("A short poem, sent twice by accident");
    await page.getByRole("button", { name: "Generate" }).dblclick();
    await cardIn(page, "succeeded");
    await until("usage 1 of 100", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Pro plan: 1 of 100"),
    );
    expect(await page.locator("li.job").count()).toBe(1);
    expect(keys.length).toBeGreaterThanOrEqual(1);
    expect(new Set(keys).size).toBe(1);
    await expectChargedOnce(page);
    await h.screenshot(page, "07-double-click-one-unit");
  });

  test("pressing Generate again after a lost answer replays the same job: one unit", async () => {
    const { page } = await h.open();
    await devSignIn(page, "pro");
    const sent: { key: string; status: number | null }[] = [];
    let lose = true;
    await page.route("**/api/jobs", async (route) => {
      const request = route.request();
      if (request.method() !== "POST") return route.continue();
      const key = request.headers()["idempotency-key"] ?? "none";
      const response = await route.fetch(); // the server does the work...
      sent.push({ key, status: response.status() });
      if (lose) {
        lose = false;
        return route.abort("connectionreset"); // ...and the answer never arrives
      }
      return route.fulfill({ response });
    });
    await generate(page, "An essay the network almost ate");
    const alert = page.locator("#document-error");
    expect(await shownText(alert, "the network sentence")).toBe(
      "Could not reach the service. Check your connection and try again: retrying will not charge you twice.",
    );
    // The server did create the job, so the page may already list it (its list refresh can land
    // first); what must not happen is a second job or a second unit, checked below.
    expect(await page.locator("li.job").count()).toBeLessThanOrEqual(1);
    await h.screenshot(page, "08-lost-answer");

    await page.getByRole("button", { name: "Generate" }).click();
    await card(page).waitFor();
    expect(sent).toHaveLength(2);
    expect(sent[0]?.key).toBe(sent[1]?.key);
    expect(sent.map((s) => s.status)).toEqual([202, 200]); // the second is a replay
    await until("usage 1 of 100", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Pro plan: 1 of 100"),
    );
    await expectChargedOnce(page);
  });

  test("a prompt of HTML and script is shown as text; its echo in the rendered output never runs", async () => {
    const { page, dialogs, errors } = await h.open({ viewport: { width: 390, height: 844 } });
    await devSignIn(page, "pro");
    const evil =
      '<img src=x onerror="alert(1)"><script>alert(2)</script><b id="injected">bold</b><a href="javascript:alert(3)">x</a>';
    await generate(page, evil);
    const job = await cardIn(page, "succeeded");

    expect(await job.locator(".job-prompt").textContent()).toBe(`“${evil}”`);
    // The fake quotes the prompt in its markdown answer: rendered, the markup is sanitized.
    const output = job.locator(".job-output");
    expect(await output.locator("blockquote").textContent()).toContain("bold");
    expect(await page.locator("#jobs img, #jobs script, #injected, #jobs a[href]").count()).toBe(0);
    expect(await page.locator("#jobs [onerror], #jobs [onclick]").count()).toBe(0);
    expect(dialogs).toEqual([]);
    expect(errors).toEqual([]);
    // readable on a phone: nothing wider than the screen
    expect(await fitsTheScreen(page)).toBe(true);
    await h.screenshot(page, "09-inert-html-on-a-phone");
  });
  test("polling pauses while the tab is hidden and looks again as soon as it is visible", async () => {
    const { page } = await h.open();
    // no Realtime for this page: it polls (the fallback whenever the channel is not joined)
    await page.routeWebSocket(/\/realtime\/v1\//, (ws) => ws.close());
    await devSignIn(page, "pro");
    await page.locator('body[data-live="polling"]').waitFor({ state: "attached" });
    // The tab must be hidden before the job ends: the model answers after 6 s, room for a
    // loaded machine to show the card first.
    await generate(page, "[fake:slow:6000] Notes for a hidden tab");
    const job = card(page);
    await job.waitFor();
    const jobId = (await job.getAttribute("data-job-id")) ?? "";

    // count, in the page itself, every poll of this job made while the tab is hidden
    await page.evaluate((id) => {
      const w = window as unknown as { __polls: number };
      w.__polls = 0;
      const original = window.fetch.bind(window);
      window.fetch = (input, init) => {
        if (document.hidden && String(input).endsWith(`/api/jobs/${id}`)) w.__polls++;
        return original(input, init);
      };
      const setHidden = (hidden: boolean) => {
        Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
        Object.defineProperty(document, "visibilityState", {
          configurable: true,
          get: () => (hidden ? "hidden" : "visible"),
        });
        document.dispatchEvent(new Event("visibilitychange"));
      };
      (window as unknown as { setHidden: typeof setHidden }).setHidden = setHidden;
      setHidden(true);
    }, jobId);

    const userId = await userIdOf(page);
    await until(
      "the job to succeed on the server",
      async () => (await ledger(h.stack(), userId)).jobs[0]?.status === "succeeded",
    );
    expect(await page.evaluate(() => (window as unknown as { __polls: number }).__polls)).toBe(0);
    expect(await job.getAttribute("data-phase")).not.toBe("succeeded");

    await page.evaluate(() =>
      (window as unknown as { setHidden: (h: boolean) => void }).setHidden(false),
    );
    // one look right away, not after the backoff
    await until(
      "the card to show the result",
      async () => (await job.getAttribute("data-phase")) === "succeeded",
      1_000,
    );
  });
});
