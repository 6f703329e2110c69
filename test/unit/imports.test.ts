/**
 * The house rules of what ships, read from the imports themselves (TypeScript's own pre-parser,
 * type-only imports included): `api/` and `lib/` import nothing from the offline stack, the
 * benchmarks, the tests or the tools; a flow imports the port types (lib/ports.ts), never the
 * wiring that builds them (lib/deps.ts, lib/worker-deps.ts); and lib/ has no import cycle.
 */
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";

const SHIPPED = ["api", "lib"];
const WIRING = ["lib/deps.ts", "lib/worker-deps.ts"];

function filesUnder(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => relative(root, join(e.parentPath, e.name)));
}

/** The repo-relative files a file imports (packages are left out). */
function importsOf(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(join(root, file), "utf8"), true, true);
  return info.importedFiles
    .map((i) => i.fileName)
    .filter((name) => name.startsWith("."))
    .map((name) => relative(root, resolve(root, dirname(file), name)));
}

const graph = new Map(SHIPPED.flatMap(filesUnder).map((f) => [f, importsOf(f)] as const));

test("the shipped code has files to check, and reads their imports", () => {
  expect(graph.size).toBeGreaterThan(20);
  expect(graph.get("lib/worker-deps.ts")).toContain("lib/model.ts");
});

test("api/ and lib/ import nothing from dev/, bench/, test/, ops/ or spec/", () => {
  const outside = [...graph].flatMap(([file, imports]) =>
    imports
      .filter((i) => !SHIPPED.some((dir) => i.startsWith(`${dir}/`)))
      .map((i) => `${file} → ${i}`),
  );
  expect(outside).toEqual([]);
});

test("no flow imports the wiring: only api/ (and the worker's wiring) import lib/deps.ts or lib/worker-deps.ts", () => {
  const offenders = [...graph].flatMap(([file, imports]) =>
    file.startsWith("lib/") && !WIRING.includes(file)
      ? imports.filter((i) => WIRING.includes(i)).map((i) => `${file} → ${i}`)
      : [],
  );
  expect(offenders).toEqual([]);
});

test("lib/ has no import cycle", () => {
  const cycles: string[] = [];
  const done = new Set<string>();
  const visit = (file: string, path: string[]) => {
    if (path.includes(file)) {
      cycles.push([...path.slice(path.indexOf(file)), file].join(" → "));
      return;
    }
    if (done.has(file)) return;
    for (const next of graph.get(file) ?? [])
      if (next.startsWith("lib/")) visit(next, [...path, file]);
    done.add(file);
  };
  for (const file of graph.keys()) if (file.startsWith("lib/")) visit(file, []);
  expect(cycles).toEqual([]);
});

test('zod is imported as `import * as z from "zod"`: bundled, `import { z }` keeps every locale (570 KB more in each function)', () => {
  const named = [...graph.keys()].filter((file) =>
    /import\s*\{[^}]*\bz\b[^}]*\}\s*from\s*["']zod["']/.test(
      readFileSync(join(root, file), "utf8"),
    ),
  );
  expect(named).toEqual([]);
});
