/**
 * CONTRIBUTING's commit rule: a subject of at most 72 characters (git's own advice, and what
 * every log view shows whole). Checked over every commit made since the rule, so the history
 * before it stays as it was; the checker is tried on a planted list too.
 */
import { execFileSync } from "node:child_process";
import { describe, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";

/** Commits made before this instant keep their subjects: the rule starts here. */
const SINCE = "2026-12-03T06:00:00Z";
const MAX = 72;

function tooLong(commits: { hash: string; subject: string }[]): string[] {
  return commits
    .filter((c) => [...c.subject].length > MAX)
    .map((c) => `${c.hash} (${[...c.subject].length}): ${c.subject}`);
}

describe("commit subjects", () => {
  test(`every commit since ${SINCE} has a subject of at most ${MAX} characters`, () => {
    const log = execFileSync(
      "git",
      ["log", `--since=${SINCE}`, "--format=%h%x09%cI%x09%s", "HEAD"],
      { cwd: root, encoding: "utf8" },
    );
    const commits = log
      .split("\n")
      .filter((l) => l !== "")
      .map((l) => {
        const [hash = "", at = "", ...subject] = l.split("\t");
        return { hash, at, subject: subject.join("\t") };
      })
      // --since reads committer dates, which a rebase or a merge can move: keep the rule's own.
      .filter((c) => Date.parse(c.at) >= Date.parse(SINCE));
    expect(commits.length).toBeGreaterThan(0);
    expect(tooLong(commits)).toEqual([]);
  });

  test("the checker counts characters, not bytes, and names a long subject", () => {
    const ok = "é".repeat(72);
    const long = `${"x".repeat(72)}y`;
    expect(
      tooLong([
        { hash: "a", subject: ok },
        { hash: "b", subject: long },
      ]),
    ).toEqual([`b (73): ${long}`]);
  });
});
