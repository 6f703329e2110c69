/**
 * What each service did, measured at the service: PostgreSQL's own statistics (function calls,
 * rows written, heap, index and WAL bytes), redis-server's INFO commandstats, and the preload of
 * finished jobs the run starts over.
 */
import { connect } from "node:net";
import type pg from "pg";
import { bulkJobs, createUsers } from "../support/pg.ts";
import { round } from "../support/util.ts";

/** The tables whose writes are measured per job. */
const TABLES = ["generation_jobs", "job_events", "quota_usage"] as const;
/** The functions the app calls over PostgREST (lib/jobs.ts): one request each. */
const RPC_FUNCTIONS = [
  "enqueue_job",
  "start_job",
  "record_progress",
  "complete_job",
  "requeue_job",
  "release_job",
  "fail_job",
  "cancel_job",
  "record_attempt_usage",
  "sweep_jobs",
  "get_job",
  "list_jobs",
  "get_usage",
] as const;

/** Sends a redis-server inline command and returns its bulk reply as text. */
function redisInfo(port: number, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, "127.0.0.1");
    let data = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk: string) => {
      data += chunk;
      const header = /^\$(\d+)\r\n/.exec(data);
      if (data.startsWith("+") || data.startsWith("-")) {
        socket.end();
        resolve(data.trim());
      } else if (header && Buffer.byteLength(data) >= header[0].length + Number(header[1])) {
        socket.end();
        resolve(data.slice(header[0].length));
      }
    });
    socket.on("error", reject);
    socket.write(`${command}\r\n`);
  });
}

export async function redisCommands(port: number): Promise<Record<string, number>> {
  const text = await redisInfo(port, "INFO commandstats");
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
    out[m[1] as string] = Number(m[2]);
  return out;
}

export interface DbSnapshot {
  tables: Record<
    string,
    {
      ins: number;
      upd: number;
      hot: number;
      heap: number;
      index: number;
      toast: number;
      indexes: number;
    }
  >;
  functions: Record<string, number>;
  walBytes: bigint;
  commits: number;
}

export async function dbSnapshot(sql: pg.Pool): Promise<DbSnapshot> {
  const { rows } = await sql.query<{
    relname: string;
    ins: string;
    upd: string;
    hot: string;
    heap: string;
    index: string;
    toast: string;
    indexes: number;
  }>(
    // A partitioned table (job_events, by month) has no rows of its own: its partitions'
    // counters and sizes are summed under its name.
    `with tables as (
       select t.oid as parent, t.relname, t.oid as relid
       from pg_class t join pg_namespace n on n.oid = t.relnamespace
       where n.nspname = 'public' and t.relname = any($1)
       union all
       select i.inhparent, t.relname, i.inhrelid
       from pg_inherits i join pg_class t on t.oid = i.inhparent
       join pg_namespace n on n.oid = t.relnamespace
       where n.nspname = 'public' and t.relname = any($1)
     )
     select t.relname, sum(s.n_tup_ins)::text ins, sum(s.n_tup_upd)::text upd,
       sum(s.n_tup_hot_upd)::text hot,
       sum(pg_relation_size(s.relid))::text heap, sum(pg_indexes_size(s.relid))::text index,
       sum(coalesce(pg_total_relation_size(c.reltoastrelid), 0))::text toast,
       max((select count(*)::int from pg_index i where i.indrelid = s.relid)) indexes
     from tables t join pg_stat_user_tables s on s.relid = t.relid
     join pg_class c on c.oid = s.relid
     group by t.relname`,
    [TABLES],
  );
  const tables: DbSnapshot["tables"] = {};
  for (const r of rows)
    tables[r.relname] = {
      ins: Number(r.ins),
      upd: Number(r.upd),
      hot: Number(r.hot),
      heap: Number(r.heap),
      index: Number(r.index),
      toast: Number(r.toast),
      indexes: r.indexes,
    };
  const fns = await sql.query<{ funcname: string; calls: string }>(
    "select funcname, calls from pg_stat_user_functions where schemaname = 'public'",
  );
  const functions: Record<string, number> = {};
  for (const r of fns.rows) functions[r.funcname] = Number(r.calls);
  const wal = await sql.query<{ lsn: string }>(
    "select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text lsn",
  );
  const db = await sql.query<{ c: string }>(
    "select xact_commit::text c from pg_stat_database where datname = current_database()",
  );
  return {
    tables,
    functions,
    walBytes: BigInt(wal.rows[0]?.lsn.split(".")[0] ?? "0"),
    commits: Number(db.rows[0]?.c ?? 0),
  };
}

