/**
 * What a flow costs the database, counted on a PostgreSQL of its own (test/db/cost-budget.test.ts):
 * statements executed, rows written per table, WAL bytes, and round trips.
 *
 * Why a cluster of its own: WAL is the cluster's (another test file writing into the shared
 * cluster at the same moment would land in our window), and pg_stat_statements needs
 * `shared_preload_libraries`, which the shared cluster does not load. It costs about 2 s.
 *
 * - Statements: pg_stat_statements with `track = all`, the calls of this database's nested
 *   statements (`toplevel = false`: every statement a function ran through the executor, each
 *   counted once per execution, exactly), plus the top-level calls, one per round trip. PL/pgSQL
 *   simple expressions (`v := a + 1`, a bare `if x then`) skip the executor and are not
 *   statements. Exact, where `track_functions` counts only function calls and auto_explain would
 *   mean parsing the server's log.
 * - Rows: pg_stat_xact_user_tables read inside each call's own transaction, before its commit
 *   (nothing here is deferred to commit), partitions named by their root table.
 * - WAL: pg_current_wal_insert_lsn() before and after. The cluster runs with
 *   `full_page_writes = off`: a page's first change after a checkpoint logs the whole 8 kB page,
 *   which says when the last checkpoint was, not what the flow wrote. `wal_level = logical` as on
 *   Supabase; autovacuum off, no timed checkpoint, so little else writes WAL meanwhile.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startPostgres } from "../../dev/postgres/index.ts";
import { freePort } from "./ports.ts";

export interface RowsWritten {
  insert: number;
  update: number;
  delete: number;
}

export interface FlowCost {
  roundTrips: number;
  statements: number;
  /** Per table (`schema.table`, a partition counted as its root), only tables written. */
  rows: Record<string, RowsWritten>;
  walBytes: number;
  /** WAL by function called (its calls' bytes summed; the commit record included). */
  walByCall: Record<string, number>;
}

interface Counted {
  roundTrips: number;
  rows: Record<string, RowsWritten>;
  wal: Record<string, number>;
}

/** One PostgREST request: `select public.fn(args)` in its own transaction, as service_role. */
export type Call = (fn: string, args: Record<string, unknown>) => Promise<Record<string, unknown>>;

export interface CostDb {
  /** Superuser connection for setup and for planting regressions. */
  admin: pg.Client;
  /** Runs `flow` and returns what it cost; `flow` makes its requests through `call`. */
  measure(flow: (call: Call) => Promise<void>): Promise<FlowCost>;
  /** Like `call`, uncounted: for setup (it shares the flows' connection and settings). */
  setupCall: Call;
  stop(): Promise<void>;
}

const SETTINGS = {
  shared_preload_libraries: "pg_stat_statements",
  "pg_stat_statements.track": "all",
  "pg_stat_statements.max": "10000",
  full_page_writes: "off",
  wal_level: "logical",
  autovacuum: "off",
  checkpoint_timeout: "1d",
  max_wal_size: "10GB",
};

export async function startCostDb(): Promise<CostDb> {
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-cost-"));
  const server = await startPostgres({
    dataDir,
    port: await freePort(),
    reset: true,
    settings: SETTINGS,
  });
  const admin = new pg.Client({ connectionString: server.url });
  const flows = new pg.Client({ connectionString: server.url });
  await Promise.all([admin.connect(), flows.connect()]);
  await admin.query("create extension if not exists pg_stat_statements");
  // The migrations' statements out of the way: an entry evicted mid-flow would lose its calls.
  await admin.query("select pg_stat_statements_reset()");

  const nested = async () => {
    const { rows } = await admin.query(
      `select (select coalesce(sum(calls), 0)::bigint from pg_stat_statements
               where dbid = (select oid from pg_database where datname = current_database())
                 and not toplevel) as n,
              (select dealloc from pg_stat_statements_info) as evicted`,
    );
    return { n: Number(rows[0].n), evicted: Number(rows[0].evicted) };
  };
  const walNow = async () =>
    (await admin.query("select pg_current_wal_insert_lsn()::text as lsn")).rows[0].lsn as string;

  // The backend's table counters of this transaction plus those of earlier ones it has not yet
  // flushed (PostgreSQL 15+ flushes when idle, at most once a second): read before and after
  // the call, inside its transaction, where no flush happens, the difference is the call's.
  const written = async () =>
    (
      await flows.query<{ t: string; i: string; u: string; d: string }>(
        `select rn.nspname || '.' || r.relname as t, sum(s.n_tup_ins) as i,
                sum(s.n_tup_upd) as u, sum(s.n_tup_del) as d
         from pg_catalog.pg_stat_xact_user_tables s
         join pg_catalog.pg_class r on r.oid = coalesce(pg_catalog.pg_partition_root(s.relid), s.relid)
         join pg_catalog.pg_namespace rn on rn.oid = r.relnamespace
         group by 1`,
      )
    ).rows.map((w) => ({ t: w.t, i: Number(w.i), u: Number(w.u), d: Number(w.d) }));
  const walSince = async (lsn: string) =>
    Number(
      (
        await admin.query("select pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1)::bigint as b", [
          lsn,
        ])
      ).rows[0].b,
    );

  const callOn =
    (counted: Counted | null): Call =>
    async (fn, args) => {
      const names = Object.keys(args);
      const params = names.map((name, i) => `${name} => $${i + 1}`).join(", ");
      await flows.query(
        `begin isolation level read committed;
         select pg_catalog.set_config('role', 'service_role', true),
                pg_catalog.set_config('request.jwt.claims', '{"role":"service_role"}', true)`,
      );
      try {
        const before = counted ? await written() : [];
        const w0 = counted ? await walNow() : "";
        const { rows } = await flows.query(
          `select public.${fn}(${params}) as result`,
          names.map((n) => args[n]),
        );
        if (counted) {
          counted.roundTrips++;
          for (const w of await written()) {
            const b = before.find((x) => x.t === w.t) ?? { i: 0, u: 0, d: 0 };
            const d = { insert: w.i - b.i, update: w.u - b.u, delete: w.d - b.d };
            if (d.insert + d.update + d.delete === 0) continue;
            const into = counted.rows[w.t] ?? { insert: 0, update: 0, delete: 0 };
            counted.rows[w.t] = {
              insert: into.insert + d.insert,
              update: into.update + d.update,
              delete: into.delete + d.delete,
            };
          }
        }
        await flows.query("commit");
        if (counted) counted.wal[fn] = (counted.wal[fn] ?? 0) + (await walSince(w0));
        return rows[0].result;
      } catch (error) {
        await flows.query("rollback");
        throw error;
      }
    };

  return {
    admin,
    setupCall: callOn(null),
    async measure(flow) {
      const counted: Counted = { roundTrips: 0, rows: {}, wal: {} };
      const s0 = await nested();
      const w0 = await walNow();
      await flow(callOn(counted));
      const walBytes = await walSince(w0);
      const s1 = await nested();
      if (s1.evicted !== s0.evicted) {
        throw new Error(
          "pg_stat_statements evicted entries during the flow: its count is not exact",
        );
      }
      return {
        roundTrips: counted.roundTrips,
        statements: counted.roundTrips + (s1.n - s0.n),
        rows: sortedKeys(counted.rows),
        walBytes,
        walByCall: counted.wal,
      };
    },
    async stop() {
      await Promise.all([admin.end(), flows.end()]);
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

const sortedKeys = <T>(o: Record<string, T>): Record<string, T> =>
  Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
