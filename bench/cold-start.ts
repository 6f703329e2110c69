/**
 * Section 4: cold start. Each api/ function bundled as Vercel would (esbuild: bundle, platform
 * node, format esm, target node22), its size, what it pulls in (the enqueue and status functions
 * must not contain the OpenAI SDK), and the time to import it in a fresh Node process: the
 * median of N runs of `performance.now()` around `import()`, beside the whole process wall time
 * and the same for an empty module (Node's own start, the baseline).
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, readdir, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";
import { log, median, root, round, table, writeResult } from "./support/util.ts";

const MUST_NOT_HAVE_OPENAI = new Set(["api/jobs/index.ts", "api/jobs/[id].ts"]);
const TARGET_MS = 150;

async function functions(dir = join(root, "api")): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...(await functions(p)));
    else if (e.name.endsWith(".ts")) out.push(relative(root, p));
  }
  return out.sort();
}

function importOnce(file: string): { importMs: number; wallMs: number } {
  const script = `const t = performance.now(); await import(${JSON.stringify(pathToFileURL(file).href)}); process.stdout.write(String(performance.now() - t));`;
  const started = performance.now();
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "" },
  });
  const wallMs = performance.now() - started;
  if (r.status !== 0) throw new Error(`import of ${file} failed: ${r.stderr.slice(0, 500)}`);
  return { importMs: Number(r.stdout), wallMs };
}

export async function runColdStart(opts: { quick: boolean }) {
  const runs = opts.quick ? 5 : 10;
  const out = await mkdtemp(join(tmpdir(), "quota-jobs-bench-bundles-"));
  try {
    const empty = join(out, "empty.mjs");
    await writeFile(empty, "export default {};\n");
    const baseline = Array.from({ length: runs }, () => importOnce(empty));
    const rows = [];
    for (const fn of await functions()) {
      const outfile = join(out, `${fn.replaceAll("/", "__").replace(/\.ts$/, "")}.mjs`);
      const result = await build({
        entryPoints: [join(root, fn)],
        bundle: true,
        platform: "node",
        format: "esm",
        target: "node22",
        outfile,
        metafile: true,
        logLevel: "silent",
        // Some dependencies are CommonJS and `require` node builtins; ESM output needs this.
        banner: {
          js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
        },
      });
      const inputs = Object.keys(result.metafile.inputs);
      const packages = [
        ...new Set(
          inputs
            .map((p) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(p)?.[1])
            .filter((p): p is string => Boolean(p)),
        ),
      ].sort();
      const hasOpenAI = packages.includes("openai");
      const samples = Array.from({ length: runs }, () => importOnce(outfile));
      const importMs = median(samples.map((s) => s.importMs));
      const row = {
        function: fn,
        bytes: (await stat(outfile)).size,
        packages,
        hasOpenAI,
        openaiAllowed: !MUST_NOT_HAVE_OPENAI.has(fn),
        importMsMedian: round(importMs, 1),
        importMsRuns: samples.map((s) => round(s.importMs, 1)),
        processWallMsMedian: round(median(samples.map((s) => s.wallMs)), 1),
        met: importMs < TARGET_MS && (!hasOpenAI || !MUST_NOT_HAVE_OPENAI.has(fn)),
      };
      rows.push(row);
      log(`  cold ${fn}: ${row.bytes} B, import ${row.importMsMedian} ms, openai ${hasOpenAI}`);
    }
    const result = {
      runs,
      targetMs: TARGET_MS,
      node: process.version,
      baseline: {
        importMsMedian: round(median(baseline.map((s) => s.importMs)), 1),
        processWallMsMedian: round(median(baseline.map((s) => s.wallMs)), 1),
      },
      rows,
    };
    await writeResult("cold-start", result);
    return result;
  } finally {
    await rm(out, { recursive: true, force: true });
  }
}

export function printColdStart(r: Awaited<ReturnType<typeof runColdStart>>): string {
  return `${table(
    [
      "function",
      "bundle KiB",
      "import ms (median)",
      "process ms",
      "OpenAI SDK inside",
      "target",
      "met",
    ],
    r.rows.map((x) => [
      x.function,
      round(x.bytes / 1024, 1),
      x.importMsMedian,
      x.processWallMsMedian,
      x.hasOpenAI ? (x.openaiAllowed ? "yes (worker)" : "YES (must not)") : "no",
      `< ${r.targetMs} ms${x.openaiAllowed ? "" : ", no OpenAI"}`,
      x.met ? "yes" : "NO",
    ]),
  )}\n\nempty module in a fresh process (Node's own start): import ${r.baseline.importMsMedian} ms, process ${r.baseline.processWallMsMedian} ms`;
}
