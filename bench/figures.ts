/**
 * BENCHMARKS' "Today's figures": one row per measurement, each with when, on which commit and
 * under what load it was measured, kept in bench/figures.json and rendered between markers in
 * docs/BENCHMARKS.md.
 *
 * - `npm run bench -- --docs [--only=…]` runs the sections, then replaces the row of each section
 *   it ran (the section's own summary of its results, stamped with the date, the commit and the
 *   load average before and after) and rewrites the block. A row it did not re-measure keeps its
 *   figures and its date, so an old figure always says how old it is.
 * - The cost row is the budget `npm test` holds (test/db/cost-budget.json), never typed by hand.
 * - `npx tsx bench/figures.ts` re-renders the block from the file alone;
 *   test/unit/bench-figures.test.ts fails when the document and the file differ.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { BENCHMARKS_FILE, layout } from "./cost-table.ts";
import { round } from "./support/util.ts";

export const FIGURES_FILE = new URL("./figures.json", import.meta.url);
const BUDGET_FILE = new URL("../test/db/cost-budget.json", import.meta.url);
export const BEGIN = "<!-- figures: bench/figures.ts writes this table -->";
export const END = "<!-- /figures -->";

export interface Figure {
  /** What is measured (the row's first cell). */
  what: string;
  /** The figures, in a sentence. */
  today: string;
  /** When, on which commit, under what load. */
  measured: string;
  /** A link to the section that says how. */
  section: string;
  /** The bench section whose results make this row (`--docs` replaces it); null: by hand. */
  source: string | null;
}

/** When, where and under what load a run measured: the date to the minute, UTC. */
export interface Stamp {
  at: string;
  commit: string;
  loadBefore: number;
  loadAfter: number;
}

export function commit(): string {
  try {
    const sha = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no"], {
      encoding: "utf8",
    }).trim();
    return dirty ? `${sha} + changes` : sha;
  } catch {
    return "unknown";
  }
}

export const load = () => round(loadavg()[0] ?? 0, 1);

export function stampText(s: Stamp): string {
  return `${s.at.slice(0, 16).replace("T", " ")} UTC, \`${s.commit}\`, load ${s.loadBefore}–${s.loadAfter}`;
}

type Peers = {
  rows: {
    path: string;
    connections: number;
    ours: number;
    oursOverPgBoss: number;
    oursOverGraphile: number;
    oursWithoutBroadcastOverPgBoss?: number;
    oursWithoutBroadcastOverGraphile?: number;
  }[];
  drift: number;
};
type Roundtrips = {
  rows: {
    flow: string;
    ours: { db: number; publish: number; model: number; realtime?: number; redis: number };
    met: boolean | null;
  }[];
};
type Sql = {
  rows: { op: string; connections: number; ratio: number; target: number; met: boolean }[];
  drift: number;
};
type Cold = {
  rows: { function: string; importMsMedian: number; targeted: boolean; met: boolean | null }[];
  baseline: { importMsMedian: number };
};
type Median = { median: number };
type First = {
  generate: { generateToTextInDbMs: Median; adaptive: { visibleMs: Median } };
  target: {
    function: string;
    met: boolean;
    importBeyondStartMs: number;
  };
  rows: { function: string; ratio: number }[];
};
type HotPath = {
  profile: Record<string, { perSecond: number; functions: Record<string, number> }>;
  suspects?: { name: string; cpu?: number }[];
};

const slash = (xs: number[]) => xs.join(" / ");

/** "a–b", or "a" when both ends are the same. */
const span = (xs: number[]) => {
  const lo = Math.min(...xs);
  const hi = Math.max(...xs);
  return lo === hi ? `${lo}` : `${lo}–${hi}`;
};

