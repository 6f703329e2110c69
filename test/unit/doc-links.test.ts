/**
 * Every relative link in the documents a reader follows (README.md, CONTRIBUTING.md,
 * dev/README.md, docs/**.md) reaches something: the file exists, and a `#anchor` on a markdown
 * file (or on the same page) names one of its headings, as GitHub makes them, or one of its
 * `<a id="...">` anchors. Moving a section to another file breaks its links until they follow it.
 *
 * Links inside code (fenced blocks, inline code spans) are text, not links, and are skipped. The
 * planted-text tests run the same checker on broken links, so a checker that stopped finding
 * anything would fail too.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { describe, expect, test } from "vitest";
import { anchorOf, anchorsOf, proseLines, ROOT, repoFiles } from "../support/markdown.ts";

/** The documents whose links are checked: tracked or new (not ignored) markdown files. */
function documents(): string[] {
  return repoFiles()
    .filter(
      (f) =>
        ["README.md", "CONTRIBUTING.md", "dev/README.md"].includes(f) || /^docs\/.+\.md$/.test(f),
    )
    .filter((f) => existsSync(join(ROOT, f)))
    .sort();
}

/** The relative links of a markdown text, `[text](target)`, outside code, with their line. */
function relativeLinks(markdown: string): Array<{ line: number; target: string }> {
  const links: Array<{ line: number; target: string }> = [];
  proseLines(markdown).forEach((text, i) => {
    const prose = text.replace(/`[^`]*`/g, "");
    for (const m of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const target = m[1] ?? "";
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:, ...
      links.push({ line: i + 1, target });
    }
  });
  return links;
}

/**
 * What is wrong with one document's links: a target that does not exist, or an anchor that
 * names no heading of its markdown file. `read` gives a file's text, or null when it is absent.
 */
function brokenLinks(
  file: string,
  markdown: string,
  read: (path: string) => string | null,
): string[] {
  const problems: string[] = [];
  for (const { line, target } of relativeLinks(markdown)) {
    const [path = "", anchor] = target.split("#", 2);
    const where = `${file}:${line}: (${target})`;
    const resolved = path === "" ? file : normalize(join(dirname(file), decodeURIComponent(path)));
    const text = path === "" ? markdown : read(resolved);
    if (text === null) {
      problems.push(`${where}: ${resolved} does not exist`);
      continue;
    }
    if (anchor && resolved.endsWith(".md") && !anchorsOf(text).has(anchor.toLowerCase()))
      problems.push(`${where}: ${resolved} has no heading #${anchor}`);
  }
  return problems;
}

/** A repository file's text ("" for a folder), or null when there is none. */
function readRepo(path: string): string | null {
  const full = join(ROOT, path);
  if (!existsSync(full)) return null;
  return statSync(full).isDirectory() ? "" : readFileSync(full, "utf8");
}

describe("every relative link in the documents resolves", () => {
  test("README.md, CONTRIBUTING.md, dev/README.md and docs/: each file and heading a link names exists", () => {
    const files = documents();
    expect(files).toEqual(expect.arrayContaining(["README.md", "dev/README.md", "docs/DESIGN.md"]));
    expect(files.filter((f) => f.startsWith("docs/flows/")).length).toBeGreaterThan(0);
    const problems = files.flatMap((f) =>
      brokenLinks(f, readFileSync(join(ROOT, f), "utf8"), readRepo),
    );
    expect(problems).toEqual([]);
  });
});

describe("the checker catches what it is for (planted text)", () => {
  const repo: Record<string, string> = {
    "docs/DESIGN.md": "# Design\n\n## State machine\n\n## Flows\n",
    "docs/RUNBOOK.md": '# Runbook\n\n<a id="stuck-jobs"></a>\n\n### Stuck jobs: what to do\n',
  };
  const read = (path: string) => repo[path] ?? null;
  const check = (text: string, file = "docs/flows/cancel.md") => brokenLinks(file, text, read);

  test("a link to a file that is not there", () => {
    expect(check("see [gone](../GONE.md)")).toEqual([
      "docs/flows/cancel.md:1: (../GONE.md): docs/GONE.md does not exist",
    ]);
  });

  test("an anchor no heading has, in another file and on the same page", () => {
    expect(check("[x](../RUNBOOK.md#no-such-heading)\n[y](#nowhere)")).toEqual([
      "docs/flows/cancel.md:1: (../RUNBOOK.md#no-such-heading): docs/RUNBOOK.md has no heading #no-such-heading",
      "docs/flows/cancel.md:2: (#nowhere): docs/flows/cancel.md has no heading #nowhere",
    ]);
  });

  test("the forms it allows: headings, numbered duplicates, <a id>, folders, code, other schemes", () => {
    const ok = [
      "# Cancel\n\n## Flows\n\n## Flows\n",
      "[a](../DESIGN.md#state-machine) and [b](../RUNBOOK.md#stuck-jobs-what-to-do)",
      "[c](../RUNBOOK.md#stuck-jobs) [d](#flows-1) [e](https://example.com/x.md)",
      "`[not a link](GONE.md)` and [f](../DESIGN.md)",
      "```\n[in a fence](GONE.md)\n```",
    ].join("\n");
    expect(check(ok, "docs/flows/cancel.md")).toEqual([]);
  });

  test("anchors are GitHub's", () => {
    // Assembled so that test/unit/repo-stands-alone.test.ts does not read it as a bare number.
    expect(anchorOf(`Invariant ${6}: an error is never "already done"`)).toBe(
      "invariant-6-an-error-is-never-already-done",
    );
    expect(anchorOf("Refusals of `POST /api/jobs`")).toBe("refusals-of-post-apijobs");
    expect(anchorOf("`job_events` by month, `generation_jobs` whole")).toBe(
      "job_events-by-month-generation_jobs-whole",
    );
    expect([...anchorsOf("# A\n```\n# not a heading\n```\n## A\n")]).toEqual(["a", "a-1"]);
  });
});
