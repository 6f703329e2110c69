/**
 * The last step of `npm run build`: each function's handler, as Vercel's builder compiled it
 * into `.vercel/output/functions/<route>.func/`, becomes one file with esbuild, with what it
 * imports from the folder's traced `node_modules` inside it. The official SDKs are the same
 * code, in one file instead of hundreds: a fresh instance reads, resolves and links one module
 * instead of ~210 (the enqueue function; bench/first-request.ts measures both), which is most of
 * what a cold import costs.
 *
 * Nothing else in the folder changes: the traced `node_modules` stay beside the handler, so
 * what stays outside the bundle resolves exactly as before. Outside: the tokenizer's encodings,
 * which the worker loads with `import()` only when it counts (bundled, their megabytes of
 * tables would be parsed at every cold start).
 *
 * The builder's own handler is kept in `.vercel/traced/` (outside the deployed output), so the
 * bench can time the unbundled function beside the bundled one in one run.
 * `QUOTA_JOBS_BUNDLE=0 npm run build` leaves the output as the builder made it.
 */
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { buildSync } from "esbuild";

/** Loaded only through `import()` when needed: bundling them would load them every time. */
export const KEPT_OUTSIDE = ["gpt-tokenizer", "gpt-tokenizer/*"];

/** A CommonJS dependency calling `require` works inside an ES module bundle. */
const REQUIRE_SHIM =
  'import { createRequire as __bundleCreateRequire } from "node:module"; const require = __bundleCreateRequire(import.meta.url);';

export function functionFolders(functionsDir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(functionsDir, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const p = join(functionsDir, e.name);
    if (e.name.endsWith(".func")) out.push(p);
    else out.push(...functionFolders(p));
  }
  return out.sort();
}

export interface Bundled {
  function: string;
  handler: string;
  inputs: number;
  bytes: number;
}

/**
 * Bundles every function's handler in `outputDir` (a `.vercel/output`) in place; the builder's
 * handler files go to `tracedDir/functions/<route>.func/<handler>` first.
 */
export function bundleFunctions(outputDir: string, tracedDir: string): Bundled[] {
  const functionsDir = join(outputDir, "functions");
  const done: Bundled[] = [];
  for (const dir of functionFolders(functionsDir)) {
    const vc = JSON.parse(readFileSync(join(dir, ".vc-config.json"), "utf8")) as {
      handler: string;
    };
    const entry = join(dir, vc.handler);
    const name = relative(functionsDir, dir);
    const keep = join(tracedDir, "functions", name, vc.handler);
    mkdirSync(dirname(keep), { recursive: true });
    copyFileSync(entry, keep);
    if (existsSync(`${entry}.map`)) copyFileSync(`${entry}.map`, `${keep}.map`);
    // In place: imports resolve from the handler's own folder, as the function's do.
    const result = buildSync({
      entryPoints: [entry],
      absWorkingDir: dir,
      outfile: entry,
      allowOverwrite: true,
      bundle: true,
      platform: "node",
      format: "esm",
      target: `node${process.versions.node.split(".")[0]}`,
      external: KEPT_OUTSIDE,
      banner: { js: REQUIRE_SHIM },
      sourcemap: true,
      sourcesContent: false,
      legalComments: "eof",
      metafile: true,
      logLevel: "error",
    });
    done.push({
      function: name.replace(/\.func$/, ""),
      handler: vc.handler,
      inputs: Object.keys(result.metafile?.inputs ?? {}).length,
      bytes: Object.values(result.metafile?.outputs ?? {}).reduce((n, o) => n + o.bytes, 0),
    });
  }
  return done;
}
