/**
 * The database is closed by default: every privilege anon and authenticated hold (directly or
 * through PUBLIC) on schemas, tables and views, columns, sequences and functions, in every
 * schema but PostgreSQL's own, is listed and compared with test/db/privileges.allowlist. A
 * migration that opens something, on purpose or not, fails here until the allowlist says so in
 * review. On a database of its own, migrated exactly as a deployment is.
 */
import { readFile } from "node:fs/promises";
import type pg from "pg";
import { describe, expect, test } from "vitest";
import { adminPool, newUser, rpc, servicePool, useFreshDatabase } from "../support/db.ts";

useFreshDatabase();
const admin = adminPool();
const svc = servicePool();

const ALLOWLIST = new URL("./privileges.allowlist", import.meta.url);

/** One line per privilege: `<role> <privilege> <kind> <object>`, sorted. */
async function privilegesHeld(db: pg.Pool | pg.PoolClient): Promise<string[]> {
  const { rows } = await db.query<{ line: string }>(`
    with roles(r) as (values ('anon'), ('authenticated')),
    schemas as (
      select n.oid, n.nspname from pg_namespace n
      where n.nspname not in ('pg_catalog', 'information_schema')
        and n.nspname not like 'pg\\_toast%' and n.nspname not like 'pg\\_temp%'
    ),
    relations as (
      select c.oid, s.nspname || '.' || c.relname as name, c.relkind
      from pg_class c join schemas s on s.oid = c.relnamespace
      where c.relkind in ('r', 'p', 'v', 'm', 'f', 'S')
    )
    select r || ' ' || p || ' schema ' || s.nspname as line
    from roles, schemas s, unnest(array['USAGE', 'CREATE']) p
    where has_schema_privilege(r, s.oid, p)
    union all
    select r || ' ' || p || ' table ' || rel.name
    from roles, relations rel,
      unnest(array['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'REFERENCES', 'TRIGGER', 'MAINTAIN']) p
    where rel.relkind <> 'S' and has_table_privilege(r, rel.oid, p)
    union all
    select r || ' ' || p || ' column ' || rel.name || '.' || a.attname
    from roles, relations rel
      join pg_attribute a on a.attrelid = rel.oid and a.attnum > 0 and not a.attisdropped,
      unnest(array['SELECT', 'INSERT', 'UPDATE', 'REFERENCES']) p
    where rel.relkind <> 'S'
      and has_column_privilege(r, rel.oid, a.attnum, p)
      and not has_table_privilege(r, rel.oid, p)
    union all
    select r || ' ' || p || ' sequence ' || rel.name
    from roles, relations rel, unnest(array['USAGE', 'SELECT', 'UPDATE']) p
    where rel.relkind = 'S' and has_sequence_privilege(r, rel.oid, p)
    union all
    select r || ' EXECUTE function ' || s.nspname || '.' || f.proname
      || '(' || pg_get_function_identity_arguments(f.oid) || ')'
    from roles, pg_proc f join schemas s on s.oid = f.pronamespace
    where has_function_privilege(r, f.oid, 'EXECUTE')
    order by 1`);
  return rows.map((r) => r.line);
}

async function allowlist(): Promise<string[]> {
  return (await readFile(ALLOWLIST, "utf8"))
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"))
    .sort();
}

/** A transaction with PostgREST's per-request role and claims; rolled back. */
async function asAuthenticated<T>(userId: string, fn: (c: pg.PoolClient) => Promise<T>) {
  const client = await admin.connect();
  try {
    await client.query("begin");
    await client.query("select set_config('request.jwt.claims', $1, true)", [
      JSON.stringify({ sub: userId, role: "authenticated", aud: "authenticated" }),
    ]);
    await client.query("set local role authenticated");
    return await fn(client);
  } finally {
    await client.query("rollback");
    client.release();
  }
}

describe("closed by default", () => {
  test("every privilege anon and authenticated hold is on the allowlist, and every allowlisted one is held", async () => {
    const held = await privilegesHeld(admin);
    const allowed = await allowlist();
    expect({
      notAllowlisted: held.filter((l) => !allowed.includes(l)),
      allowlistedButNotHeld: allowed.filter((l) => !held.includes(l)),
    }).toEqual({ notAllowlisted: [], allowlistedButNotHeld: [] });
  });

  test("a signed-in user cannot move the event log's sequence (a setval would break every transition)", async () => {
    const user = await newUser(admin, "pro");
    await expect(
      asAuthenticated(user, (c) => c.query("select setval('public.job_events_id_seq', 1)")),
    ).rejects.toMatchObject({ code: "42501" });
    await expect(
      asAuthenticated(user, (c) => c.query("select nextval('public.job_events_id_seq')")),
    ).rejects.toMatchObject({ code: "42501" });
    // And the transitions keep numbering events.
    const r = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "still works" });
    expect(r.outcome).toBe("enqueued");
  });

  test("a table, view, sequence and function a later migration adds are closed to anon and authenticated, open to the service role", async () => {
    const client = await admin.connect();
    try {
      await client.query("begin");
      const before = await privilegesHeld(client);
      await client.query(`
        create table public.later_table (id bigint generated always as identity primary key, note text);
        create view public.later_view as select id from public.later_table;
        create sequence public.later_seq;
        create function public.later_fn() returns int language sql as 'select 1';
        create function private.later_helper() returns int language sql as 'select 2';
        create table private.later_private (id int)`);
      expect(await privilegesHeld(client)).toEqual(before);
      const { rows } = await client.query(`
        select has_table_privilege('service_role', 'public.later_table', 'INSERT') as t,
               has_sequence_privilege('service_role', 'public.later_table_id_seq', 'USAGE') as s,
               has_function_privilege('service_role', 'public.later_fn()', 'EXECUTE') as f,
               has_function_privilege('service_role', 'private.later_helper()', 'EXECUTE') as h,
               has_table_privilege('service_role', 'private.later_private', 'SELECT') as p`);
      expect(rows[0]).toEqual({ t: true, s: true, f: true, h: true, p: true });
    } finally {
      await client.query("rollback");
      client.release();
    }
  });
});
