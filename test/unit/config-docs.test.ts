import { readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import {
  configTableRows,
  renderConfigTable,
  renderEnvExample,
  tableRowsIn,
} from "../../dev/config-docs.ts";
import { fieldOf, isRequired, loadConfig, VARIABLES, type VariableName } from "../../lib/config.ts";

const names = Object.keys(VARIABLES) as VariableName[];
const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");

describe("one declaration per variable (lib/config.ts VARIABLES)", () => {
  test(".env.example is what VARIABLES says (npm run config:docs rewrites it)", () => {
    expect(read(".env.example")).toBe(renderEnvExample());
  });

  test("docs/DESIGN.md's configuration table is what VARIABLES says, row by row", () => {
    expect(tableRowsIn(read("docs/DESIGN.md"))).toEqual(configTableRows());
  });

  test("the check sees a row that went missing or says another default", () => {
    const table = renderConfigTable();
    const lines = table.split("\n");
    const withoutOne = [...lines.slice(0, 3), ...lines.slice(4)].join("\n");
    expect(tableRowsIn(withoutOne)).not.toEqual(configTableRows());
    const otherDefault = table.replace("`3` (min 1)", "`5` (min 1)");
    expect(tableRowsIn(otherDefault)).not.toEqual(configTableRows());
  });

  test("every variable is a Config field, with its default when unset", () => {
    const env = Object.fromEntries(
      names
        .filter(isRequired)
        .map((n) => [
          n,
          n.endsWith("URL")
            ? "https://x.example"
            : n === "SUPABASE_SECRET_KEY"
              ? `sb_secret_${"x".repeat(32)}`
              : "x".repeat(32),
        ]),
    );
    const config = loadConfig(env) as Record<string, unknown>;
    expect(Object.keys(config).sort()).toEqual(names.map(fieldOf).sort());
    expect(config.modelTimeoutMs).toBe(270_000);
    expect(config.openaiModel).toBe("gpt-5.4-mini");
    expect(config.qstashUrl).toBeUndefined();
  });
});
