/**
 * Section 2: SQL throughput against the floor. Each transition function is called directly
 * (`select public.fn(...)`, autocommit, as the service role) by 1, 8 and 32 connections over
 * 1,000 users, beside the database's own floor measured in the same run on the same rows: a
 * bare insert / bare guarded update of the same row shape on a copy of generation_jobs (same
 * columns, checks and indexes; no trigger, no event log, no counter). The ratio is what the
 * design costs over the cheapest statement that could change the row at all.
 */
import type pg from "pg";
import { type BenchDb, bulkJobs, createUsers, driftRows, startBenchDb } from "./support/pg.ts";
import { log, median, pool, round, table, writeResult } from "./support/util.ts";

type Target = { id: string; user: string };

interface Op {
  name: string;
  /** Target ≥ this fraction of the floor. */
  target: number;
  /** Rows the op works on (none for enqueue). */
  prepare?: { status: "queued" | "running" };
  ours(t: Target | null, i: number, users: string[]): [string, unknown[]];
  expect: string;
  floor(t: Target | null, i: number, users: string[]): [string, unknown[]];
}

const PROMPT = "Write a short note about queues and quotas.";

const OPS: Op[] = [
  {
    name: "enqueue",
    target: 0.5,
    expect: "enqueued",
    ours: (_t, i, users) => [
      "select public.enqueue_job(p_user_id => $1, p_prompt => $2) as r",
      [users[i % users.length], `${PROMPT} #${i}`],
    ],
    floor: (_t, i, users) => [
      `insert into bench.floor_jobs (user_id, status, prompt, input, request_hash, plan_id,
         period_start, created_at, queued_at, updated_at)
       values ($1, 'queued', $2, jsonb_build_object('prompt', $2), md5($2), 'bench',
         date_trunc('month', now()), now(), now(), now())`,
      [users[i % users.length], `${PROMPT} #${i}`],
    ],
  },
  {
    name: "start (claim)",
    target: 0.7,
    prepare: { status: "queued" },
    expect: "started",
    ours: (t) => ["select public.start_job(p_job_id => $1) as r", [t?.id]],
    floor: (t) => [
      `update bench.floor_jobs set status = 'running', attempts = attempts + 1,
         lease_expires_at = now() + interval '90 s', resume_at = null, started_at = now(),
         updated_at = now()
       where id = $1 and status = 'queued' and (resume_at is null or resume_at <= now())`,
      [t?.id],
    ],
  },
  {
    name: "complete",
    target: 0.7,
    prepare: { status: "running" },
    expect: "completed",
    ours: (t) => [
      "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => $2) as r",
      [t?.id, "bench output"],
    ],
    floor: (t) => [
      `update bench.floor_jobs set status = 'succeeded', output = $2, lease_expires_at = null,
         finished_at = now(), captured = hold, updated_at = now()
       where id = $1 and status = 'running' and attempts = 1`,
      [t?.id, "bench output"],
    ],
  },
  {
    name: "requeue (provider 429)",
    target: 0.7,
    prepare: { status: "running" },
    expect: "requeued",
    ours: (t) => [
      `select public.requeue_job(p_job_id => $1, p_attempt => 1,
         p_resume_at => now() + interval '60 s', p_error => '429 rate_limit_exceeded') as r`,
      [t?.id],
    ],
    floor: (t) => [
      `update bench.floor_jobs set status = 'queued', provider_quota_hits = provider_quota_hits + 1,
         resume_at = now() + interval '60 s', queued_at = now(), lease_expires_at = null,
         publish_seq = publish_seq + 1, last_error = '429 rate_limit_exceeded', updated_at = now()
       where id = $1 and status = 'running' and attempts = 1`,
      [t?.id],
    ],
  },
  {
    name: "release (transient)",
    target: 0.7,
    prepare: { status: "running" },
    expect: "released",
    ours: (t) => [
      "select public.release_job(p_job_id => $1, p_attempt => 1, p_error => 'transient: 500') as r",
      [t?.id],
    ],
    floor: (t) => [
      `update bench.floor_jobs set status = 'queued', lease_expires_at = null, queued_at = now(),
         last_error = 'transient: 500', updated_at = now()
       where id = $1 and status = 'running' and attempts = 1`,
      [t?.id],
    ],
  },
  {
    name: "fail + refund (DLQ)",
    target: 0.7,
    prepare: { status: "running" },
    expect: "failed",
    ours: (t) => [
      `select public.fail_job(p_job_id => $1, p_reason => 'delivery_failed',
         p_error => 'delivery failed: last status 500') as r`,
      [t?.id],
    ],
    floor: (t) => [
      `update bench.floor_jobs set status = 'failed', failure_reason = 'delivery_failed',
         last_error = 'delivery failed: last status 500', lease_expires_at = null, resume_at = null,
         finished_at = now(), refunded_at = now(), captured = 0, updated_at = now()
       where id = $1 and status in ('queued', 'running')`,
      [t?.id],
    ],
  },
  {
    name: "cancel + refund",
    target: 0.7,
    prepare: { status: "queued" },
    expect: "canceled",
    ours: (t) => [
      "select public.cancel_job(p_job_id => $1, p_user_id => $2) as r",
      [t?.id, t?.user],
    ],
    floor: (t) => [
      `update bench.floor_jobs set status = 'canceled', lease_expires_at = null, resume_at = null,
         finished_at = now(), refunded_at = now(), captured = 0, updated_at = now()
       where id = $1 and user_id = $2 and status in ('queued', 'running')`,
      [t?.id, t?.user],
    ],
  },
];

