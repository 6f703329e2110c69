/**
 * The test database: the real PostgreSQL the global setup started. `rpc` calls a transition
 * function as the service role, exactly as the API does through PostgREST.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { afterAll, beforeAll, expect, inject } from "vitest";

let fileDatabaseUrl: string | undefined;

/**
 * The database this test file uses. Files that sweep (which touches every job) or race heavily
 * call `useFreshDatabase()` at the top to get a copy of their own; others share one.
 */
export const databaseUrl = (): string => fileDatabaseUrl ?? inject("databaseUrl");

/**
 * Gives this test file a database of its own, copied from the migrated template. Call it first,
 * at the top level: the URL is fixed at once, so pools made at the top level of the file (they
 * connect on first use) reach the copy, which is created before any test or later hook runs.
 */
export function useFreshDatabase(): void {
  const shared = inject("databaseUrl");
  const name = `t_${randomUUID().replaceAll("-", "")}`;
  const url = new URL(shared);
  url.pathname = `/${name}`;
  fileDatabaseUrl = url.toString();
  beforeAll(async () => {
    const client = new pg.Client({ connectionString: shared });
    await client.connect();
    try {
      await client.query(`create database ${name} template ${inject("templateDatabase")}`);
    } finally {
      await client.end();
    }
  });
}

const pools: pg.Pool[] = [];

/** A pool whose every connection is the service role (as PostgREST runs our RPCs). */
export function servicePool(max = 10): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl(),
    max,
    options: "-c role=service_role -c TimeZone=UTC",
  });
  pools.push(pool);
  return pool;
}

/** A pool with the login (superuser) role, for test setup and assertions that read everything. */
export function adminPool(max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: databaseUrl(), max });
  pools.push(pool);
  return pool;
}

afterAll(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end()));
});

// biome-ignore lint/suspicious/noExplicitAny: results are whatever jsonb the function built
export type Json = any;

/** Calls `public.fn(name => value, ...)` and returns its jsonb result. */
export async function rpc(
  pool: pg.Pool | pg.PoolClient,
  fn: string,
  args: Record<string, unknown>,
): Promise<Json> {
  const names = Object.keys(args);
  const params = names.map((name, i) => `${name} => $${i + 1}`).join(", ");
  const values = names.map((name) => {
    const v = args[name];
    return v instanceof Date ? v.toISOString() : v;
  });
  const { rows } = await pool.query(`select public.${fn}(${params}) as result`, values);
  return rows[0].result;
}

/**
 * A user of its own for each test: an auth.users row (enqueue refuses a user Supabase Auth does
 * not know), and on any plan but free (`pro`, the token-metered `team`, or a plan a test made) a
 * user_plans row.
 */
export async function newUser(admin: pg.Pool, plan: string = "free"): Promise<string> {
  const id = randomUUID();
  await admin.query("insert into auth.users (id) values ($1)", [id]);
  if (plan !== "free") {
    await admin.query("insert into public.user_plans (user_id, plan_id) values ($1, $2)", [
      id,
      plan,
    ]);
  }
  return id;
}

/** docs/DESIGN.md#invariant-1-no-drift: no user and period whose counter differs from its open holds plus captures. */
export async function expectNoDrift(admin: pg.Pool, userIds?: string[]): Promise<void> {
  const { rows } = userIds
    ? await admin.query("select * from public.quota_drift where user_id = any($1)", [userIds])
    : await admin.query("select * from public.quota_drift");
  expect(rows).toEqual([]);
}

export const at = (iso: string): Date => new Date(iso);
export const addSeconds = (d: Date, s: number): Date => new Date(d.getTime() + s * 1000);
