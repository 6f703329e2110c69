/**
 * A kept local database (every `npm run dev` after the first) stays as closed as a fresh one: the
 * platform bootstrap (`dev/postgres/supabase-compat.sql`, whose default privileges open
 * everything to `anon` and `authenticated`) runs once per database, before the migrations that
 * close it, as a hosted project's does. Restarted on the same data folder, the server must not
 * reopen what the migrations closed for objects created afterwards.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, expect, test } from "vitest";
import { type RunningPostgres, startPostgres } from "../../dev/postgres/index.ts";
import { freePort } from "../support/ports.ts";

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** What anon and authenticated may do with a table and a function created now (rolled back). */
async function grantsOnNewObjects(server: RunningPostgres) {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    await client.query("begin");
    await client.query(`
      create table public.kept_later_table (id int);
      create function public.kept_later_fn() returns int language sql as 'select 1'`);
    const { rows } = await client.query(`
      select r.role,
        has_table_privilege(r.role, 'public.kept_later_table', 'SELECT') as select_table,
        has_function_privilege(r.role, 'public.kept_later_fn()', 'EXECUTE') as execute_fn
      from (values ('anon'), ('authenticated')) r(role) order by r.role`);
    return rows;
  } finally {
    await client.query("rollback");
    await client.end();
  }
}

const closed = [
  { role: "anon", select_table: false, execute_fn: false },
  { role: "authenticated", select_table: false, execute_fn: false },
];

test("a restarted kept database keeps new objects closed to anon and authenticated, as a fresh one does", async () => {
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-kept-"));
  dirs.push(dataDir);
  const port = await freePort();
  const first = await startPostgres({ dataDir, port, reset: true, persistent: true });
  try {
    expect(await grantsOnNewObjects(first)).toEqual(closed);
  } finally {
    await first.stop();
  }
  const again = await startPostgres({ dataDir, port, persistent: true });
  try {
    expect(again.migrations.applied).toEqual([]);
    expect(await grantsOnNewObjects(again)).toEqual(closed);
  } finally {
    await again.stop();
  }
}, 120_000);