/** Finished jobs over the past year, three events each (enqueued, started, the ending). */
export async function preload(
  sql: pg.Pool,
  count: number,
): Promise<{ seconds: number; events: number }> {
  const t0 = performance.now();
  await sql.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
     values ('bench', 'Bench (no practical limit)', 'month', 1000000000, 1000000)
     on conflict (id) do nothing`,
  );
  const users = await createUsers(sql, 10_000, "bench");
  const status = `case when (hashint8(i) & 2147483647) % 100 < 85 then 'succeeded'
    when (hashint8(i) & 2147483647) % 100 < 93 then 'failed' else 'canceled' end`;
  const created =
    "now() - interval '1 day' - make_interval(days => (i % 365)::int, secs => i % 86400)";
  const step = 250_000;
  for (let from = 0; from < count; from += step)
    await bulkJobs(sql, {
      users,
      from,
      to: Math.min(count, from + step) - 1,
      statusSql: status,
      createdSql: created,
    });
  // The events reference jobs just inserted: their foreign-key checks (3 M lookups) are skipped
  // for this one statement (session_replication_role), as a bulk restore would.
  const client = await sql.connect();
  let rowCount: number | null;
  try {
    await client.query("set session_replication_role = replica");
    ({ rowCount } = await client.query(
      `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
     select j.id, j.user_id, j.created_at + e.o * interval '10 s',
       case e.o when 0 then 'enqueued' when 1 then 'started'
         else case j.status when 'succeeded' then 'completed' else j.status end end,
       case e.o when 0 then null when 1 then 'queued' else 'running' end,
       case e.o when 0 then 'queued' when 1 then 'running' else j.status end,
       case e.o when 2 then jsonb_build_object('usage',
         jsonb_build_object('input_tokens', 40, 'output_tokens', 300)) else '{}'::jsonb end
     from public.generation_jobs j cross join generate_series(0, 2) e(o)`,
    ));
  } finally {
    await client.query("reset session_replication_role").catch(() => undefined);
    client.release();
  }
  await sql.query("vacuum analyze public.generation_jobs, public.job_events, public.quota_usage");
  return { seconds: round((performance.now() - t0) / 1000, 1), events: rowCount ?? 0 };
}

/** A count divided by the accepted jobs, rounded to `digits`. */
export type Per = (n: number, digits?: number) => number;

/** Each table's writes and growth per accepted job, between two snapshots. */
export function writesPerJob(d0: DbSnapshot, d1: DbSnapshot, per: Per) {
  return Object.fromEntries(
    TABLES.map((t) => {
      const a = d0.tables[t];
      const b = d1.tables[t];
      if (!a || !b) return [t, null];
      const ins = b.ins - a.ins;
      const upd = b.upd - a.upd;
      const hot = b.hot - a.hot;
      return [
        t,
        {
          inserted: per(ins),
          updated: per(upd),
          hotUpdated: per(hot),
          // Each insert and each non-HOT update adds an entry to every index (partial ones
          // only when the row matches: an upper bound for those).
          indexEntriesAtMost: per((ins + upd - hot) * b.indexes),
          indexes: b.indexes,
          heapBytes: per(b.heap - a.heap, 0),
          indexBytes: per(b.index - a.index, 0),
          toastBytes: per(b.toast - a.toast, 0),
          totalBytesAfter: b.heap + b.index + b.toast,
        },
      ];
    }),
  );
}

/** The RPC calls per accepted job, by function, and their total (not divided). */
export function callsPerJob(d0: DbSnapshot, d1: DbSnapshot, per: Per) {
  const dbCalls: Record<string, number> = {};
  let dbTotal = 0;
  for (const fn of RPC_FUNCTIONS) {
    const n = (d1.functions[fn] ?? 0) - (d0.functions[fn] ?? 0);
    if (n > 0) {
      dbCalls[fn] = per(n, 3);
      dbTotal += n;
    }
  }
  return { dbCalls, dbTotal };
}

/** Redis commands per accepted job, by command (INFO itself left out), and their total. */
export function redisPerJob(r0: Record<string, number>, r1: Record<string, number>, per: Per) {
  const redis: Record<string, number> = {};
  let redisTotal = 0;
  for (const [cmd, n] of Object.entries(r1)) {
    const d = n - (r0[cmd] ?? 0);
    if (d > 0 && cmd !== "info") {
      redis[cmd] = per(d, 3);
      redisTotal += d;
    }
  }
  return { redis, redisTotal };
}
