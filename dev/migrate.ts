/**
 * Applies `supabase/migrations/*.sql` in order, each once, recording them in
 * `supabase_migrations.schema_migrations` the way the Supabase CLI does, so a database the
 * local stack keeps between runs only receives the migrations it has not seen.
 */
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type pg from "pg";

export const root = fileURLToPath(new URL("..", import.meta.url));
export const migrationsDir = join(root, "supabase", "migrations");

const migrationName = /^([0-9]{14})_(.*)\.sql$/;

export interface MigrationResult {
  applied: string[];
  skipped: string[];
}

/** Runs the Supabase compatibility layer (roles, auth schema). Idempotent. Never in production. */
export async function applyCompat(client: pg.ClientBase): Promise<void> {
  const sql = await readFile(join(root, "dev", "supabase-compat.sql"), "utf8");
  await client.query(sql);
}

export async function applyMigrations(client: pg.ClientBase): Promise<MigrationResult> {
  await client.query(`
    create schema if not exists supabase_migrations;
    create table if not exists supabase_migrations.schema_migrations (
      version text primary key,
      name text not null,
      applied_at timestamptz not null default now()
    );`);
  const seen = new Set(
    (
      await client.query<{ version: string }>(
        "select version from supabase_migrations.schema_migrations",
      )
    ).rows.map((r) => r.version),
  );
  const files = (await readdir(migrationsDir)).filter((f) => migrationName.test(f)).sort();
  const result: MigrationResult = { applied: [], skipped: [] };
  for (const file of files) {
    const [, version = "", name = ""] = migrationName.exec(file) ?? [];
    if (seen.has(version)) {
      result.skipped.push(file);
      continue;
    }
    const sql = await readFile(join(migrationsDir, file), "utf8");
    await client.query("begin");
    try {
      await client.query(sql);
      await client.query(
        "insert into supabase_migrations.schema_migrations (version, name) values ($1, $2)",
        [version, name],
      );
      await client.query("commit");
    } catch (error) {
      await client.query("rollback");
      throw new Error(`migration ${file} failed: ${(error as Error).message}`);
    }
    result.applied.push(file);
  }
  return result;
}

export async function applySeed(client: pg.ClientBase): Promise<void> {
  await client.query(await readFile(join(root, "supabase", "seed.sql"), "utf8"));
}
