/**
 * The functions the frontend calls start cold without the OpenAI SDK: bundle each api/ file as
 * Vercel would (esbuild, every dependency inlined) and read what went in. Only the worker may,
 * and must, contain `openai`.
 */
import { readdir } from "node:fs/promises";
import { join, relative } from "node:path";
import { build } from "esbuild";
import { describe, expect, test } from "vitest";
import { root } from "../../dev/migrate.ts";

async function apiFiles(dir = join(root, "api")): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await apiFiles(path)));
    else if (entry.name.endsWith(".ts")) out.push(path);
  }
  return out.sort();
}

async function inputsOf(entry: string): Promise<string[]> {
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node22",
    write: false,
    metafile: true,
    logLevel: "silent",
  });
  return Object.keys(result.metafile.inputs);
}

const files = await apiFiles();
const usesOpenAI = (inputs: string[]) => inputs.some((p) => p.includes("node_modules/openai/"));

describe("api/ bundles", () => {
  test("every route file is found (and any added later is checked too)", () => {
    expect(files.map((f) => relative(root, f))).toEqual(
      expect.arrayContaining([
        "api/cron/sweep.ts",
        "api/dlq.ts",
        "api/health.ts",
        "api/jobs/[id].ts",
        "api/jobs/index.ts",
        "api/usage.ts",
        "api/worker.ts",
      ]),
    );
  });

  test.each(files.map((f) => [relative(root, f), f]))(
    "%s loads the OpenAI SDK only if it is the worker",
    async (name, file) => {
      const inputs = await inputsOf(file);
      expect(inputs.length).toBeGreaterThan(0);
      expect(usesOpenAI(inputs)).toBe(name === "api/worker.ts");
      expect(inputs.some((p) => p.endsWith("lib/model.ts"))).toBe(name === "api/worker.ts");
    },
  );
});