interface Run {
  opsPerSec: number;
  errors: Record<string, number>;
  unexpected: number;
}

async function drive(
  clients: pg.PoolClient[],
  n: number,
  stmt: (i: number) => [string, unknown[]],
  expect: string | null,
): Promise<Run> {
  const errors: Record<string, number> = {};
  let unexpected = 0;
  const ms = await pool(clients.length, n, async (i, w) => {
    const [text, values] = stmt(i);
    try {
      const res = await (clients[w] as pg.PoolClient).query(text, values);
      if (expect !== null && res.rows[0]?.r?.outcome !== expect) unexpected++;
      if (expect === null && res.rowCount !== 1) unexpected++;
    } catch (error) {
      const code = (error as { code?: string }).code ?? "other";
      errors[code] = (errors[code] ?? 0) + 1;
    }
  });
  return { opsPerSec: (n * 1000) / ms, errors, unexpected };
}

async function targets(
  db: BenchDb,
  users: string[],
  n: number,
  status: "queued" | "running",
  table?: string,
): Promise<Target[]> {
  const ids = await bulkJobs(db.admin, {
    users,
    from: 0,
    to: n - 1,
    statusSql: `'${status}'`,
    returnIds: true,
    ...(table ? { table } : {}),
  });
  const { rows } = await db.admin.query<{ id: string; user_id: string }>(
    `select id, user_id from ${table ?? "public.generation_jobs"} where id = any($1::uuid[])`,
    [ids],
  );
  const byId = new Map(rows.map((r) => [r.id, r.user_id]));
  // Shuffle so concurrent clients do not walk neighbouring rows in insert order.
  const list = ids.map((id) => ({ id, user: byId.get(id) as string }));
  for (let i = list.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [list[i], list[j]] = [list[j] as Target, list[i] as Target];
  }
  return list;
}

const mergeErrors = (runs: Run[]) => {
  const all: Record<string, number> = {};
  for (const r of runs) for (const [k, v] of Object.entries(r.errors)) all[k] = (all[k] ?? 0) + v;
  return all;
};

