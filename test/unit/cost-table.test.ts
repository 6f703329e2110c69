/**
 * BENCHMARKS section 9's table is the cost budget `npm test` holds (bench/cost-table.ts renders
 * it): a budget updated on purpose shows in the document, and a figure typed by hand fails here.
 */
import { readFileSync } from "node:fs";
import { expect, test } from "vitest";
import { BENCHMARKS_FILE, renderCostTable, withCurrentTable } from "../../bench/cost-table.ts";

test("section 9's table is what `npx tsx bench/cost-table.ts` renders from the budget", () => {
  const doc = readFileSync(BENCHMARKS_FILE, "utf8");
  expect(doc, "run `npx tsx bench/cost-table.ts`").toBe(withCurrentTable(doc));
});

test("a flow's cells: rows by table in a life's order, WAL in kB to 3 figures", () => {
  const table = renderCostTable({
    flows: {
      "a flow": {
        roundTrips: 2,
        statements: 9,
        rows: {
          "realtime.messages": { insert: 1, update: 0, delete: 0 },
          "public.generation_jobs": { insert: 1, update: 2, delete: 0 },
          "public.quota_usage": { insert: 0, update: 0, delete: 0 },
          "public.job_output_chunks": { insert: 4, update: 0, delete: 4 },
        },
        walBytes: 18_416,
      },
    },
  });
  expect(table.split("\n")[2]).toBe(
    "| a flow | 2           | 9          | jobs +1 ~2, chunks +4 −4, messages +1   | 18.4 kB |",
  );
});
