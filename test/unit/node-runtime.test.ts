/**
 * One Node major everywhere: `engines.node` (what Vercel's builder turns into the functions'
 * runtime, checked on the built output in test/artifact/functions.test.ts), the `node`
 * devDependency that npm scripts run on (so a machine whose own Node is older still tests on
 * this one), `@types/node`, and the Node that runs this test and everything it spawns with
 * `process.execPath`.
 */
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";

const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
  engines: { node: string };
  devDependencies: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as {
  packages: Record<string, { version?: string }>;
};
const majorOf = (version: string) => Number(/(\d+)\./.exec(version)?.[1]);

test("engines, the node devDependency, @types/node and the running Node are one major", () => {
  const major = majorOf(pkg.engines.node);
  expect(pkg.engines.node).toBe(`${major}.x`);
  expect(major).toBeGreaterThanOrEqual(24);
  expect(majorOf(pkg.devDependencies.node ?? "")).toBe(major);
  expect(majorOf(lock.packages["node_modules/node"]?.version ?? "")).toBe(major);
  expect(majorOf(pkg.devDependencies["@types/node"] ?? "")).toBe(major);
  expect(majorOf(lock.packages["node_modules/@types/node"]?.version ?? "")).toBe(major);
  expect(majorOf(process.versions.node)).toBe(major);
  const spawned = spawnSync(process.execPath, ["--version"], { encoding: "utf8" }).stdout.trim();
  expect(spawned).toBe(`v${lock.packages["node_modules/node"]?.version}`);
});
