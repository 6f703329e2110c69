/**
 * A token plan's page in a real (headless) Chromium against the whole local stack: the usage
 * line counts tokens, an active job says the most it holds, a finished one what it used.
 */
import { describe, expect, test } from "vitest";
import { card, devSignIn, generate, until, useBrowserStack } from "../support/browser.ts";

const h = useBrowserStack();

describe("the team plan in a browser", () => {
  test("usage in tokens; a running job holds prompt + 2,048; the finished job shows what it used and what went back", async () => {
    const { page, errors } = await h.open();
    await page.getByRole("button", { name: "Sign in locally" }).waitFor();
    await devSignIn(page, "team");
    const usage = page.locator("#usage");
    await until("the usage line", async () =>
      (await usage.textContent())?.startsWith("Team plan: 0 tokens used of 2,000,000."),
    );

    // Slow enough to be seen running: 30 tokens, 150 ms apart.
    const prompt = "Write a haiku about queues [fake:chunk_ms:150] [fake:tokens:30]";
    // The hold's prompt part is its UTF-8 bytes + 8 (docs/DESIGN.md#metering-hold-and-capture).
    const hold = Buffer.byteLength(prompt, "utf8") + 8 + 2048;
    const holdText = new Intl.NumberFormat("en-US").format(hold);
    await generate(page, prompt);

    const job = card(page);
    await until("the hold on the active card", async () =>
      (await job.locator(".job-phase").textContent())?.includes(
        `This job holds up to ${holdText} tokens of your quota.`,
      ),
    );
    await h.screenshot(page, "team-01-holding");

    await job.and(page.locator('[data-phase="succeeded"]')).waitFor();
    const phase = (await job.locator(".job-phase").textContent()) ?? "";
    const m = /It used ([\d,]+) tokens; the other ([\d,]+) it held went back\.$/.exec(phase);
    expect(m, phase).not.toBeNull();
    const used = Number(m?.[1]?.replaceAll(",", ""));
    const back = Number(m?.[2]?.replaceAll(",", ""));
    expect(used + back).toBe(hold);
    expect(used).toBeGreaterThanOrEqual(30);
    await until("the usage line after the capture", async () =>
      (await usage.textContent())?.startsWith(
        `Team plan: ${new Intl.NumberFormat("en-US").format(used)} tokens used of 2,000,000.`,
      ),
    );
    await h.screenshot(page, "team-02-captured");
    expect(errors).toEqual([]);
  });
});
