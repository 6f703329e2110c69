/**
 * The cost budget (test/db/cost-budget.json) and the checker that holds measured flows to it:
 * what each flow may cost, and every way a measurement departs from that, as lines a reviewer
 * reads (measured vs budget).
 */
import { readFileSync, writeFileSync } from "node:fs";
import type { FlowCost, RowsWritten } from "./cost.ts";

export const BUDGET_FILE = new URL("../db/cost-budget.json", import.meta.url);

export interface FlowBudget {
  roundTrips: number;
  statements: number;
  rows: Record<string, RowsWritten>;
  /** The least WAL of the runs measured; a run may differ from it by the tolerance. */
  walBytes: number;
}

export interface Budget {
  about: string[];
  /** WAL allowed either side of a flow's `walBytes`: `percent` of it plus `bytes`. */
  walTolerance: { percent: number; bytes: number };
  /** record_progress's WAL at 4N writes over N writes, as a power of 4 ({@link growthExponent}). */
  progressGrowth: { exponent: number; slack: number };
  flows: Record<string, FlowBudget>;
}

/** What the budget holds of one flow: its least WAL over the runs, the counts of any run. */
export interface Measured {
  flows: Record<string, FlowBudget>;
  /** record_progress's WAL (least of the runs) in the N-write and the 4N-write flows. */
  progressWal?: [number, number];
  progressExponent: number;
}

export const readBudget = (): Budget => JSON.parse(readFileSync(BUDGET_FILE, "utf8"));

/** Rewrites the file from `measured`, keeping its notes and tolerances (update mode). */
export function writeBudget(old: Budget, measured: Measured): void {
  const next: Budget = {
    ...old,
    progressGrowth: { ...old.progressGrowth, exponent: round2(measured.progressExponent) },
    flows: measured.flows,
  };
  writeFileSync(BUDGET_FILE, `${JSON.stringify(next, null, 2)}\n`);
}

const round2 = (x: number) => Math.round(x * 100) / 100;

/**
 * How a cost grows with the number of writes: `log(at4N / atN) / log 4`. 1 when each write
 * costs the same (append-only), 2 when each costs in proportion to the answer so far.
 */
export const growthExponent = (atN: number, at4N: number): number =>
  Math.log(at4N / atN) / Math.log(4);

/** Runs of one flow: the counts must agree (else the flow is not measured alone), the least WAL. */
export function summarise(name: string, runs: FlowCost[]): FlowBudget {
  const [first, ...rest] = runs;
  if (!first) throw new Error(`${name}: no runs`);
  const counts = (r: FlowCost) => JSON.stringify([r.roundTrips, r.statements, r.rows]);
  for (const r of rest) {
    if (counts(r) !== counts(first)) {
      throw new Error(`${name}: runs disagree: ${counts(first)} then ${counts(r)}`);
    }
  }
  return {
    roundTrips: first.roundTrips,
    statements: first.statements,
    rows: first.rows,
    walBytes: Math.min(...runs.map((r) => r.walBytes)),
  };
}

/**
 * Every departure from the budget, one line each (empty: within budget). Round trips,
 * statements and rows are exact; WAL and its growth within their tolerance. Less is reported
 * too, so a saving is written down: a budget left loose would let the cost creep back.
 */
export function overBudget(measured: Measured, budget: Budget): string[] {
  const out: string[] = [];
  const exact = (flow: string, what: string, m: number, b: number) => {
    if (m !== b) {
      out.push(
        `${flow}: ${what} ${m}, budget ${b} (${m > b ? "over" : "under: update the budget to keep the saving"})`,
      );
    }
  };
  for (const [flow, m] of Object.entries(measured.flows)) {
    const b = budget.flows[flow];
    if (!b) {
      out.push(`${flow}: no budget (measured ${JSON.stringify(m)})`);
      continue;
    }
    exact(flow, "round trips", m.roundTrips, b.roundTrips);
    exact(flow, "statements", m.statements, b.statements);
    for (const table of new Set([...Object.keys(m.rows), ...Object.keys(b.rows)])) {
      for (const op of ["insert", "update", "delete"] as const) {
        exact(flow, `${table} ${op}s`, m.rows[table]?.[op] ?? 0, b.rows[table]?.[op] ?? 0);
      }
    }
    const [low, high] = walBand(b.walBytes, budget);
    if (m.walBytes > high) {
      out.push(
        `${flow}: WAL ${m.walBytes} B, budget ${b.walBytes} B (allowed up to ${high} B): over`,
      );
    } else if (m.walBytes < low) {
      out.push(
        `${flow}: WAL ${m.walBytes} B, budget ${b.walBytes} B (${low} B at least): under: update the budget to keep the saving`,
      );
    }
  }
  for (const flow of Object.keys(budget.flows)) {
    if (!(flow in measured.flows)) out.push(`${flow}: in the budget, not measured`);
  }
  const g = budget.progressGrowth;
  const e = measured.progressExponent;
  if (Number.isFinite(g.exponent) && !Number.isFinite(e)) {
    out.push("progress writes: growth not measured (no streamed flows at N and 4N writes)");
  } else if (e > g.exponent + g.slack) {
    out.push(
      `progress writes: WAL grows as N^${e.toFixed(2)}, budget N^${g.exponent} (allowed up to N^${(g.exponent + g.slack).toFixed(2)}): over`,
    );
  } else if (e < g.exponent - g.slack) {
    out.push(
      `progress writes: WAL grows as N^${e.toFixed(2)}, budget N^${g.exponent} (N^${(g.exponent - g.slack).toFixed(2)} at least): under: update the budget to keep the saving`,
    );
  }
  return out;
}

/** The WAL a flow with budget `walBytes` may write: the tolerance either side. */
export const walBand = (walBytes: number, budget: Budget): [number, number] => {
  const { percent, bytes } = budget.walTolerance;
  return [
    Math.floor(walBytes * (1 - percent / 100)) - bytes,
    Math.ceil(walBytes * (1 + percent / 100)) + bytes,
  ];
};

/** Measured vs budget, a line per flow, for the failure message and the update mode's log. */
export function table(measured: Measured, budget: Budget): string {
  const rows = (r: Record<string, RowsWritten>) =>
    Object.entries(r)
      .map(([t, w]) => `${t.replace(/^public\./, "")} ${w.insert}/${w.update}/${w.delete}`)
      .join(", ");
  const lines = Object.entries(measured.flows).map(([flow, m]) => {
    const b = budget.flows[flow];
    const vs = (x: number, y: number | undefined) => (x === y ? `${x}` : `${x} (budget ${y})`);
    return `  ${flow}: round trips ${vs(m.roundTrips, b?.roundTrips)}, statements ${vs(m.statements, b?.statements)}, WAL ${vs(m.walBytes, b?.walBytes)} B, rows i/u/d ${rows(m.rows)}${b && rows(b.rows) !== rows(m.rows) ? ` (budget ${rows(b.rows)})` : ""}`;
  });
  const [atN, at4N] = measured.progressWal ?? [];
  lines.push(
    `  progress writes' WAL: ${atN} B, then ${at4N} B at 4 × the writes, growth N^${measured.progressExponent.toFixed(2)} (budget N^${budget.progressGrowth.exponent})`,
  );
  return lines.join("\n");
}