export async function runSqlThroughput(opts: { quick: boolean }) {
  const n = opts.quick ? 300 : 1200;
  const repeats = 3;
  const levels = [1, 8, 32];
  const db = await startBenchDb();
  try {
    // The floor's table is the job table with its rules: PostgreSQL cannot copy the job table's
    // one check (a whole-row reference) into another table, so the floor's calls the same
    // function on a row built from its columns.
    const { rows: cols } = await db.admin.query<{ list: string }>(
      `select string_agg(quote_ident(attname), ', ' order by attnum) as list from pg_attribute
       where attrelid = 'public.generation_jobs'::regclass and attnum > 0 and not attisdropped`,
    );
    await db.admin.query(`
      create schema bench;
      create table bench.floor_jobs (like public.generation_jobs including defaults including indexes);
      alter table bench.floor_jobs add constraint floor_jobs_valid
        check (private.generation_job_valid(row(${cols[0]?.list})::public.generation_jobs));
      grant usage on schema bench to service_role;
      grant all on bench.floor_jobs to service_role;`);
    const users = await createUsers(db.admin, 1000, "bench");
    const service = db.service(34);
    const rows: Record<string, unknown>[] = [];

    for (const c of levels) {
      const clients = await Promise.all(Array.from({ length: c }, () => service.connect()));
      try {
        for (const op of OPS) {
          const ours: Run[] = [];
          const floor: Run[] = [];
          for (let r = 0; r < repeats + 1; r++) {
            // Repeat 0 warms plans and caches; it is not counted.
            const count = r === 0 ? Math.min(100, n) : n;
            const [mine, bare] = op.prepare
              ? await Promise.all([
                  targets(db, users, count, op.prepare.status),
                  targets(db, users, count, op.prepare.status, "bench.floor_jobs"),
                ])
              : [null, null];
            const a = await drive(
              clients,
              count,
              (i) => op.ours(mine ? (mine[i] as Target) : null, i, users),
              op.expect,
            );
            const b = await drive(
              clients,
              count,
              (i) => op.floor(bare ? (bare[i] as Target) : null, i, users),
              null,
            );
            if (r > 0) {
              ours.push(a);
              floor.push(b);
            }
          }
          const o = median(ours.map((x) => x.opsPerSec));
          const f = median(floor.map((x) => x.opsPerSec));
          const errors = mergeErrors([...ours, ...floor]);
          const row = {
            op: op.name,
            connections: c,
            oursOpsPerSec: round(o, 0),
            floorOpsPerSec: round(f, 0),
            ratio: round(o / f, 2),
            target: op.target,
            met: o / f >= op.target && Object.keys(errors).length === 0,
            errors,
            unexpectedOutcomes: ours.reduce((s, x) => s + x.unexpected, 0),
            runs: {
              ours: ours.map((x) => round(x.opsPerSec, 0)),
              floor: floor.map((x) => round(x.opsPerSec, 0)),
            },
          };
          rows.push(row);
          log(
            `  sql ${op.name} c=${c}: ${row.oursOpsPerSec}/s vs floor ${row.floorOpsPerSec}/s (${row.ratio})`,
          );
        }
      } finally {
        for (const cl of clients) cl.release();
      }
    }

    const hot = await hotUser(db, service, opts.quick ? 300 : 1000, rows);
    const drift = await driftRows(db.admin);
    const result = { n, repeats, postgres: db.version, rows, hot, drift };
    await writeResult("sql-throughput", result);
    return result;
  } finally {
    await db.stop();
  }
}

