import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestProject } from "vitest/node";
import { startPostgres } from "../../dev/postgres.ts";
import { freePort } from "./ports.ts";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

/** One real PostgreSQL for the whole run, with our migrations applied. */
export default async function setup(project: TestProject) {
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-pg-"));
  const pg = await startPostgres({ dataDir, port: await freePort(), reset: true });
  project.provide("databaseUrl", pg.url);
  return async () => {
    await pg.stop();
  };
}
