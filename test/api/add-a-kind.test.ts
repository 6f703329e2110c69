/**
 * docs/ADD-A-KIND.md cannot rot: every block it shows is the repository's own code (the kind's
 * file whole, the other blocks inside the files they name), and the kind it walks through,
 * `summary`, runs through the API and the worker on the real database with the fake model, and
 * shows on the page (a real Chromium against the whole local stack) with its form, built from
 * its declaration: nothing outside its files names it.
 */
import { readFileSync } from "node:fs";
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import { type TestUser, useApi } from "../support/api.ts";
import { card, devSignIn, shownText, until, useBrowserStack } from "../support/browser.ts";

const doc = readFileSync("docs/ADD-A-KIND.md", "utf8");
const blocks = [...doc.matchAll(/<!-- (file|in): (\S+) -->\n```\w*\n([\s\S]*?)```/g)].map(
  ([, how, path, code]) => ({ how, path: path as string, code: code as string }),
);

describe("docs/ADD-A-KIND.md shows the repository's code", () => {
  test("it names the four places: the kind's file, its registration, its rows, its test", () => {
    expect(blocks.map((b) => b.path)).toEqual([
      "lib/kinds/summary.ts",
      "lib/kinds/index.ts",
      "supabase/migrations/20261203010000_summary_kind.sql",
      "supabase/seed.sql",
    ]);
    expect(doc).toContain("test/api/add-a-kind.test.ts");
  });

  test.each(blocks)("$how $path", ({ how, path, code }) => {
    const file = readFileSync(path, "utf8");
    if (how === "file") expect(code).toBe(file);
    else expect(file).toContain(code);
  });
});

const app = useApi();
const h = useBrowserStack();

function summarize(user: TestUser, input: unknown) {
  return app.call("jobs", "/api/jobs", {
    method: "POST",
    headers: { ...user.headers, "content-type": "application/json" },
    body: JSON.stringify({ kind: "summary", input }),
  });
}

async function run(user: TestUser, input: unknown) {
  const res = await summarize(user, input);
  expect(res.status).toBe(202);
  const id = (await res.json()).job.id as string;
  const delivered = await app.deliver(app.qstash.latestFor(id));
  expect(delivered.status).toBe(200);
  return (await (await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).json()).job;
}

describe("the summary kind, added as the walkthrough says", () => {
  test("a summary succeeds: its text is the output, it held and kept its 1 unit", async () => {
    const user = await app.newUser("pro");
    const said = "Queues decouple the request from the work, so a slow model never blocks a page.";
    const job = await run(user, {
      text: `A long text about queues. [fake:say:${JSON.stringify(said)}]`,
      words: 20,
    });
    expect(job).toMatchObject({
      status: "succeeded",
      kind: "summary",
      input: { words: 20 },
      hold: 1,
      output: said,
    });
    expect(await app.unitsUsed(user.id)).toBe(1);
    const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
    expect(usage.kinds).toContainEqual({ kind: "summary", units: 1 });
    expect(usage.catalog).toContainEqual(
      expect.objectContaining({ id: "summary", noun: "summary", output: "text" }),
    );
  });

  test("the words default to 100 and are stored with the input", async () => {
    const user = await app.newUser("pro");
    const res = await summarize(user, { text: "A text." });
    expect(res.status).toBe(202);
    expect((await res.json()).job.input).toEqual({ text: "A text.", words: 100 });
  });

  test("an answer longer than the bound: failed output_invalid, refunded once", async () => {
    const user = await app.newUser("pro");
    const said = "one two three four five six seven eight nine ten eleven twelve";
    const job = await run(user, {
      text: `Some text. [fake:say:${JSON.stringify(said)}]`,
      words: 10,
    });
    expect(job).toMatchObject({
      status: "failed",
      failureReason: "output_invalid",
      quotaRefunded: true,
    });
    expect(await app.unitsUsed(user.id)).toBe(0);
    const refunds = (await app.events(job.id)).filter((e) => e.event === "failed");
    expect(refunds).toHaveLength(1);
  });

  test("a plan that does not offer it: 403 kind_not_in_plan, nothing held", async () => {
    const user = await app.newUser("free");
    const res = await summarize(user, { text: "A text.", words: 20 });
    expect(res.status).toBe(403);
    expect((await res.json()).error.code).toBe("kind_not_in_plan");
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.qstash.messages).toHaveLength(0);
  });

  test("a bound out of range: 400 invalid_input at input.words, nothing held", async () => {
    const user = await app.newUser("pro");
    for (const words of [9, 501, 12.5, "20"]) {
      const res = await summarize(user, { text: "A text.", words });
      expect(res.status).toBe(400);
      const body = await res.json();
      expect(body.error.code).toBe("invalid_input");
      expect(body.details).toEqual([{ path: "input.words", message: expect.any(String) }]);
    }
    expect(await app.unitsUsed(user.id)).toBe(0);
  });
});

