/**
 * BENCHMARKS' "Today's figures" is bench/figures.json rendered (bench/figures.ts), and its cost
 * row is the budget `npm test` holds: a figure typed into the document by hand fails here, and a
 * recorded run replaces exactly the rows of the sections it ran, stamped.
 */
import { readFileSync } from "node:fs";
import { expect, test } from "vitest";
import { BENCHMARKS_FILE } from "../../bench/cost-table.ts";
import {
  type Figure,
  readFigures,
  renderFigures,
  SUMMARIES,
  stampText,
  withCurrentFigures,
} from "../../bench/figures.ts";

test("the table is what `npx tsx bench/figures.ts` renders from bench/figures.json", () => {
  const doc = readFileSync(BENCHMARKS_FILE, "utf8");
  expect(doc, "run `npx tsx bench/figures.ts`").toBe(withCurrentFigures(doc));
});

test("every row says when it was measured, and links its section", () => {
  for (const f of readFigures()) {
    expect(f.measured, f.what).toMatch(/\d{4}-\d{2}-\d{2}|npm test/);
    expect(f.section, f.what).toMatch(/^\[[\w, ]+\]\(#[^)]+\)/);
  }
});

test("the peers row: ratios per level and path, drift, from the section's results", () => {
  const row = (path: string, connections: number, k: number) => ({
    path,
    connections,
    ours: Math.round(100 * k),
    oursOverPgBoss: k,
    oursOverGraphile: k / 2,
  });
  const text = SUMMARIES.peers?.({
    rows: [
      row("success", 1, 1.1),
      row("success", 8, 1.5),
      row("failure", 1, 2),
      row("failure", 8, 3),
    ],
    drift: 0,
  });
  expect(text).toBe(
    "success 110 / 150 jobs/s at C = 1 / 8; ours / pg-boss 1.1 / 1.5, failure path 2 / 3; " +
      "ours / graphile-worker 0.55 / 0.75, failure path 1 / 1.5; drift rows 0",
  );
});

test("the cost row follows the budget, and a stamp names the date, commit and load", () => {
  const figures: Figure[] = [
    { what: "cost", today: "typed by hand", measured: "x", section: "[9](#9)", source: "cost" },
  ];
  const table = renderFigures(figures, {
    flows: {
      enqueue: { statements: 15, walBytes: 2264 },
      success: { statements: 25, walBytes: 6696 },
    },
  });
  expect(table).toContain(
    "enqueue 15 statements, 2.26 kB WAL; a job's success 25 statements, 6.7 kB WAL",
  );
  expect(table).not.toContain("typed by hand");
  expect(
    stampText({
      at: "2026-12-07T03:04:05.000Z",
      commit: "abc1234",
      loadBefore: 0.4,
      loadAfter: 1.9,
    }),
  ).toBe("2026-12-07 03:04 UTC, `abc1234`, load 0.4–1.9");
});

test("the round trips and SQL rows: what met, what missed, each flow's calls", () => {
  const trips = SUMMARIES.roundtrips?.({
    rows: [
      { flow: "enqueue", ours: { db: 1, publish: 1, model: 0, redis: 0 }, met: true },
      { flow: "cancel", ours: { db: 2, publish: 0, model: 0, redis: 0 }, met: false },
      { flow: "page", ours: { db: 0, publish: 0, model: 0, redis: 0 }, met: null },
    ],
  });
  expect(trips).toBe(
    "target met in 1 of 2 flows (missed: cancel): enqueue 1 db + 1 publish; cancel 2 db; page none",
  );
  const cell = (op: string, connections: number, ratio: number) => ({
    op,
    connections,
    ratio,
    target: 0.5,
    met: ratio >= 0.5,
  });
  const sql = SUMMARIES.sql?.({
    rows: [cell("enqueue", 1, 0.4), cell("enqueue", 8, 0.6), cell("start", 1, 0.7)],
    drift: 0,
  });
  expect(sql).toBe(
    "ours / the floor: enqueue 0.4–0.6 (target 0.5), start 0.7 (target 0.5); 2 of 3 cells met; drift rows 0",
  );
});
