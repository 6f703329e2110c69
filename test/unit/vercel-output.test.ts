import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, test } from "vitest";
import { loadVercelOutput } from "../../dev/vercel-output.ts";

let dir = "";
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function outputWith(routes: unknown[]): Promise<string> {
  dir = await mkdtemp(join(tmpdir(), "vercel-output-"));
  await mkdir(join(dir, "functions"));
  await mkdir(join(dir, "static"));
  await writeFile(join(dir, "config.json"), JSON.stringify({ version: 3, routes }));
  return dir;
}

describe("the local server refuses build output it does not understand", () => {
  test("a route phase other than filesystem, miss and error is refused, not guessed", async () => {
    await expect(loadVercelOutput(await outputWith([{ handle: "rewrite" }]))).rejects.toThrow(
      /route phase "handle: rewrite" is refused/,
    );
  });

  test("the phases it serves load", async () => {
    const out = await loadVercelOutput(
      await outputWith([{ handle: "filesystem" }, { handle: "miss" }, { handle: "error" }]),
    );
    expect(out).toBeDefined();
  });
});