/** All clients on one user: the per-user lock and the one counter row serialize, without errors. */
async function hotUser(
  db: BenchDb,
  service: pg.Pool,
  n: number,
  spread: Record<string, unknown>[],
) {
  const out: Record<string, unknown>[] = [];
  for (const c of [8, 32]) {
    const clients = await Promise.all(Array.from({ length: c }, () => service.connect()));
    try {
      const [user] = await createUsers(db.admin, 1, "bench");
      const one = [user as string];
      const enq = await drive(
        clients,
        n,
        (i) => OPS[0]?.ours(null, i, one) as [string, unknown[]],
        "enqueued",
      );
      const queued = await targets(db, one, n, "queued");
      const cancel = await drive(
        clients,
        n,
        (i) => OPS[6]?.ours(queued[i] as Target, i, one) as [string, unknown[]],
        "canceled",
      );
      const spreadEnq = spread.find((r) => r.op === "enqueue" && r.connections === c);
      const spreadCancel = spread.find((r) => r.op === "cancel + refund" && r.connections === c);
      // The limits under a race: 50 units, and (pro) 3 active jobs.
      await db.admin.query(
        `insert into public.plans values ('bench50', 'Bench 50', 'month', 50, 1000000) on conflict do nothing`,
      );
      const [limited] = await createUsers(db.admin, 1, "bench50");
      const lim = await drive(
        clients,
        200,
        (i) => OPS[0]?.ours(null, i, [limited as string]) as [string, unknown[]],
        "enqueued",
      );
      const [pro] = await createUsers(db.admin, 1, "pro");
      const act = await drive(
        clients,
        c,
        (i) => OPS[0]?.ours(null, i, [pro as string]) as [string, unknown[]],
        "enqueued",
      );
      const row = {
        connections: c,
        enqueueOpsPerSec: round(enq.opsPerSec, 0),
        enqueueSpreadOpsPerSec: spreadEnq?.oursOpsPerSec ?? null,
        cancelOpsPerSec: round(cancel.opsPerSec, 0),
        cancelSpreadOpsPerSec: spreadCancel?.oursOpsPerSec ?? null,
        errors: mergeErrors([enq, cancel, lim, act]),
        unexpectedOutcomes: enq.unexpected + cancel.unexpected,
        unitsLimit: { attempts: 200, limit: 50, enqueued: 200 - lim.unexpected },
        activeLimit: { attempts: c, limit: 3, enqueued: c - act.unexpected },
      };
      out.push(row);
      log(
        `  sql hot user c=${c}: enqueue ${row.enqueueOpsPerSec}/s, cancel ${row.cancelOpsPerSec}/s, errors ${JSON.stringify(row.errors)}`,
      );
    } finally {
      for (const cl of clients) cl.release();
    }
  }
  return out;
}

export function printSqlThroughput(r: Awaited<ReturnType<typeof runSqlThroughput>>): string {
  const main = table(
    ["op", "conns", "ours ops/s", "floor ops/s", "ratio", "target", "errors", "met"],
    r.rows.map((x) => [
      x.op as string,
      x.connections as number,
      x.oursOpsPerSec as number,
      x.floorOpsPerSec as number,
      x.ratio as number,
      `>= ${x.target}`,
      JSON.stringify(x.errors) === "{}" ? 0 : JSON.stringify(x.errors),
      x.met ? "yes" : "NO",
    ]),
  );
  const hot = table(
    [
      "hot user conns",
      "enqueue ops/s (1 user)",
      "(1,000 users)",
      "cancel ops/s (1 user)",
      "(1,000 users)",
      "errors",
      "50-unit limit: enqueued of 200",
      "3-active limit: enqueued",
    ],
    r.hot.map((h) => [
      h.connections as number,
      h.enqueueOpsPerSec as number,
      h.enqueueSpreadOpsPerSec as number,
      h.cancelOpsPerSec as number,
      h.cancelSpreadOpsPerSec as number,
      JSON.stringify(h.errors) === "{}" ? 0 : JSON.stringify(h.errors),
      (h.unitsLimit as { enqueued: number }).enqueued,
      `${(h.activeLimit as { enqueued: number }).enqueued} of ${(h.activeLimit as { attempts: number }).attempts}`,
    ]),
  );
  // Target: from 8 to 32 connections ours may drop no more than the floor does (when the floor
  // does not drop, ours must not drop).
  const at = (op: string, c: number) => r.rows.find((x) => x.op === op && x.connections === c);
  const scaling = table(
    ["op", "ours 32 / 8 conns", "floor 32 / 8 conns", "met (ours drops no more than the floor)"],
    [...new Set(r.rows.map((x) => x.op as string))].map((op) => {
      const o = (at(op, 32)?.oursOpsPerSec as number) / (at(op, 8)?.oursOpsPerSec as number);
      const f = (at(op, 32)?.floorOpsPerSec as number) / (at(op, 8)?.floorOpsPerSec as number);
      return [op, round(o, 2), round(f, 2), o >= Math.min(1, f) ? "yes" : "NO"];
    }),
  );
  return `${main}\n\n${scaling}\n\n${hot}\n\ndrift rows after the run: ${r.drift}`;
}