/** A section's results in a sentence: the sections that have a row of their own. */
export const SUMMARIES: Record<string, (result: unknown) => string> = {
  roundtrips: (r) => {
    const { rows } = r as Roundtrips;
    const targeted = rows.filter((x) => x.met !== null);
    const missed = targeted.filter((x) => !x.met).map((x) => x.flow);
    const calls = (x: Roundtrips["rows"][number]) =>
      (["db", "publish", "model", "realtime", "redis"] as const)
        .filter((k) => (x.ours[k] ?? 0) > 0)
        .map((k) => `${x.ours[k]} ${k}`)
        .join(" + ") || "none";
    return `target met in ${targeted.length - missed.length} of ${targeted.length} flows${missed.length ? ` (missed: ${missed.join(", ")})` : ""}: ${rows.map((x) => `${x.flow} ${calls(x)}`).join("; ")}`;
  },
  sql: (r) => {
    const { rows, drift } = r as Sql;
    const ops = [...new Set(rows.map((x) => x.op))];
    const met = rows.filter((x) => x.met).length;
    return `ours / the floor: ${ops
      .map((op) => {
        const of = rows.filter((x) => x.op === op);
        return `${op} ${span(of.map((x) => x.ratio))} (target ${of[0]?.target})`;
      })
      .join(", ")}; ${met} of ${rows.length} cells met; drift rows ${drift}`;
  },
  first: (r) => {
    const { generate, target, rows } = r as First;
    const ratio = rows.find((x) => x.function === target.function)?.ratio;
    return `Generate → first visible token ${generate.adaptive.visibleMs.median} ms, ${generate.generateToTextInDbMs.median} ms of it to the first text in the database (fake model); ${target.function}'s first request ${ratio} × (empty start + warm request), import ${target.importBeyondStartMs} ms beyond Node's start (target met: ${target.met ? "yes" : "no"})`;
  },
  cold: (r) => {
    const { rows, baseline } = r as Cold;
    return `${rows
      .filter((x) => x.targeted)
      .map(
        (x) => `${x.function}: import ${x.importMsMedian} ms (target met: ${x.met ? "yes" : "no"})`,
      )
      .join("; ")}; an empty module ${baseline.importMsMedian} ms`;
  },
  peers: (r) => {
    const { rows, drift } = r as Peers;
    const on = (path: string) => rows.filter((x) => x.path === path);
    const s = on("success");
    const f = on("failure");
    return (
      `success ${slash(s.map((x) => x.ours))} jobs/s at C = ${slash(s.map((x) => x.connections))}; ` +
      `ours / pg-boss ${slash(s.map((x) => x.oursOverPgBoss))}, failure path ${slash(f.map((x) => x.oursOverPgBoss))}; ` +
      `ours / graphile-worker ${slash(s.map((x) => x.oursOverGraphile))}, failure path ${slash(f.map((x) => x.oursOverGraphile))}; ` +
      (s.some((x) => x.oursWithoutBroadcastOverPgBoss !== undefined)
        ? `success without the broadcast to the page (not a target: a guarantee gone) ${slash(s.map((x) => x.oursWithoutBroadcastOverPgBoss ?? Number.NaN))} × pg-boss, ${slash(s.map((x) => x.oursWithoutBroadcastOverGraphile ?? Number.NaN))} × graphile-worker; `
        : "") +
      `drift rows ${drift}`
    );
  },
  hotpath: (r) => {
    const { profile } = r as HotPath;
    const p = profile.success;
    if (!p) return "no success profile";
    const f = (name: string) => Math.round(p.functions[name] ?? 0);
    const life = Math.round(1e6 / p.perSecond);
    const inside = f("enqueue_job") + f("start_job") + f("complete_job");
    const suspects = (r as HotPath).suspects?.filter((x) => x.cpu !== undefined) ?? [];
    const costs = suspects.length
      ? `; backend CPU a life without each suspect: ${suspects.map((x) => `${x.name} ${x.cpu}`).join(", ")}`
      : "";
    return `${life} µs a life on one connection: enqueue ${f("enqueue_job")}, claim ${f("start_job")}, completion ${f("complete_job")}, outside the functions ${life - inside}${costs}`;
  },
};

/** The cost row's sentence, from the budget `npm test` holds. */
export function costSummary(budget: {
  flows: Record<string, { statements: number; walBytes: number }>;
}): string {
  const flow = (name: string) => {
    const f = budget.flows[name];
    return f ? `${f.statements} statements, ${round(f.walBytes / 1000, 2)} kB WAL` : "not measured";
  };
  return `enqueue ${flow("enqueue")}; a job's success ${flow("success")} (held by \`npm test\`)`;
}

export function renderFigures(figures: Figure[], budget: Parameters<typeof costSummary>[0]) {
  const rows = figures.map((f) => [
    f.what,
    f.source === "cost" ? costSummary(budget) : f.today,
    f.measured,
    f.section,
  ]);
  return layout(["what", "today", "measured", "section"], rows);
}

export function withCurrentFigures(doc: string, figures: Figure[] = readFigures()): string {
  const budget = JSON.parse(readFileSync(BUDGET_FILE, "utf8"));
  const start = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  if (start < 0 || end < start) throw new Error(`docs/BENCHMARKS.md has no ${BEGIN} … ${END}`);
  return `${doc.slice(0, start + BEGIN.length)}\n\n${renderFigures(figures, budget)}\n\n${doc.slice(end)}`;
}

export function readFigures(): Figure[] {
  return JSON.parse(readFileSync(FIGURES_FILE, "utf8")).figures as Figure[];
}

/**
 * Replaces the rows of the sections just measured and rewrites the document. Returns the
 * sections that ran but have no row of their own (their figures are in their section only).
 */
export function recordRun(results: Record<string, unknown>, stamp: Stamp): string[] {
  const figures = readFigures();
  const unsummarized: string[] = [];
  for (const [section, result] of Object.entries(results)) {
    const summarize = SUMMARIES[section];
    const row = figures.find((f) => f.source === section);
    if (!summarize || !row) {
      unsummarized.push(section);
      continue;
    }
    row.today = summarize(result);
    row.measured = stampText(stamp);
  }
  writeFileSync(FIGURES_FILE, `${JSON.stringify({ figures }, null, 2)}\n`);
  writeFileSync(
    BENCHMARKS_FILE,
    withCurrentFigures(readFileSync(BENCHMARKS_FILE, "utf8"), figures),
  );
  return unsummarized;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(BENCHMARKS_FILE, withCurrentFigures(readFileSync(BENCHMARKS_FILE, "utf8")));
  console.log("docs/BENCHMARKS.md: today's figures rewritten from bench/figures.json");
}
