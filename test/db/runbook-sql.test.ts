/**
 * docs/RUNBOOK.md's SQL, run as on-call would paste it into the SQL editor: every `sql` block,
 * its placeholders filled in, on a database with a finished, a queued and a swept job. A column
 * renamed or a function changed by a migration fails here, not during an incident. Each block
 * runs inside a transaction that is rolled back (the drift fix's own begin/commit included).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";
import { adminPool, newUser, rpc, servicePool } from "../support/db.ts";

const admin = adminPool();
const svc = servicePool();
const ids: Record<string, string> = {};

function runbookBlocks(): { line: number; sql: string }[] {
  const text = readFileSync(join(root, "docs", "RUNBOOK.md"), "utf8");
  const blocks: { line: number; sql: string }[] = [];
  for (const match of text.matchAll(/^```sql\n([\s\S]*?)^```/gm)) {
    const line = text.slice(0, match.index).split("\n").length;
    blocks.push({ line, sql: match[1] ?? "" });
  }
  return blocks;
}

beforeAll(async () => {
  const user = await newUser(admin, "pro");
  const done = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "runbook done" });
  await rpc(svc, "fail_job", { p_job_id: done.job.id, p_reason: "delivery_failed" });
  const queued = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "runbook queued" });
  const period = await admin.query<{ period_start: string }>(
    "select period_start::text from public.generation_jobs where id = $1",
    [queued.job.id],
  );
  Object.assign(ids, {
    job: done.job.id as string,
    user,
    period: period.rows[0]?.period_start ?? "",
  });
});

test("docs/RUNBOOK.md has SQL blocks to check (the extraction finds them)", () => {
  expect(runbookBlocks().length).toBeGreaterThanOrEqual(8);
});

test.each(runbookBlocks().map((b) => [b.line, b.sql] as const))(
  "the runbook's SQL at line %i runs on today's schema",
  async (_line, block) => {
    const sql = block
      .replace(/^\s*(begin|commit);.*$/gim, "")
      .replaceAll(/'<job(?: id)?>'/g, `'${ids.job}'`)
      .replaceAll("'<user>'", `'${ids.user}'`)
      .replaceAll("'<period_start>'", `'${ids.period}'`)
      .replaceAll("'<meter>'", "'jobs'");
    expect(sql, "a placeholder the test does not fill in").not.toMatch(/<[a-z _]+>/);
    const client = await admin.connect();
    try {
      await client.query("begin");
      await client.query(sql);
    } finally {
      await client.query("rollback");
      client.release();
    }
  },
);
