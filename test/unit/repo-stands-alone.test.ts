/**
 * The repository explains itself: no tracked file points outside it (a path to a sibling
 * folder, a field report, a design section number, an issue number), and every reference to
 * the design names a heading `docs/DESIGN.md` has. The one form of such a reference is the
 * heading's GitHub anchor, `docs/DESIGN.md#state-machine` (inside `docs/`, a relative link
 * `[...](DESIGN.md#state-machine)`); a renamed heading fails here until its references follow.
 *
 * The planted-text tests run the same checker on bad text, so a checker that stopped catching
 * anything would fail too. Bad strings are assembled from pieces so this file passes its own
 * check.
 */
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describe, expect, test } from "vitest";
import { anchorOf, anchorsOf, ROOT, repoFiles } from "../support/markdown.ts";

const DESIGN = "docs/DESIGN.md";

interface Rule {
  pattern: RegExp;
  why: string;
  /** Files where the pattern is the definition, not a reference. */
  except?: string[];
}

/** References to things that are not in the repository. */
const OUTSIDE: Rule[] = [
  { pattern: /\.\.\/shared\b/, why: "a path outside the repository" },
  { pattern: /\/work\/(?:shared|main|wt-\d+)\b/, why: "a path on one machine" },
  { pattern: /\bseeds?\/\d{3}/i, why: "a field report that is not in the repository" },
  { pattern: /\breference\/[\w-]+\.md\b/i, why: "a reference note that is not in the repository" },
  {
    pattern: /\breference\s+(?:note\s+)?[\w-]+\.md\b/i,
    why: "a reference note by name, which is not in the repository",
  },
  { pattern: /\bDESIGN\s*§/i, why: "a section number of a design that is not in the repository" },
  { pattern: /§\s*\d/, why: "a section number; name the section instead" },
  { pattern: /\bissues?\s+#?\d+\b/i, why: "an issue number; the tracker is not in the repository" },
  {
    pattern: /\binvariants?\s+\d+\b/i,
    why: "an invariant by number alone; link its heading, e.g. docs/DESIGN.md#invariant-1-no-drift",
    except: [DESIGN],
  },
  {
    // docs/DESIGN.md by its path, or a relative link from docs/ or docs/flows/.
    pattern: /(?<!docs\/)(?<!\]\()(?<!\]\(\.\.\/)\bDESIGN\.md\b/,
    why: "the design outside docs/; write docs/DESIGN.md",
  },
];

interface Finding {
  file: string;
  line: number;
  text: string;
  why: string;
}

/**
 * Everything wrong with one file's text: references outside the repository, design anchors
 * that name no heading of `designAnchors`, and (in markdown) relative links to missing files.
 */
function check(
  file: string,
  text: string,
  designAnchors: Set<string>,
  exists: (path: string) => boolean = () => true,
): Finding[] {
  const findings: Finding[] = [];
  const ownAnchors = file === DESIGN ? designAnchors : null;
  text.split("\n").forEach((line, i) => {
    const at = (why: string) => findings.push({ file, line: i + 1, text: line.trim(), why });
    for (const rule of OUTSIDE) {
      if (rule.except?.includes(file)) continue;
      if (rule.pattern.test(line)) at(rule.why);
    }
    for (const m of line.matchAll(/DESIGN\.md#([\p{L}\p{N}_-]+)/gu)) {
      if (!designAnchors.has(m[1] ?? "")) at(`${DESIGN} has no heading #${m[1]}`);
    }
    if (ownAnchors) {
      for (const m of line.matchAll(/\]\(#([\p{L}\p{N}_-]+)\)/gu)) {
        if (!ownAnchors.has(m[1] ?? "")) at(`${DESIGN} has no heading #${m[1]}`);
      }
    }
    if (file.endsWith(".md")) {
      for (const m of line.matchAll(/\]\(([^)\s#]+)(?:#[^)\s]*)?\)/g)) {
        const target = m[1] ?? "";
        if (/^[a-z]+:/i.test(target)) continue;
        const path = join(dirname(file), target);
        if (!exists(path)) at(`the link target ${target} does not exist`);
      }
    }
  });
  return findings;
}

const designAnchors = anchorsOf(readFileSync(join(ROOT, DESIGN), "utf8"));

describe("the repository stands alone", () => {
  test("no tracked file refers outside the repository, and every design reference resolves", () => {
    const findings = repoFiles()
      .filter((f) => f !== "package-lock.json" && existsSync(join(ROOT, f)))
      .flatMap((f) =>
        check(f, readFileSync(join(ROOT, f), "utf8"), designAnchors, (p) =>
          existsSync(join(ROOT, p)),
        ),
      );
    expect(findings.map((f) => `${f.file}:${f.line}: ${f.why}: ${f.text}`)).toEqual([]);
  });

  test("docs/DESIGN.md has the sections the code and docs point to", () => {
    for (const heading of [
      "state-machine",
      "invariants",
      "http-api",
      "flows",
      "configuration",
      "local-stack",
      "why-the-failures-this-prevents",
      "invariant-1-no-drift",
      "invariant-2-exactly-once-refund",
      "invariant-3-one-fate",
      "invariant-4-limits-hold",
      "invariant-5-nothing-stuck",
      "invariant-6-an-error-is-never-already-done",
      "invariant-7-one-model-call-per-claim",
    ]) {
      expect([...designAnchors], heading).toContain(heading);
    }
  });
});

describe("the checker catches what it is for (planted text)", () => {
  const anchors = new Set(["state-machine", "invariant-2-exactly-once-refund"]);
  const caught = (text: string, file = "lib/x.ts") => check(file, text, anchors).map((f) => f.why);
  // Assembled from pieces so that this file itself stays clean.
  const dots = "..";
  const section = "\u00a7";

  test.each([
    ["a sibling folder", `see ${dots}/shared/${"DESIGN"}.md`],
    ["a machine path", "read /work/" + "shared/notes.md"],
    ["a field report", `as in seeds/${"000"}`],
    ["a reference note", `(reference/${"qstash"}.md)`],
    ["a reference note by name", `(reference ${"platform"}.md, its section E)`],
    ["a design section number", `(DESIGN ${section}3)`],
    ["a bare section number", `see ${section}4 above`],
    ["an issue number", `(issue ${6}, fault injection)`],
    ["an invariant by number alone", `this keeps invariant ${7}`],
    ["the design outside docs/", `the contract in ${"DESIGN"}.md`],
    ["a design anchor with no heading", `docs/DESIGN.md#${"no-such-heading"}`],
  ])("%s", (_, text) => {
    expect(caught(text)).not.toEqual([]);
  });

  test("a self-link in the design to a missing heading", () => {
    expect(caught(`see [the flows](#${"no-flows"})`, DESIGN)).not.toEqual([]);
  });

  test("a markdown link to a file that is not there", () => {
    const findings = check("README.md", "[gone](docs/GONE.md)", anchors, () => false);
    expect(findings.map((f) => f.why)).toEqual(["the link target docs/GONE.md does not exist"]);
  });

  test("the forms it allows", () => {
    expect(caught("the refund: docs/DESIGN.md#invariant-2-exactly-once-refund")).toEqual([]);
    expect(caught("see docs/DESIGN.md#state-machine and `docs/DESIGN.md`")).toEqual([]);
    expect(caught("[flows](DESIGN.md#state-machine)", "docs/RUNBOOK.md")).toEqual([]);
    expect(caught("[design](../DESIGN.md#state-machine)", "docs/flows/cancel.md")).toEqual([]);
    expect(caught(`### Invariant ${2}: exactly-once refund`, DESIGN)).toEqual([]);
    expect(caught("the monthly budget; reissue 3 tokens; an issue with Redis")).toEqual([]);
  });

  test("anchors are GitHub's", () => {
    expect(anchorOf(`Invariant ${6}: an error is never "already done"`)).toBe(
      "invariant-6-an-error-is-never-already-done",
    );
    expect(anchorOf("Why: the failures this prevents")).toBe("why-the-failures-this-prevents");
    expect([...anchorsOf("# A\n```\n# not a heading\n```\n## A\n")]).toEqual(["a", "a-1"]);
  });
});
