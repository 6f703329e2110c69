/**
 * docs/CAPACITY.md's model cost per plan is the price book's: this computes the table from the
 * database (the seeded plans, the deployment's default model for plans naming none) and fails
 * when the document says something else.
 */
import { readFileSync } from "node:fs";
import { expect, test } from "vitest";
import { VARIABLES } from "../../lib/config.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture({ fresh: true });
const INPUT = 100;
const OUTPUT = 800;

const dollars = (microsPerMillion: number) => String(microsPerMillion / 1_000_000);

test("CAPACITY's cost per 1,000 jobs per plan is computed from the price book", async () => {
  const defaultModel = VARIABLES.OPENAI_MODEL.schema.parse(undefined) as string;
  const { rows } = await db.admin.query(
    `select p.id, coalesce(p.model, $1) as model, p.service_tier as tier,
       t.input_per_mtok::bigint as input, t.output_per_mtok::bigint as output
     from public.plans p
     join public.model_tiers t on t.model_id = coalesce(p.model, $1) and t.tier = p.service_tier
     where p.id in ('free', 'pro', 'team', 'economy') order by p.id`,
    [defaultModel],
  );
  expect(rows).toHaveLength(4);
  const lines = rows.map((r) => {
    const perJob = (INPUT * Number(r.input) + OUTPUT * Number(r.output)) / 1e12;
    const per1000 = `$${Number((perJob * 1000).toFixed(6))}`;
    return `| ${r.id} | \`${r.model}\` | ${r.tier} | ${dollars(Number(r.input))} | ${dollars(Number(r.output))} | ${per1000} |`;
  });
  const doc = readFileSync(new URL("../../docs/CAPACITY.md", import.meta.url), "utf8");
  const table =
    doc.split("<!-- price-book:start -->")[1]?.split("<!-- price-book:end -->")[0] ?? "";
  const cells = (line: string) =>
    line
      .split("|")
      .map((c) => c.trim())
      .filter(Boolean)
      .join(" | ");
  const documented = table.trim().split("\n").slice(2).map(cells);
  expect(documented).toEqual(lines.map(cells));
});
