/**
 * A rule written in several languages has one source, and every other copy is held to it: the
 * failure reasons (lib/jobs.ts's FAILURE_REASONS: the job row's SQL check, the page's wording)
 * and the prompt limit (lib/validate.ts's MAX_PROMPT_CHARS: the SQL constraint and enqueue_job's
 * check, the page's field and its sentences). The SQL side is read from supabase/schema.sql, the
 * schema the migrations make today (held to them by test/db/schema-file.test.ts). Each check
 * fails on a planted difference (below).
 */
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import { FAILURE_REASONS } from "../../lib/jobs.ts";
import { declarations, KIND_IDS } from "../../lib/kinds/index.ts";
import { MAX_PROMPT_CHARS } from "../../lib/validate.ts";
import { REASONS } from "../../public/status.js";

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");
const schema = read("supabase/schema.sql");

/**
 * The reasons the SQL rule allows, in its order: the branch of the job row's check function
 * (private.generation_job_valid) that names generation_jobs_failure_reason_check.
 */
function sqlReasons(sql: string): string[] {
  const rule =
    /when \(j\.failure_reason in \(([^)]*)\)\) is false\s+then 'generation_jobs_failure_reason_check'/.exec(
      sql,
    );
  return [...(rule?.[1] ?? "").matchAll(/'([a-z_]+)'/g)].map((m) => m[1] ?? "");
}

/** Every prompt limit the SQL states (the column's check, enqueue_job's refusal). */
function sqlPromptLimits(sql: string): number[] {
  return [
    ...sql.matchAll(/char_length\((?:j\.)?prompt\) <= (\d+)/g),
    ...sql.matchAll(/char_length\(p_prompt\) > (\d+)/g),
  ].map((m) => Number(m[1]));
}

describe("one source for each rule", () => {
  test("the failure reasons: the SQL constraint allows exactly lib/jobs.ts's list", () => {
    expect(sqlReasons(schema)).toEqual([...FAILURE_REASONS]);
  });

  test("the failure reasons: the page words each one, and nothing else", () => {
    expect(Object.keys(REASONS).sort()).toEqual([...FAILURE_REASONS].sort());
  });

  test("the prompt limit: the column, enqueue_job, the page's field and its sentences", async () => {
    const limits = sqlPromptLimits(schema);
    expect(limits.length).toBeGreaterThanOrEqual(2);
    expect(new Set(limits)).toEqual(new Set([MAX_PROMPT_CHARS]));
    // The page's fields and their sentences come from the kinds' declarations (GET /api/usage's
    // catalog): every text field of every kind declares the one limit, and no other page file
    // writes a limit of its own.
    const textFields = (await declarations()).flatMap((kind) =>
      kind.fields.flatMap((field) => (field.type === "text" ? [field.maxChars] : [])),
    );
    expect(textFields.length).toBeGreaterThanOrEqual(KIND_IDS.length);
    expect(new Set(textFields)).toEqual(new Set([MAX_PROMPT_CHARS]));
    const said = MAX_PROMPT_CHARS.toLocaleString("en-US");
    for (const file of readdirSync(new URL("../../public/", import.meta.url))) {
      if (!/\.(js|html)$/.test(file)) continue;
      const text = read(`public/${file}`);
      // Thousands only: a password's "at least 6 characters" is another rule.
      const numbers = [...text.matchAll(/(\d{1,3}(?:,\d{3})+|\d{4,}) characters/g)].map(
        (m) => m[1],
      );
      // Only status.js's words for the API's refusals may say it, and then only as the one limit.
      expect({ file, numbers: [...new Set(numbers)] }).toEqual({
        file,
        numbers: file === "status.js" ? [said] : [],
      });
      expect({ file, maxlength: /maxlength="\d+"/.test(text) }).toEqual({ file, maxlength: false });
    }
  });

  test("the checks have teeth: a planted reason or limit is caught", () => {
    const planted = schema
      .replace(
        "'attempt_budget_exhausted', 'provider_misconfigured'",
        "'attempt_budget_exhausted', 'planted', 'provider_misconfigured'",
      )
      .replace(`char_length(p_prompt) > ${MAX_PROMPT_CHARS}`, "char_length(p_prompt) > 9000");
    expect(sqlReasons(planted)).not.toEqual([...FAILURE_REASONS]);
    expect(new Set(sqlPromptLimits(planted))).not.toEqual(new Set([MAX_PROMPT_CHARS]));
  });
});
