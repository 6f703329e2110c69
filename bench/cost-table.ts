/**
 * BENCHMARKS section 9's table, rendered from the cost budget (test/db/cost-budget.json), so the
 * document says what `npm test` holds and cannot drift from it. `npx tsx bench/cost-table.ts`
 * rewrites the table between its markers in docs/BENCHMARKS.md; test/unit/cost-table.test.ts
 * fails when the two differ.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const BENCHMARKS_FILE = new URL("../docs/BENCHMARKS.md", import.meta.url);
const BUDGET_FILE = new URL("../test/db/cost-budget.json", import.meta.url);
export const BEGIN = "<!-- cost-table: bench/cost-table.ts writes this table -->";
export const END = "<!-- /cost-table -->";

interface Rows {
  insert: number;
  update: number;
  delete: number;
}
interface Flow {
  roundTrips: number;
  statements: number;
  rows: Record<string, Rows>;
  walBytes: number;
}

/** The tables' short names, in the order a job's life touches them. */
const SHORT: Record<string, string> = {
  "public.generation_jobs": "jobs",
  "public.job_events": "events",
  "public.quota_usage": "usage",
  "public.job_output_chunks": "chunks",
  "realtime.messages": "messages",
};

function rowsCell(rows: Record<string, Rows>): string {
  const order = Object.keys(SHORT);
  const names = Object.keys(rows).sort(
    (a, b) => (order.indexOf(a) + 1 || 99) - (order.indexOf(b) + 1 || 99) || a.localeCompare(b),
  );
  const parts: string[] = [];
  for (const name of names) {
    const r = rows[name];
    if (!r || r.insert + r.update + r.delete === 0) continue;
    const marks = [
      r.insert ? `+${r.insert}` : "",
      r.update ? `~${r.update}` : "",
      r.delete ? `−${r.delete}` : "",
    ].filter(Boolean);
    parts.push(`${SHORT[name] ?? name} ${marks.join(" ")}`);
  }
  return parts.join(", ");
}

const kB = (bytes: number) => `${Number((bytes / 1000).toPrecision(3))} kB`;

/** A markdown table laid out as biome formats one: every column padded to its widest cell. */
export function layout(header: string[], body: string[][]): string {
  const width = (s: string) => [...s].length;
  const widths = header.map((h, i) => Math.max(3, width(h), ...body.map((r) => width(r[i] ?? ""))));
  const line = (cells: string[]) =>
    `| ${cells.map((c, i) => c + " ".repeat((widths[i] ?? 0) - width(c))).join(" | ")} |`;
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...body.map(line)].join("\n");
}

export function renderCostTable(budget: { flows: Record<string, Flow> }): string {
  const body = Object.entries(budget.flows).map(([name, f]) => [
    name,
    String(f.roundTrips),
    String(f.statements),
    rowsCell(f.rows),
    kB(f.walBytes),
  ]);
  return layout(
    ["flow", "round trips", "statements", "rows (+ inserted, ~ updated, − deleted)", "WAL"],
    body,
  );
}

/** BENCHMARKS.md with its section 9 table rendered from the budget as it is now. */
export function withCurrentTable(doc: string): string {
  const budget = JSON.parse(readFileSync(BUDGET_FILE, "utf8"));
  const start = doc.indexOf(BEGIN);
  const end = doc.indexOf(END);
  if (start < 0 || end < start) throw new Error(`docs/BENCHMARKS.md has no ${BEGIN} … ${END}`);
  return `${doc.slice(0, start + BEGIN.length)}\n\n${renderCostTable(budget)}\n\n${doc.slice(end)}`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const doc = readFileSync(BENCHMARKS_FILE, "utf8");
  writeFileSync(BENCHMARKS_FILE, withCurrentTable(doc));
  console.log("docs/BENCHMARKS.md: section 9's table rewritten from test/db/cost-budget.json");
}
