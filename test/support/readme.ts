/**
 * The commands README.md shows, as a reader would copy them: every line of every fenced `sh`
 * block (a trailing backslash continues the line, `# ...` comments dropped) and every inline
 * code span that is a command: `curl ...`, `npx ...`, `npm ci|test|run <script>`, `supabase ...`,
 * `apt-get ...`, `psql ...`, `select|insert|update ...`, optionally after `NAME=value`
 * assignments or as `NAME=$(...)`. docs/FAILURE-PATHS.md's commands are found the same way.
 * test/unit/readme-commands.test.ts maps each to the test that runs it; the tests that run them
 * take them from here, so a README change reaches them.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { root } from "../../dev/postgres/migrate.ts";

export const README = join(root, "README.md");
export const FAILURE_PATHS = join(root, "docs", "FAILURE-PATHS.md");

const INLINE_COMMAND =
  /^([A-Z][A-Z0-9_]*=\S* )*([A-Z][A-Z0-9_]*=\$\()?(curl \S|npx \S|npm (ci|test|run \S)|supabase \S|apt-get \S|psql \S|(select|insert|update) \S)/;

/** Every command README.md (or `text`) shows, each once, in the order they first appear. */
export function readmeCommands(text = readFileSync(README, "utf8")): string[] {
  const found: string[] = [];
  const fences = /^```(\S*)\n([\s\S]*?)^```/gm;
  for (const [, lang, body = ""] of text.matchAll(fences)) {
    if (lang !== "sh") continue;
    for (const line of body.replace(/\s*\\\n\s*/g, " ").split("\n")) {
      const command = line.replace(/(^|\s+)#.*$/, "").trim();
      if (command) found.push(command);
    }
  }
  const prose = text.replace(fences, "");
  for (const [, span = ""] of prose.matchAll(/`([^`]+)`/g)) {
    const command = span.replace(/\s+/g, " ").trim();
    if (INLINE_COMMAND.test(command)) found.push(command);
  }
  return [...new Set(found)];
}

/** The commands docs/FAILURE-PATHS.md shows, found as in the README. */
export function failurePathCommands(): string[] {
  return readmeCommands(readFileSync(FAILURE_PATHS, "utf8"));
}

/** The one command that starts with `prefix` (fails when there is none, or several). */
export function readmeCommand(prefix: string, commands = readmeCommands()): string {
  const matches = commands.filter((c) => c.startsWith(prefix));
  if (matches.length !== 1)
    throw new Error(`${matches.length} commands start with ${JSON.stringify(prefix)}`);
  return matches[0] as string;
}

/** Runs a script in bash, asynchronously: the stand-ins live in this process and must answer. */
export async function sh(script: string, env: Record<string, string>): Promise<string> {
  const run = await promisify(execFile)("bash", ["-euo", "pipefail", "-c", script], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
  return run.stdout;
}
