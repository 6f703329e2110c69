/**
 * `npm run db:check -- <url>` (dev/db-check.ts): a live database compared with
 * `supabase/schema.sql`, each differing line named. On a database the migrations made it passes;
 * a planted function, a dropped index and a changed grant are each named and fail it.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, test } from "vitest";
import { schemaDiff } from "../../dev/db-check.ts";
import { adminPool, databaseUrl, useFreshDatabase } from "../support/db.ts";

useFreshDatabase();
const admin = adminPool(1);
const run = promisify(execFile);

async function check(): Promise<{ code: number; out: string }> {
  try {
    const r = await run("npx", ["tsx", "dev/db-check.ts", databaseUrl()], { encoding: "utf8" });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, out: e.stdout + e.stderr };
  }
}

describe("npm run db:check", () => {
  test("passes on the database the migrations made, names what a drifted one lacks or adds", async () => {
    expect(await check()).toEqual({
      code: 0,
      out: "the database has the schema supabase/schema.sql describes\n",
    });
    await admin.query(
      "create function public.planted_by_hand() returns int language sql as 'select 1'",
    );
    await admin.query("drop index public.generation_jobs_user_created");
    await admin.query("grant select on public.plans to anon");
    try {
      const drifted = await check();
      expect(drifted.code).toBe(1);
      expect(drifted.out).toMatch(/^\+ .*public\.planted_by_hand/m);
      expect(drifted.out).toMatch(/^- .*generation_jobs_user_created/m);
      expect(drifted.out).toMatch(/^\+ .*grant select on table public\.plans to anon/im);
    } finally {
      await admin.query("drop function public.planted_by_hand()");
      await admin.query(
        "create index generation_jobs_user_created on public.generation_jobs (user_id, created_at desc, id desc)",
      );
      await admin.query("revoke select on public.plans from anon");
    }
    expect((await check()).code).toBe(0);
  }, 60_000);

  test("compares lines as multisets: a line repeated once more is named", () => {
    expect(schemaDiff("a\nb\nb\n", "b\na\n")).toEqual({ missing: ["b"], extra: [] });
    expect(schemaDiff("a\n", "a\nc\n")).toEqual({ missing: [], extra: ["c"] });
  });
});
