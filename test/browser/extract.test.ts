/**
 * The kinds of job in a real (headless) Chromium against the whole local stack: the kind choice
 * as the plan offers it (a kind it does not offer shown disabled, with the reason), the
 * extraction form with its example schemas, its JSON output with copy and download, and the
 * API's refusals shown next to the field they name. Screenshots land in test-results/screenshots/.
 */
import { readFile } from "node:fs/promises";
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import {
  card,
  devSignIn,
  ledger,
  shownText,
  until,
  useBrowserStack,
  userIdOf,
} from "../support/browser.ts";
import { accessibilityProblems } from "./a11y.ts";

const h = useBrowserStack();

const extractRadio = (page: Page) =>
  page.getByRole("radio", { name: /^Extract data from a text, as JSON/ });

/** Every POST /api/jobs the page sends, with its body. */
function posts(page: Page) {
  const sent: unknown[] = [];
  page.on("request", (r) => {
    if (r.method() === "POST" && r.url().endsWith("/api/jobs")) sent.push(r.postDataJSON());
  });
  return sent;
}

// The clipboard answers the focused page only: the copy test comes first, before other tests'
// pages (one browser per file) exist.
/** A new pro user's page with the extraction form filled from one of its example schemas. */
async function extractionFrom(example: string) {
  const { page } = await h.open();
  await devSignIn(page, "pro");
  await extractRadio(page).check();
  await page.getByRole("button", { name: example }).click();
  return page;
}

