/**
 * A few accessibility rules checked on the live page, for the parts the page builds at run time
 * (rendered outputs, the kind choice): headings that do not skip a level, ids that are unique,
 * and every visible control with an accessible name. Not a full audit: a named rule that fails
 * here is a defect the page's own code made.
 */
import type { Page } from "playwright-core";

export async function accessibilityProblems(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const problems: string[] = [];
    const visible = (el: Element) => (el as HTMLElement).offsetParent !== null;
    let level = 0;
    for (const h of document.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
      if (!visible(h)) continue;
      const n = Number(h.tagName.slice(1));
      if (n > level + 1) problems.push(`heading ${h.tagName} "${h.textContent}" after h${level}`);
      level = n;
    }
    const seen = new Set<string>();
    for (const el of document.querySelectorAll("[id]")) {
      if (seen.has(el.id)) problems.push(`duplicate id ${el.id}`);
      seen.add(el.id);
    }
    for (const el of document.querySelectorAll("button, input, textarea, select, a[href]")) {
      if (!visible(el) || (el as HTMLInputElement).type === "hidden") continue;
      const labelled =
        el.getAttribute("aria-label") ||
        el.getAttribute("aria-labelledby") ||
        ((el as HTMLInputElement).labels?.length ?? 0) > 0 ||
        (el.tagName !== "INPUT" && el.tagName !== "TEXTAREA" && el.textContent?.trim());
      if (!labelled) problems.push(`unnamed ${el.tagName.toLowerCase()}`);
    }
    return problems;
  });
}