const summaryRadio = (page: Page) => page.getByRole("radio", { name: /^Summarize a text/ });

describe("the summary kind on the page, from its declaration", () => {
  test("listed disabled on a plan without its row; offered once the row is there; its form sends a summary and its card shows it", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "free");
    const note = page.locator("#kind-note-summary");
    expect(await shownText(note, "the plan's offer")).toBe(
      "Your Free plan does not include summaries.",
    );
    expect(await summaryRadio(page).isDisabled()).toBe(true);

    // Its SQL rows: here inserted by the test (in real life a migration and the seed).
    await h
      .stack()
      .sql.query(
        "insert into public.plan_kinds (plan_id, kind, units) values ('free', 'summary', 1)",
      );
    try {
      await page.reload();
      await until("the offer with the row", async () =>
        (await page.locator("#kind-note-summary").textContent())?.startsWith("Each"),
      );
      expect(await page.locator("#kind-note-summary").textContent()).toBe(
        "Each summary uses 1 unit of your plan.",
      );
      await summaryRadio(page).check();
      expect(await page.getByLabel("What should it write?").isHidden()).toBe(true);
      const words = page.getByLabel("At most how many words?");
      expect(await words.inputValue()).toBe("100");
      expect(await page.locator("#summary-words-help").textContent()).toBe(
        "A whole number from 10 to 500.",
      );
      expect(await page.locator("#summary-text-help").textContent()).toBe(
        "Up to 8,000 characters.",
      );

      const sent: unknown[] = [];
      page.on("request", (r) => {
        if (r.method() === "POST" && r.url().endsWith("/api/jobs")) sent.push(r.postDataJSON());
      });
      const said = "Queues let a page answer at once while the slow work runs elsewhere.";
      await page
        .getByLabel("Text to summarize")
        .fill(`A long text about queues. [fake:say:${JSON.stringify(said)}]`);
      await words.fill("20");
      await page.getByRole("button", { name: "Summarize", exact: true }).click();
      const job = card(page);
      await job.and(page.locator('[data-phase="succeeded"]')).waitFor();
      expect(sent).toEqual([
        { kind: "summary", input: { text: expect.stringContaining("queues"), words: 20 } },
      ]);
      expect(await job.locator("h3").textContent()).toMatch(/^Summary from \d\d:\d\d/);
      expect(await job.locator(".job-output").textContent()).toContain(said);
      expect(
        await job.getByRole("button", { name: /^Download \.md of the summary from/ }).count(),
      ).toBe(1);
      await h.screenshot(page, "add-a-kind-01-summary");
      expect(errors).toEqual([]);
    } finally {
      await h
        .stack()
        .sql.query("delete from public.plan_kinds where plan_id = 'free' and kind = 'summary'");
    }
  });

  test("the API's refusal of a bound out of range is shown under its field", async () => {
    const { page } = await h.open();
    await devSignIn(page, "pro");
    await summaryRadio(page).check();
    await page.getByLabel("Text to summarize").fill("A text.");
    await page.getByLabel("At most how many words?").fill("501");
    await page.getByRole("button", { name: "Summarize", exact: true }).click();
    const error = page.locator("#summary-words-error");
    expect(await shownText(error, "the refusal under the field")).toBe(
      "Must be a whole number from 10 to 500.",
    );
    expect(await page.getByLabel("At most how many words?").getAttribute("aria-invalid")).toBe(
      "true",
    );
    expect(await page.locator("li.job").count()).toBe(0);
  });
});