describe("kinds of job in a browser", () => {
  test("a pro plan offers extraction at 2 units; from an example schema, its JSON output, indented, copied and downloaded; 2 units", async () => {
    const { page, context, errors } = await h.open();
    await context.grantPermissions(["clipboard-read", "clipboard-write"]);
    await devSignIn(page, "pro");
    await until("the pro plan's offer", async () =>
      (await page.locator("#kind-note-extract").textContent())?.startsWith("Each"),
    );
    expect(await page.locator("#kind-note-extract").textContent()).toBe(
      "Each extraction uses 2 units of your plan.",
    );
    await extractRadio(page).check();
    expect(await page.getByLabel("What should it write?").isHidden()).toBe(true);
    await page.getByRole("button", { name: "Contact card" }).click();
    const schemaField = page.getByLabel("JSON Schema of the data to extract");
    const schema = JSON.parse(await schemaField.inputValue());
    expect(schema).toMatchObject({ type: "object", additionalProperties: false });
    // the example also brings a sample text when the text is empty
    expect(await page.getByLabel("Text to extract from").inputValue()).toMatch(/Ada Lovelace/);
    expect(await accessibilityProblems(page)).toEqual([]);
    await h.screenshot(page, "extract-02-form-with-example");

    await page.getByRole("button", { name: "Extract", exact: true }).click();
    const job = card(page);
    await job.and(page.locator('[data-phase="succeeded"]')).waitFor();
    expect(await job.locator("h3").textContent()).toMatch(/^Extraction from \d\d:\d\d/);

    const jobId = (await job.getAttribute("data-job-id")) ?? "";
    const viewed = await page.evaluate(async (id) => {
      const token = JSON.parse(sessionStorage.getItem("quota-jobs.session") ?? "{}").accessToken;
      const r = await fetch(`/api/jobs/${id}`, { headers: { authorization: `Bearer ${token}` } });
      return (await r.json()).job;
    }, jobId);
    expect(viewed.kind).toBe("extract");
    const pretty = JSON.stringify(viewed.output, null, 2);
    expect(Object.keys(viewed.output).sort()).toEqual(Object.keys(schema.properties).sort());
    const pre = job.locator(".job-output pre.json");
    expect(await pre.textContent()).toBe(pretty);
    expect(await pre.evaluate((n) => n.children.length)).toBe(0); // text, no markup
    expect(await accessibilityProblems(page)).toEqual([]);
    await h.screenshot(page, "extract-03-json-output");

    await job.getByRole("button", { name: /^Copy JSON of the extraction from \d\d:\d\d$/ }).click();
    const notice = job.locator(".output-actions [role=status]");
    expect(await shownText(notice, "the copy notice")).toBe("Copied.");
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(pretty);
    const [download] = await Promise.all([
      page.waitForEvent("download"),
      job
        .getByRole("button", { name: /^Download \.json of the extraction from \d\d:\d\d$/ })
        .click(),
    ]);
    expect(download.suggestedFilename()).toMatch(/^extract-\d{4}-\d\d-\d\d-[0-9a-f]{8}\.json$/);
    expect(JSON.parse(await readFile(await download.path(), "utf8"))).toEqual(viewed.output);

    await until("usage 2 of 100", async () =>
      (await page.locator("#usage").textContent())?.startsWith("Pro plan: 2 of 100"),
    );
    expect((await ledger(h.stack(), await userIdOf(page))).unitsUsed).toBe(2);
    expect(errors).toEqual([]);
  });

  test("a free plan lists extraction disabled, with the reason", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "free");
    const note = page.locator("#kind-note-extract");
    await until("the plan's offer", async () =>
      (await note.textContent())?.startsWith("Your Free plan"),
    );
    expect(await note.textContent()).toBe("Your Free plan does not include extractions.");
    expect(await extractRadio(page).isDisabled()).toBe(true);
    // the reason is the radio's description, so a screen reader says it with the choice
    expect(await extractRadio(page).getAttribute("aria-describedby")).toBe("kind-note-extract");
    expect(await page.locator("#kind-note-document").textContent()).toBe(
      "Each document uses 1 unit of your plan.",
    );
    expect(await page.getByLabel("What should it write?").isVisible()).toBe(true);
    expect(await accessibilityProblems(page)).toEqual([]);
    await h.screenshot(page, "extract-01-free-plan-not-offered");

    expect(errors).toEqual([]);
  });

  test("the form's problems are shown next to their field: empty text, a schema that is not JSON (nothing sent), a schema outside the strict subset (the API's details)", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "pro");
    const sent = posts(page);
    await extractRadio(page).check();
    const text = page.getByLabel("Text to extract from");
    const schema = page.getByLabel("JSON Schema of the data to extract");
    const extract = page.getByRole("button", { name: "Extract", exact: true });

    await schema.fill('{"type": "object",');
    await extract.click();
    expect(await page.locator("#extract-text-error").textContent()).toBe("This field is empty.");
    expect(await text.getAttribute("aria-invalid")).toBe("true");
    expect(await page.locator("#extract-schema-error").textContent()).toMatch(
      /^This is not valid JSON: .+\.$/,
    );
    expect(await schema.getAttribute("aria-invalid")).toBe("true");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("extract-text");
    expect(sent).toEqual([]);

    // the API's refusal: every problem of the schema, under the schema field, by path
    await text.fill("Grace Hopper, grace@navy.example");
    await schema.fill(
      JSON.stringify({ type: "object", properties: { name: { type: "string" } } }, null, 2),
    );
    await extract.click();
    const schemaError = page.locator("#extract-schema-error");
    await until("the API's schema problems", async () => (await schemaError.textContent()) !== "");
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      kind: "extract",
      input: { text: "Grace Hopper, grace@navy.example" },
    });
    expect(await schemaError.textContent()).toMatch(/additionalProperties|required/);
    expect(await page.locator("#extract-text-error").textContent()).toBe("");
    expect(await page.evaluate(() => document.activeElement?.id)).toBe("extract-schema");
    expect(await page.locator("li.job").count()).toBe(0);
    expect(await accessibilityProblems(page)).toEqual([]);
    await h.screenshot(page, "extract-04-schema-refused");
    expect((await ledger(h.stack(), await userIdOf(page))).unitsUsed).toBe(0);
    expect(errors).toEqual([]);
  });

  test("a plan that no longer offers extractions: the API's kind_not_in_plan is shown by the kind choice", async () => {
    const page = await extractionFrom("Event");
    // the plan changes after the page loaded
    await h
      .stack()
      .sql.query("update public.user_plans set plan_id = 'free' where user_id = $1", [
        await userIdOf(page),
      ]);
    await page.getByRole("button", { name: "Extract", exact: true }).click();
    const kindError = page.locator("#kind-error");
    expect(await shownText(kindError, "the kind refusal")).toBe(
      "Your plan does not include extractions (it may have changed since this page loaded).",
    );
    expect(await page.locator("#kinds").getAttribute("aria-describedby")).toBe("kind-error");
    expect(await page.locator("li.job").count()).toBe(0);
  });

  test("an answer that breaks the schema fails the job, in words", async () => {
    const page = await extractionFrom("Invoice lines");
    await page
      .getByLabel("Text to extract from")
      .fill("[fake:json_invalid] Invoice 7, 2 pens at 1.00");
    await page.getByRole("button", { name: "Extract", exact: true }).click();
    const job = card(page);
    await job.and(page.locator('[data-phase="failed"]')).waitFor();
    expect(await job.locator(".job-phase").textContent()).toMatch(
      /^Failed: the AI model's answer did not match the requested schema\./,
    );
    expect(await job.locator(".output-actions").isHidden()).toBe(true);
    await h.screenshot(page, "extract-05-output-invalid");
  });

  test("while an extraction runs, its JSON streams in as plain text; once done, it is shown indented", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "pro");
    await extractRadio(page).check();
    await page.getByRole("button", { name: "Event" }).click();
    const text = page.getByLabel("Text to extract from");
    await text.fill(`[fake:chunk_ms:30] ${await text.inputValue()}`);
    await page.getByRole("button", { name: "Extract", exact: true }).click();
    const job = card(page);
    await job.and(page.locator('[data-phase="running"]')).waitFor();
    const output = job.locator(".job-output");
    await until("the first streamed JSON", async () =>
      ((await output.textContent()) ?? "").startsWith("{"),
    );
    // what the model has sent so far, as sent: not parsed, not indented, no copy yet
    expect(await output.getAttribute("class")).toContain("partial");
    expect(await output.locator("pre").count()).toBe(0);
    expect(await job.locator(".output-actions").isHidden()).toBe(true);
    await h.screenshot(page, "extract-06-streaming");
    // the fake fills each string with the whole text: a few hundred tokens, 30 ms apart
    await job.and(page.locator('[data-phase="succeeded"]')).waitFor({ timeout: 45_000 });
    expect(JSON.parse((await output.locator("pre.json").textContent()) ?? "")).toMatchObject({
      title: expect.any(String),
    });
    expect(errors).toEqual([]);
  });
});
