/**
 * `npm run db:check -- <postgres url>` (or DATABASE_URL): does a live database have the schema
 * `supabase/schema.sql` says the migrations make? Renders the live schema the way `npm run
 * db:schema` renders a fresh one (dev/postgres/schema.ts: the project's own schemas, its grants,
 * policies and triggers) and names every line that differs. Exit 0 when equal, 1 when not.
 * Read only: it runs catalogue queries and nothing else. Use a role that can read the catalogue
 * (the project's `postgres` connection string).
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { root } from "./postgres/migrate.ts";
import { dumpSchema } from "./postgres/schema.ts";

const SCHEMA_FILE = join(root, "supabase", "schema.sql");

export function schemaDiff(expected: string, live: string): { missing: string[]; extra: string[] } {
  const count = (text: string) => {
    const m = new Map<string, number>();
    for (const line of text.split("\n")) m.set(line, (m.get(line) ?? 0) + 1);
    return m;
  };
  const want = count(expected);
  const have = count(live);
  const missing: string[] = [];
  const extra: string[] = [];
  for (const [line, n] of want) for (let k = have.get(line) ?? 0; k < n; k++) missing.push(line);
  for (const [line, n] of have) for (let k = want.get(line) ?? 0; k < n; k++) extra.push(line);
  return { missing, extra };
}

async function main() {
  const url = process.argv[2] ?? process.env.DATABASE_URL;
  if (!url) {
    console.error("usage: npm run db:check -- <postgres url>   (or set DATABASE_URL)");
    process.exit(2);
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  let live: string;
  try {
    live = await dumpSchema(client);
  } finally {
    await client.end();
  }
  const { missing, extra } = schemaDiff(await readFile(SCHEMA_FILE, "utf8"), live);
  if (missing.length === 0 && extra.length === 0) {
    console.log("the database has the schema supabase/schema.sql describes");
    return;
  }
  console.error(
    `the database differs from supabase/schema.sql: ${missing.length} lines missing, ${extra.length} not in the file`,
  );
  for (const l of missing) console.error(`- ${l}`);
  for (const l of extra) console.error(`+ ${l}`);
  process.exitCode = 1;
}

if (process.argv[1]?.endsWith("db-check.ts")) await main();
