/**
 * One door to the database: only lib/deps.ts makes a database client (`createRpc`, defined in
 * lib/db.ts over postgrest-js), once per instance, and every flow and handler reaches the
 * database through the ports it builds (`jobs`, `rpc`). A second client would have its own
 * fetch, its own settings and its own place to forget the server key's handling.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { describe, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";

/** Where a client may be made: its definition and the wiring. */
const DOOR = new Set(["lib/db.ts", "lib/deps.ts"]);
const MAKES_A_CLIENT = /\bcreateRpc\s*\(|\bnew\s+PostgrestClient\s*\(|\bfrom\s+["']pg["']/;

/** Code lines of a TypeScript source, comments blanked (the examples in doc comments are prose). */
function codeLines(source: string): string[] {
  return source
    .replace(/\/\*[\s\S]*?\*\//g, (c) => c.replace(/[^\n]/g, " "))
    .split("\n")
    .map((l) => l.replace(/(^|[^:])\/\/.*$/, "$1"));
}

/** `file:line` of every place outside the door that makes a database client. */
function otherDoors(files: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [file, source] of files) {
    if (DOOR.has(file)) continue;
    for (const [i, line] of codeLines(source).entries())
      if (MAKES_A_CLIENT.test(line)) found.push(`${file}:${i + 1}`);
  }
  return found;
}

async function sources(dir: string, out = new Map<string, string>()): Promise<Map<string, string>> {
  for (const e of await readdir(join(root, dir), { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) await sources(path, out);
    else if (e.name.endsWith(".ts"))
      out.set(relative("", path), await readFile(join(root, path), "utf8"));
  }
  return out;
}

describe("one door to the database", () => {
  test("no file of api/ or lib/ but lib/deps.ts makes a database client", async () => {
    const files = await sources("api");
    await sources("lib", files);
    expect(files.size).toBeGreaterThan(30);
    expect(otherDoors(files)).toEqual([]);
  });

  test("a planted second client is named; an example in a comment is not", () => {
    const planted = new Map([
      ["lib/deps.ts", "const rpc = createRpc({ url, serverKey });"],
      ["lib/db.ts", "export function createRpc(o) { return new PostgrestClient(o.url); }"],
      [
        "api/ops/metrics.ts",
        '/**\n * const rpc = createRpc({ url });\n */\nimport { x } from "y";\n// createRpc(here)\nconst rpc = createRpc({ url: config.supabaseUrl });',
      ],
      ["lib/history.ts", 'import pg from "pg";'],
    ]);
    expect(otherDoors(planted)).toEqual(["api/ops/metrics.ts:6", "lib/history.ts:1"]);
  });
});
