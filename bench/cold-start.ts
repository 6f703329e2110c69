/**
 * Section 4: cold start of what Vercel deploys. `npm run build` (Vercel's own builder, offline)
 * writes each function to `.vercel/output/functions/api/**.func/`, with `.vc-config.json`
 * naming its entry file (`handler`) and the traced `node_modules` beside it. For each function
 * this section records the folder's size, which packages its import graph loads (the enqueue and
 * status functions must not load the OpenAI SDK), and the time to import the handler in a fresh
 * Node 24 process started in the function's folder: the median of N runs of `performance.now()`
 * around `import()`, beside the whole process wall time and the same for an empty module (Node's
 * own start, the baseline). The build runs first when `.vercel/output` is missing or older than
 * the sources.
 */
import { spawnSync } from "node:child_process";
import { readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { pathToFileURL } from "node:url";
import { buildArtifact } from "../dev/build.ts";
import { log, median, root, round, table, writeResult } from "./support/util.ts";

const MUST_NOT_HAVE_OPENAI = new Set(["api/jobs/index", "api/jobs/[id]"]);
const TARGET_MS = 100;
/** The target for the enqueue function; the others are reported against the same figure. */
const TARGETED = "api/jobs/index";
const OUTPUT = join(root, ".vercel", "output");

async function newest(dir: string): Promise<number> {
  let t = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? await newest(p) : (await stat(p)).mtimeMs);
  }
  return t;
}

/** Builds `.vercel/output` unless it is newer than api/, lib/, package.json and vercel.json. */
async function ensureBuilt(): Promise<{ built: boolean; at: string }> {
  const config = join(OUTPUT, "config.json");
  const builtAt = await stat(config).then(
    (s) => s.mtimeMs,
    () => 0,
  );
  const sources = Math.max(
    await newest(join(root, "api")),
    await newest(join(root, "lib")),
    (await stat(join(root, "package.json"))).mtimeMs,
    (await stat(join(root, "vercel.json"))).mtimeMs,
  );
  if (builtAt > sources) return { built: false, at: new Date(builtAt).toISOString() };
  log("  cold: .vercel/output is missing or stale; running npm run build");
  buildArtifact();
  return { built: true, at: new Date().toISOString() };
}

async function functionDirs(dir = join(OUTPUT, "functions")): Promise<string[]> {
  const out: string[] = [];
  for (const e of await readdir(dir, { withFileTypes: true })) {
    if (!e.isDirectory()) continue;
    const p = join(dir, e.name);
    if (e.name.endsWith(".func")) out.push(p);
    else out.push(...(await functionDirs(p)));
  }
  return out.sort();
}

async function folderBytes(dir: string): Promise<number> {
  let n = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    n += e.isDirectory() ? await folderBytes(p) : (await stat(p)).size;
  }
  return n;
}

function node(cwd: string, script: string): { stdout: string; wallMs: number } {
  const started = performance.now();
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
    cwd,
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "" },
  });
  const wallMs = performance.now() - started;
  if (r.status !== 0) throw new Error(`node in ${cwd} failed: ${r.stderr.slice(0, 500)}`);
  return { stdout: r.stdout, wallMs };
}

/** One fresh process: the time to import the handler, which must default-export `fetch`. */
function importOnce(dir: string, handler: string): { importMs: number; wallMs: number } {
  const url = pathToFileURL(join(dir, handler)).href;
  const script = `const t = performance.now(); const m = await import(${JSON.stringify(url)}); const ms = performance.now() - t; if (typeof m.default?.fetch !== "function") throw new Error("no default fetch"); process.stdout.write(String(ms));`;
  const r = node(dir, script);
  return { importMs: Number(r.stdout), wallMs: r.wallMs };
}

/** Every file the handler's import graph resolves (ESM and CommonJS), from a separate, untimed process. */
function importGraph(dir: string, handler: string): string[] {
  const url = pathToFileURL(join(dir, handler)).href;
  const script = `import { registerHooks } from "node:module"; const seen = new Set();
    registerHooks({ resolve(s, c, next) { const r = next(s, c); seen.add(r.url); return r; } });
    await import(${JSON.stringify(url)});
    process.stdout.write(JSON.stringify([...seen]));`;
  return JSON.parse(node(dir, script).stdout) as string[];
}

const packageOf = (url: string) => /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url)?.[1];

/**
 * What each package the handler loads costs on its own: the entry points the handler's graph
 * resolved into it, imported alone in a fresh process in the function's folder (median of `runs`).
 */
