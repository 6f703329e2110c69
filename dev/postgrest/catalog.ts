/**
 * PostgREST's schema cache, for what the RPC stand-in needs: each function's overloads from
 * pg_proc, and the `alter role … set` settings of the roles requests switch to. Entries live a
 * short while (Supabase reloads PostgREST's cache on every DDL, so stale signatures are rare).
 */
import type pg from "pg";
import { isCallable, type Routine } from "./routines.ts";

export interface CatalogRow {
  setof: boolean;
  void: boolean;
  row: boolean;
  ndefaults: number;
  arg_names: string[];
  arg_modes: string[];
  arg_types: string[];
}

export const catalogQuery = `
  select p.proretset as setof,
    p.prorettype = 'pg_catalog.void'::pg_catalog.regtype as void,
    (t.typtype = 'c' or p.prorettype = 'pg_catalog.record'::pg_catalog.regtype) as row,
    p.pronargdefaults as ndefaults,
    coalesce(p.proargnames, array[]::text[]) as arg_names,
    coalesce(p.proargmodes::text[], array[]::text[]) as arg_modes,
    array(
      select pg_catalog.format_type(a.oid, null)
      from unnest(coalesce(p.proallargtypes, p.proargtypes::oid[])) with ordinality as a(oid, i)
      order by a.i
    ) as arg_types
  from pg_catalog.pg_proc p
  join pg_catalog.pg_namespace n on n.oid = p.pronamespace
  join pg_catalog.pg_type t on t.oid = p.prorettype
  where n.nspname = $1 and p.proname = $2 and p.prokind = 'f'`;

export function toRoutine(schema: string, name: string, row: CatalogRow): Routine {
  const inputs = row.arg_types
    .map((type, i) => ({ type, name: row.arg_names[i] ?? "", mode: row.arg_modes[i] ?? "i" }))
    .filter((a) => a.mode === "i" || a.mode === "b" || a.mode === "v");
  const firstDefault = inputs.length - row.ndefaults;
  return {
    schema,
    name,
    params: inputs.map((a, i) => ({
      name: a.name,
      type: a.type,
      variadic: a.mode === "v",
      hasDefault: i >= firstDefault,
    })),
    returns: row.void ? "void" : row.row ? "row" : "scalar",
    setof: row.setof,
  };
}

export interface Catalog {
  routines(schema: string, name: string): Promise<Routine[]>;
  /** role → [setting, value][]; PostgREST 12+ applies these (statement_timeout) per request. */
  roleSettings(): Promise<Map<string, [string, string][]>>;
}

const roleSettingsQuery = `
  select r.rolname as role, unnest(s.setconfig) as setting
  from pg_catalog.pg_db_role_setting s
  join pg_catalog.pg_roles r on r.oid = s.setrole
  where s.setdatabase in (0, (select oid from pg_catalog.pg_database where datname = current_database()))
  order by s.setdatabase`;

export function createCatalog(pool: Pick<pg.Pool, "query">, ttlMs: number): Catalog {
  const cache = new Map<string, { at: number; value: Promise<unknown> }>();
  function cached<T>(key: string, load: () => Promise<T>): Promise<T> {
    const hit = cache.get(key);
    if (hit && Date.now() - hit.at < ttlMs) return hit.value as Promise<T>;
    const value = load();
    cache.set(key, { at: Date.now(), value });
    value.catch(() => cache.delete(key));
    return value;
  }
  return {
    routines: (schema, name) =>
      cached(`fn:${schema}.${name}`, async () => {
        const { rows } = await pool.query<CatalogRow>(catalogQuery, [schema, name]);
        return rows.map((row) => toRoutine(schema, name, row)).filter(isCallable);
      }),
    roleSettings: () =>
      cached("role-settings", async () => {
        const { rows } = await pool.query<{ role: string; setting: string }>(roleSettingsQuery);
        const byRole = new Map<string, [string, string][]>();
        for (const { role, setting } of rows) {
          const eq = setting.indexOf("=");
          const list = byRole.get(role) ?? [];
          list.push([setting.slice(0, eq), setting.slice(eq + 1)]);
          byRole.set(role, list);
        }
        return byRole;
      }),
  };
}
