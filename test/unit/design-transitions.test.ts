/**
 * docs/DESIGN.md's table of SQL functions (#state-machine) against supabase/schema.sql, the
 * functions as the migrations define them today (held to the migrations by
 * test/db/schema-file.test.ts): every outcome a public function can return is in its row, and the
 * row names no outcome the function cannot return. The outcomes are read from the functions'
 * bodies (`'outcome', '<name>'`); a function that builds its outcome any other way fails the test,
 * so a new shape cannot slip past it.
 */
import { readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");

/** Each public function of the schema that returns an `outcome`: its outcomes, sorted. */
function sqlOutcomes(schema: string): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const part of schema.split(/\nCREATE OR REPLACE FUNCTION /).slice(1)) {
    const name = part.slice(0, part.indexOf("("));
    if (!name.startsWith("public.")) continue;
    const start = part.indexOf("$function$");
    const body = part.slice(start, part.indexOf("$function$", start + 1));
    const shapes = [...body.matchAll(/'outcome',\s*([^\s,)]+)/g)].map((m) => m[1] ?? "");
    const unreadable = shapes.filter((s) => !/^'[a-z_]+'$/.test(s));
    if (unreadable.length > 0)
      throw new Error(`${name} builds its outcome from ${unreadable.join(", ")}: not a literal`);
    if (shapes.length > 0)
      out[name.slice("public.".length)] = [...new Set(shapes.map((s) => s.slice(1, -1)))].sort();
  }
  return out;
}

/**
 * The table's outcomes per function. A row may name several functions (`get_job`, `list_jobs`,
 * ...); its outcomes then belong to them together. Parenthesised text is commentary (`started`
 * (with the plan's `max_output_tokens`)), not outcomes.
 */
function designOutcomes(design: string): Array<{ fns: string[]; outcomes: string[] }> {
  const section = design.slice(design.indexOf("## State machine"), design.indexOf("## Invariants"));
  const rows = section.split("\n").filter((l) => /^\|\s*`[a-z_]+`/.test(l));
  return rows.map((row) => {
    const cells = row.split("|").map((c) => c.trim());
    const names = (s: string) => [...s.matchAll(/`([a-z_]+)`/g)].map((m) => m[1] ?? "");
    let said = cells[3] ?? "";
    for (let before = ""; before !== said; ) {
      before = said;
      said = said.replace(/\([^()]*\)/g, "");
    }
    return { fns: names(cells[1] ?? ""), outcomes: [...new Set(names(said))].sort() };
  });
}

/** What the table misses and what it names in vain, per function (empty: they agree). */
function differences(schema: string, design: string): string[] {
  const sql = sqlOutcomes(schema);
  const rows = designOutcomes(design);
  const problems: string[] = [];
  for (const [fn, outcomes] of Object.entries(sql)) {
    const row = rows.find((r) => r.fns.includes(fn));
    if (!row) {
      problems.push(`${fn}: no row in DESIGN's table`);
      continue;
    }
    for (const o of outcomes)
      if (!row.outcomes.includes(o)) problems.push(`${fn}: DESIGN misses outcome ${o}`);
  }
  for (const row of rows) {
    const returnable = new Set(row.fns.flatMap((fn) => sql[fn] ?? []));
    for (const fn of row.fns)
      if (!sql[fn])
        problems.push(`${fn}: in DESIGN's table, but no such function returns an outcome`);
    for (const o of row.outcomes)
      if (!returnable.has(o))
        problems.push(`${row.fns.join(", ")}: DESIGN names ${o}, never returned`);
  }
  return problems;
}

const schema = read("supabase/schema.sql");
const design = read("docs/DESIGN.md");

describe("DESIGN's transitions table is the schema's", () => {
  test("every outcome each SQL function can return is in its row, and nothing else is", () => {
    expect(differences(schema, design)).toEqual([]);
  });

  test("the reading is not empty: the transitions and their outcomes are found on both sides", () => {
    const sql = sqlOutcomes(schema);
    expect(sql.start_job).toContain("budget_exhausted");
    expect(sql.release_job).toContain("budget_exhausted");
    expect(Object.keys(sql)).toEqual(
      expect.arrayContaining(["enqueue_job", "cancel_job", "fail_job", "sweep_jobs"]),
    );
    expect(designOutcomes(design).length).toBeGreaterThanOrEqual(Object.keys(sql).length - 2);
  });

  test("the check has teeth: a row missing an outcome, a stale outcome, and a new function are caught", () => {
    const dropped = design.replace(/(\| `start_job`[^\n]*?), `budget_exhausted`/, "$1");
    expect(dropped).not.toBe(design);
    expect(differences(schema, dropped)).toEqual([
      "start_job: DESIGN misses outcome budget_exhausted",
    ]);

    const stale = design.replace(
      "`released`, `budget_exhausted`",
      "`released`, `retried`, `budget_exhausted`",
    );
    expect(stale).not.toBe(design);
    expect(differences(schema, stale)).toEqual([
      "release_job: DESIGN names retried, never returned",
    ]);

    const added = `${schema}\nCREATE OR REPLACE FUNCTION public.pause_job(p uuid)\n RETURNS jsonb\nAS $function$\n  select jsonb_build_object('outcome', 'paused')\n$function$;\n`;
    expect(differences(added, design)).toEqual(["pause_job: no row in DESIGN's table"]);

    const computed = `${schema}\nCREATE OR REPLACE FUNCTION public.pause_job(p uuid)\n RETURNS jsonb\nAS $function$\n  select jsonb_build_object('outcome', v_outcome)\n$function$;\n`;
    expect(() => differences(computed, design)).toThrowError(/pause_job builds its outcome/);
  });
});
