/**
 * `npm run db:schema`: writes `supabase/schema.sql`, the schema `supabase/migrations` make
 * today, from a fresh local database migrated by the Supabase CLI (dev/postgres/schema.ts).
 * `npm run db:schema -- --check` only compares, and exits 1 when the file is out of date.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./ports.ts";
import { startPostgres } from "./postgres/index.ts";
import { root } from "./postgres/migrate.ts";
import { dumpSchema } from "./postgres/schema.ts";

export const SCHEMA_FILE = join(root, "supabase", "schema.sql");

const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-schema-"));
const server = await startPostgres({ dataDir, port: await freePort(), reset: true });
let text: string;
try {
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  try {
    text = await dumpSchema(client);
  } finally {
    await client.end();
  }
} finally {
  await server.stop();
  await rm(dataDir, { recursive: true, force: true });
}
if (process.argv.includes("--check")) {
  const committed = await readFile(SCHEMA_FILE, "utf8").catch(() => "");
  if (committed !== text) {
    console.error("supabase/schema.sql is out of date: run npm run db:schema");
    process.exit(1);
  }
  console.log("supabase/schema.sql is up to date");
} else {
  await writeFile(SCHEMA_FILE, text);
  console.log(`wrote supabase/schema.sql (${text.split("\n").length} lines)`);
}
