/**
 * Does the erasure cover every row that points at a user? Read from the catalogue, not from a
 * list someone keeps by hand: the tables holding a user's rows are auth.users, every table of
 * ours with a `user_id` column, and (to a fixed point) every table with a foreign key to one of
 * them; each such key must be in the allowlist with how the erasure covers it, and the catalogue
 * must agree:
 *   - `cascade`: the key is `on delete cascade` (its rows go with the row they point at);
 *   - `nulled`: the key is `on delete set null` on nullable columns (the row stays, anonymous);
 *   - `deleted`: private.erase_user_data deletes from the table itself.
 * Every table of ours with a `user_id` column must be deleted from by private.erase_user_data.
 * A new table pointing at a job or a user therefore fails until the erasure handles it.
 */
import type pg from "pg";

export type Coverage = "cascade" | "nulled" | "deleted";

/** `schema.table.constraint` → how the erasure covers the rows of that foreign key. */
export type CoverageList = Record<string, Coverage>;

/** What the catalogue says of one foreign key into a table holding a user's rows. */
interface ForeignKey {
  name: string;
  table: string;
  references: string;
  onDelete: string;
  nullable: boolean;
}

const ERASURE_FUNCTION = "private.erase_user_data(uuid, timestamp with time zone)";

/** Tables of ours: what the migrations make (Supabase Auth's schema is its own). */
const OURS = "n.nspname in ('public', 'private')";

/**
 * Every problem found: a key the list lacks, a key whose catalogue entry contradicts the list,
 * a list entry no key matches, a user_id table the erasure does not delete from. Empty when
 * the erasure covers everything.
 */
export async function erasureGaps(
  db: pg.Pool | pg.PoolClient,
  list: CoverageList,
): Promise<string[]> {
  const { rows: seeds } = await db.query<{ name: string }>(`
    select 'auth.users' as name
    union
    select format('%s.%s', n.nspname, c.relname)
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    join pg_attribute a on a.attrelid = c.oid and a.attname = 'user_id' and not a.attisdropped
    where ${OURS} and c.relkind in ('r', 'p') and not c.relispartition`);
  const { rows: keys } = await db.query<ForeignKey>(`
    select format('%s.%s.%s', n.nspname, c.relname, k.conname) as name,
      format('%s.%s', n.nspname, c.relname) as table,
      format('%s.%s', rn.nspname, r.relname) as references,
      k.confdeltype as "onDelete",
      not exists (select from pg_attribute a
        where a.attrelid = k.conrelid and a.attnum = any (k.conkey) and a.attnotnull) as nullable
    from pg_constraint k
    join pg_class c on c.oid = k.conrelid join pg_namespace n on n.oid = c.relnamespace
    join pg_class r on r.oid = k.confrelid join pg_namespace rn on rn.oid = r.relnamespace
    where k.contype = 'f' and k.conparentid = 0`);
  const { rows: fn } = await db.query<{ src: string }>(
    "select prosrc as src from pg_proc where oid = $1::regprocedure",
    [ERASURE_FUNCTION],
  );
  const src = (fn[0]?.src ?? "").toLowerCase().replace(/\s+/g, " ");
  const deletes = (table: string) => src.includes(`delete from ${table.toLowerCase()} `);

  const holding = new Set(seeds.map((s) => s.name));
  const covered = new Map<string, ForeignKey>();
  for (let grew = true; grew; ) {
    grew = false;
    for (const k of keys) {
      if (!holding.has(k.references) || covered.has(k.name)) continue;
      covered.set(k.name, k);
      if (!holding.has(k.table)) holding.add(k.table);
      grew = true;
    }
  }

  const gaps: string[] = [];
  for (const k of [...covered.values()].sort((a, b) => a.name.localeCompare(b.name))) {
    const how = list[k.name];
    const what = `${k.name} (${k.table} → ${k.references})`;
    if (!how) gaps.push(`${what}: not in the erasure's list`);
    else if (how === "cascade" && k.onDelete !== "c") gaps.push(`${what}: listed cascade, is not`);
    else if (how === "nulled" && !(k.onDelete === "n" && k.nullable))
      gaps.push(`${what}: listed nulled, is not on delete set null on nullable columns`);
    else if (how === "deleted" && !deletes(k.table))
      gaps.push(`${what}: listed deleted, private.erase_user_data does not delete from it`);
  }
  for (const name of Object.keys(list).sort()) {
    if (!covered.has(name)) gaps.push(`${name}: listed, but no such foreign key to a user's rows`);
  }
  for (const { name } of seeds) {
    if (name !== "auth.users" && !deletes(name))
      gaps.push(`${name}: has user_id, private.erase_user_data does not delete from it`);
  }
  return gaps;
}