function packageCosts(dir: string, graph: string[], runs: number) {
  const entries = new Map<string, string[]>();
  for (const url of graph) {
    const pkg = packageOf(url);
    if (!pkg) continue;
    const list = entries.get(pkg) ?? [];
    list.push(url);
    entries.set(pkg, list);
  }
  const out: { package: string; files: number; importMsMedian: number }[] = [];
  for (const [pkg, urls] of entries) {
    const script = `const t = performance.now(); for (const u of ${JSON.stringify(urls)}) { try { await import(u); } catch {} } process.stdout.write(String(performance.now() - t));`;
    const ms = Array.from({ length: runs }, () => Number(node(dir, script).stdout));
    out.push({ package: pkg, files: urls.length, importMsMedian: round(median(ms), 1) });
  }
  return out.sort((a, b) => b.importMsMedian - a.importMsMedian);
}

export async function runColdStart(opts: { quick: boolean }) {
  const runs = opts.quick ? 5 : 10;
  const build = await ensureBuilt();
  const emptyDir = join(OUTPUT, "functions");
  const empty = join(emptyDir, "empty-baseline.mjs");
  await writeFile(empty, "export default { fetch() {} };\n");
  try {
    const baseline = Array.from({ length: runs }, () => importOnce(emptyDir, "empty-baseline.mjs"));
    const rows = [];
    for (const dir of await functionDirs()) {
      const name = relative(join(OUTPUT, "functions"), dir).replace(/\.func$/, "");
      const vc = JSON.parse(await readFile(join(dir, ".vc-config.json"), "utf8")) as {
        handler: string;
        runtime: string;
      };
      const graph = importGraph(dir, vc.handler);
      const packages = [
        ...new Set(graph.map(packageOf).filter((p): p is string => Boolean(p))),
      ].sort();
      const shipped = await readdir(join(dir, "node_modules")).catch(() => [] as string[]);
      const openaiShipped = shipped.includes("openai");
      const hasOpenAI = packages.includes("openai");
      const samples = Array.from({ length: runs }, () => importOnce(dir, vc.handler));
      const importMs = median(samples.map((s) => s.importMs));
      const mustNot = MUST_NOT_HAVE_OPENAI.has(name);
      const breakdown = name === TARGETED ? packageCosts(dir, graph, runs) : null;
      const row = {
        function: name,
        handler: vc.handler,
        runtime: vc.runtime,
        bytes: await folderBytes(dir),
        filesLoaded: graph.filter((u) => u.startsWith("file:")).length,
        packages,
        hasOpenAI,
        openaiShipped,
        openaiAllowed: !mustNot,
        importMsMedian: round(importMs, 1),
        importMsRuns: samples.map((s) => round(s.importMs, 1)),
        processWallMsMedian: round(median(samples.map((s) => s.wallMs)), 1),
        targeted: name === TARGETED,
        breakdown,
        met:
          name === TARGETED
            ? importMs < TARGET_MS && !hasOpenAI && !openaiShipped
            : mustNot
              ? !hasOpenAI && !openaiShipped
              : null,
      };
      rows.push(row);
      log(
        `  cold ${name}: ${row.bytes} B, ${row.filesLoaded} files, import ${row.importMsMedian} ms, openai ${hasOpenAI}`,
      );
    }
    const result = {
      runs,
      targetMs: TARGET_MS,
      node: process.version,
      build,
      baseline: {
        importMsMedian: round(median(baseline.map((s) => s.importMs)), 1),
        processWallMsMedian: round(median(baseline.map((s) => s.wallMs)), 1),
      },
      rows,
    };
    await writeResult("cold-start", result);
    return result;
  } finally {
    await rm(empty, { force: true });
  }
}

export function printColdStart(r: Awaited<ReturnType<typeof runColdStart>>): string {
  return `${table(
    [
      "function (.vercel/output)",
      "folder KiB",
      "files loaded",
      "import ms (median)",
      "process ms",
      "OpenAI SDK",
      "target",
      "met",
    ],
    r.rows.map((x) => [
      x.function,
      round(x.bytes / 1024, 1),
      x.filesLoaded,
      x.importMsMedian,
      x.processWallMsMedian,
      x.hasOpenAI || x.openaiShipped ? (x.openaiAllowed ? "yes (worker)" : "YES (must not)") : "no",
      x.targeted ? `< ${r.targetMs} ms, no OpenAI` : x.openaiAllowed ? "—" : "no OpenAI",
      x.met === null ? "—" : x.met ? "yes" : "NO",
    ]),
  )}\n\n${r.rows
    .filter((x) => x.breakdown)
    .map(
      (x) =>
        `${x.function}, each package alone (files, import ms median): ${(x.breakdown ?? [])
          .map((b) => `${b.package} ${b.files} files ${b.importMsMedian} ms`)
          .join("; ")}`,
    )
    .join(
      "\n",
    )}\n\nempty module in a fresh process (Node's own start): import ${r.baseline.importMsMedian} ms, process ${r.baseline.processWallMsMedian} ms; Node ${r.node}; ${r.runs} runs each; build ${r.build.built ? "made now" : `from ${r.build.at}`}`;
}
