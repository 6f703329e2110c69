/**
 * `supabase/schema.sql` is the schema the migrations make today (dev/postgres/schema.ts renders
 * it from the catalogue): a review reads its diff, and a reader finds what a function does now in
 * one place. It must never drift from the migrations: rebuilt here from a database migrated by
 * the Supabase CLI, it must equal the committed file, and a planted change must show.
 */
import { readFile } from "node:fs/promises";
import { describe, expect, test } from "vitest";
import { dumpSchema } from "../../dev/postgres/schema.ts";
import { adminPool, useFreshDatabase } from "../support/db.ts";

useFreshDatabase();
const admin = adminPool(1);
const SCHEMA_FILE = new URL("../../supabase/schema.sql", import.meta.url);

async function dumpNow(): Promise<string> {
  const client = await admin.connect();
  try {
    return await dumpSchema(client);
  } finally {
    client.release();
  }
}

describe("supabase/schema.sql", () => {
  test("equals the schema the migrations make (else run npm run db:schema and commit it)", async () => {
    const committed = await readFile(SCHEMA_FILE, "utf8");
    const now = await dumpNow();
    // Compared line by line, so a failure shows the lines that differ.
    expect(now.split("\n")).toEqual(committed.split("\n"));
  });

  test("has each transition once, as defined now", async () => {
    const committed = await readFile(SCHEMA_FILE, "utf8");
    for (const fn of ["enqueue_job", "start_job", "complete_job", "fail_job", "cancel_job"]) {
      const definitions = committed.match(
        new RegExp(`^CREATE OR REPLACE FUNCTION public\\.${fn}\\(`, "gm"),
      );
      expect({ fn, definitions: definitions?.length }).toEqual({ fn, definitions: 1 });
    }
  });

  test("a planted change to the database shows in the dump (the check has teeth)", async () => {
    const before = await dumpNow();
    await admin.query(`
      alter table public.plans add column planted_column int;
      comment on function public.start_job(uuid, integer, timestamptz) is 'planted comment'`);
    const after = await dumpNow();
    const added = after.split("\n").filter((l) => !before.split("\n").includes(l));
    expect(added.some((l) => l.includes("planted_column integer"))).toBe(true);
    expect(added.some((l) => l.includes("'planted comment'"))).toBe(true);
  });
});
