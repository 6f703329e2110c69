/**
 * What the repository checks read from markdown, as GitHub reads it: the files a check covers,
 * the text outside code fences, and the anchors a document's headings and `<a id>`s make.
 * test/unit/doc-links.test.ts and test/unit/repo-stands-alone.test.ts both resolve anchors
 * with these, so the two cannot disagree about what a heading's anchor is.
 */
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Tracked files, and new ones not yet added (unless ignored): caught before the commit. */
export function repoFiles(): string[] {
  const args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"];
  const files = execFileSync("git", args, { cwd: ROOT, encoding: "utf8" }).split("\0");
  return [...new Set(files)].filter((f) => f !== "");
}

/** The text outside fenced code blocks, line by line (a fenced line becomes empty). */
export function proseLines(markdown: string): string[] {
  let fenced = false;
  return markdown.split("\n").map((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return "";
    }
    return fenced ? "" : line;
  });
}

/** GitHub's anchor for a heading's text: links reduced to their text, punctuation dropped. */
export function anchorOf(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
}

/** Every anchor a markdown text has: its headings (duplicates numbered) and its `<a id>`s. */
export function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(markdown)) {
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1] ?? "");
    const h = /^#{1,6}\s+(.+?)\s*#*\s*$/.exec(line);
    if (!h?.[1]) continue;
    const base = anchorOf(h[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}
