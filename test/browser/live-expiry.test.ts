/**
 * The page's live channel outliving its access token, in the browser: with local sessions of
 * 5 s, the Realtime stand-in shuts the channel down at each token's expiry (as Realtime does),
 * and the page rejoins with a fresh token by itself, reads what it may have missed, and shows
 * the streamed answer whole; the polling between is the fallback, never an error.
 */
import { expect, test } from "vitest";
import { cardIn, devSignIn, generate, until, useBrowserStack } from "../support/browser.ts";

const h = useBrowserStack({ DEV_SESSION_SECONDS: "5" });

test("tokens that expire under a streamed job: the channel rejoins with fresh ones, the answer whole", async () => {
  const { page, errors } = await h.open();
  await devSignIn(page, "pro");
  await page.locator('body[data-live="joined"]').waitFor();
  await page.evaluate(() => {
    const w = window as unknown as { __live: string[] };
    w.__live = [];
    new MutationObserver(() => w.__live.push(document.body.dataset.live ?? "")).observe(
      document.body,
      { attributes: true, attributeFilter: ["data-live"] },
    );
  });
  await generate(page, "[fake:tokens:1000] [fake:chunk_ms:20] An essay longer than a token");
  const job = await cardIn(page, "running");
  await job.and(page.locator('[data-phase="succeeded"]')).waitFor({ timeout: 60_000 });

  const live = await page.evaluate(() => (window as unknown as { __live: string[] }).__live);
  const rejoins = live.filter((s, i) => s === "joined" && live[i - 1] === "polling").length;
  // a 20 s answer under 5 s tokens: the channel was lost at an expiry and joined again, twice
  expect(rejoins, live.join()).toBeGreaterThanOrEqual(2);
  await until(
    "joined at the end",
    async () => (await page.locator("body").getAttribute("data-live")) === "joined",
  );
  const id = (await job.getAttribute("data-job-id")) ?? "";
  const { rows } = await h
    .stack()
    .sql.query<{ output: string }>("select output from generation_jobs where id = $1", [id]);
  expect(rows[0]?.output).toBeTruthy();
  // the answer as rendered (markdown): its first and last words where they belong
  const shown = (await job.locator(".job-output").textContent()) ?? "";
  const words = (rows[0]?.output ?? "").split(/\s+/).filter((w) => /^\w+[.,]?$/.test(w));
  expect(words.length).toBeGreaterThan(100);
  expect(shown.trim().endsWith(words.at(-1) ?? "?")).toBe(true);
  expect(shown.split(/\s+/).length).toBeGreaterThanOrEqual(words.length);
  expect(errors).toEqual([]);
}, 90_000);
