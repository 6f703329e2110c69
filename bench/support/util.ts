/**
 * Small helpers every bench section shares: order statistics, a plain-text table, the results
 * folder, and the command-line flags of `npm run bench`.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("../..", import.meta.url));
export const resultsDir = join(root, "bench", "results");

export interface Flags {
  quick: boolean;
  only: Set<string> | null;
  /** Record the figures in bench/figures.json and docs/BENCHMARKS.md (bench/figures.ts). */
  docs: boolean;
}

export const SECTIONS = [
  "roundtrips",
  "sql",
  "peers",
  "hotpath",
  "http",
  "cold",
  "growth",
  "first",
  "capacity",
] as const;
export type Section = (typeof SECTIONS)[number];

/** `--quick`, `--only=sql,cold` (or `--sql --cold`). */
export function parseFlags(argv: string[]): Flags {
  let quick = false;
  let docs = false;
  const only = new Set<string>();
  for (const arg of argv) {
    if (arg === "--quick") quick = true;
    else if (arg === "--docs") docs = true;
    else if (arg.startsWith("--only=")) for (const s of arg.slice(7).split(",")) only.add(s);
    else if (arg.startsWith("--") && (SECTIONS as readonly string[]).includes(arg.slice(2)))
      only.add(arg.slice(2));
    else if (arg === "--help" || arg === "-h") {
      console.log(
        `npm run bench [-- --quick] [--docs] [--only=${SECTIONS.join(",")}] (or --<section> ...)`,
      );
      process.exit(0);
    } else throw new Error(`unknown flag ${arg}`);
  }
  for (const s of only)
    if (!(SECTIONS as readonly string[]).includes(s)) throw new Error(`unknown section ${s}`);
  return { quick, docs, only: only.size > 0 ? only : null };
}

export function median(xs: number[]): number {
  return quantile(xs, 0.5);
}

/** Nearest-rank quantile (q in [0, 1]); NaN for an empty list. */
export function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  const i = Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1));
  return s[i] as number;
}

export const round = (x: number, digits = 2): number => {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
};

/** A fixed-width text table (also valid Markdown). */
export function table(headers: string[], rows: (string | number | boolean | null)[][]): string {
  const cells = rows.map((r) => r.map((c) => (c === null ? "—" : String(c))));
  const widths = headers.map((h, i) =>
    Math.max(h.length, ...cells.map((r) => (r[i] ?? "").length)),
  );
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(widths[i] ?? 0)).join(" | ")} |`;
  return [
    line(headers),
    `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`,
    ...cells.map(line),
  ].join("\n");
}

export async function writeResult(name: string, data: unknown): Promise<string> {
  await mkdir(resultsDir, { recursive: true });
  const file = join(resultsDir, `${name}.json`);
  await writeFile(file, `${JSON.stringify(data, null, 2)}\n`);
  return file;
}

export function machine() {
  return {
    nproc: cpus().length,
    cpu: cpus()[0]?.model ?? "unknown",
    memoryGiB: round(totalmem() / 2 ** 30, 1),
    node: process.version,
    platform: `${process.platform} ${process.arch}`,
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `work(i)` for i in [0, count) on `concurrency` loops; returns the wall time in ms. */
export async function pool(
  concurrency: number,
  count: number,
  work: (i: number, worker: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, w) => {
      for (;;) {
        const i = next++;
        if (i >= count) return;
        await work(i, w);
      }
    }),
  );
  return performance.now() - started;
}

export function log(line: string): void {
  process.stderr.write(`${line}\n`);
}
