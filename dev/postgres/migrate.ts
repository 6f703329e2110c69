/**
 * A local database made the way a Supabase project's is: the platform's roles and `auth`
 * schema (the compatibility layer), then the project's migrations and seed pushed by the
 * Supabase CLI.
 */
import { spawnSync } from "node:child_process";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type pg from "pg";

export const root = fileURLToPath(new URL("../..", import.meta.url));
export const migrationsDir = join(root, "supabase", "migrations");

const migrationName = /^([0-9]{14})_(.*)\.sql$/;

export interface MigrationResult {
  applied: string[];
  skipped: string[];
}

/** What `applyCompat` leaves on the `auth` schema: this database has had its platform bootstrap. */
export const BOOTSTRAP_MARK = "quota-jobs local platform bootstrap";

/**
 * Runs the Supabase compatibility layer (roles, auth schema, the platform's default privileges)
 * once per database, as a hosted project runs its bootstrap once, before any migration. Never
 * in production.
 *
 * Why once: the layer ends with Supabase's `alter default privileges ... grant all ... to anon,
 * authenticated`, and our closed-by-default migration revokes exactly that. Running the layer
 * again on a kept database (every `npm run dev`) would reopen, for every object created after
 * it, what the migration closed: a function a later migration adds to `public` would be
 * executable by `anon` on a developer's kept database and not on a fresh one or in production.
 * A database whose migrations ran before this mark existed had its layer applied already (it
 * was applied on every start): it is only marked.
 */
export async function applyCompat(client: pg.ClientBase): Promise<"applied" | "kept"> {
  const { rows } = await client.query<{ mark: string | null; migrated: string | null }>(
    `select (select obj_description(n.oid, 'pg_namespace') from pg_namespace n
              where n.nspname = 'auth') as mark,
            to_regclass('supabase_migrations.schema_migrations')::text as migrated`,
  );
  const state = rows[0];
  let outcome: "applied" | "kept" = "kept";
  if (state?.mark !== BOOTSTRAP_MARK) {
    if (!state?.migrated) {
      await client.query(
        await readFile(join(root, "dev", "postgres", "supabase-compat.sql"), "utf8"),
      );
      outcome = "applied";
    }
    await client.query(`comment on schema auth is '${BOOTSTRAP_MARK}'`);
  }
  await applyRealtimeSchema(client);
  return outcome;
}

/**
 * Supabase Realtime's `realtime` schema (dev/postgres/realtime-compat.sql), which a hosted
 * project has before its first migration, so a migration may write a policy on
 * `realtime.messages` or call `realtime.send`. Its own step, decided by whether the table
 * exists: a kept database bootstrapped before the schema was added gets it at its next start.
 *
 * A kept database also loses the NOTIFY trigger the local Realtime stand-in once heard
 * broadcasts by: the stand-in reads the table by logical decoding now, and the trigger would
 * cost every broadcast a `pg_notify` that a hosted project does not pay.
 */
export async function applyRealtimeSchema(client: pg.ClientBase): Promise<"applied" | "kept"> {
  const { rows } = await client.query<{ t: string | null }>(
    "select to_regclass('realtime.messages')::text as t",
  );
  if (rows[0]?.t) {
    await client.query(`drop trigger if exists stand_in_notify on realtime.messages;
                        drop function if exists realtime.stand_in_notify()`);
    return "kept";
  }
  await client.query(await readFile(join(root, "dev", "postgres", "realtime-compat.sql"), "utf8"));
  return "applied";
}

/**
 * Applies `supabase/migrations` and `supabase/seed.sql` with the Supabase CLI itself
 * (`supabase db push --include-seed`), the command a deploy runs, so what the tests run on
 * is what a project gets. The CLI records each migration in
 * `supabase_migrations.schema_migrations`, so a kept database only receives new ones.
 */
export async function pushMigrations(
  client: pg.ClientBase,
  databaseUrl: string,
): Promise<MigrationResult> {
  const versions = async () => {
    const exists = await client.query<{ t: string | null }>(
      "select to_regclass('supabase_migrations.schema_migrations')::text as t",
    );
    if (!exists.rows[0]?.t) return new Set<string>();
    const rows = await client.query<{ version: string }>(
      "select version from supabase_migrations.schema_migrations",
    );
    return new Set(rows.rows.map((r) => r.version));
  };
  const before = await versions();
  const url = new URL(databaseUrl);
  url.searchParams.set("sslmode", "disable");
  const cli = spawnSync(
    join(root, "node_modules", ".bin", "supabase"),
    ["db", "push", "--db-url", url.href, "--include-seed", "--yes"],
    { cwd: root, encoding: "utf8", env: { ...process.env, DO_NOT_TRACK: "1" } },
  );
  if (cli.status !== 0) {
    const said = `${cli.stdout ?? ""}${cli.stderr ?? ""}${cli.error?.message ?? ""}`.trim();
    throw new Error(`supabase db push failed (exit ${cli.status}): ${said.slice(-2000)}`);
  }
  const after = await versions();
  const files = (await readdir(migrationsDir)).filter((f) => migrationName.test(f)).sort();
  const version = (file: string) => migrationName.exec(file)?.[1] ?? "";
  return {
    applied: files.filter((f) => after.has(version(f)) && !before.has(version(f))),
    skipped: files.filter((f) => before.has(version(f))),
  };
}
