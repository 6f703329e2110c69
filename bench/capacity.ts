/**
 * Section 7: capacity at 1/100 scale. The whole local stack (dev/stack.ts: the app as Vercel's
 * builder made it, in its own process; the PostgREST, QStash, Upstash REST and OpenAI stand-ins;
 * a real PostgreSQL and redis-server) with 1 M finished jobs already in generation_jobs and
 * 3 M rows in job_events (loaded set-based, as section 5 does), then a steady arrival of enqueues
 * (a Poisson process at `rate` per second for `seconds`) from many users on free, pro and team,
 * kinds document and extract, each job polled by the page's own poller (public/poll.js) until
 * it ends. The mix: most succeed; some are canceled (queued, or once they stream); a share of
 * model calls get a provider 429 (the fake model's failNext: the job waits for the provider, the
 * shared gate closes, the other jobs in that window wait too); a few prompts make the model
 * answer 500 on every attempt (QStash retries, then the failure callback) or 400 (refused).
 *
 * What it reports: enqueue latency (the POST's round trip) and end to end (from the POST to
 * the job's `finished_at`), p50/p95/p99/max; jobs by final status and reason; `quota_drift`
 * rows and stuck jobs after the drain and one final sweep (both must be 0); and, per accepted
 * job, what each service did, measured at the service: database calls (pg_stat_user_functions
 * on the RPC functions: one PostgREST request each), rows inserted/updated (HOT or not) and the
 * bytes the heap, its indexes and the WAL grew by (pg_stat_user_tables, pg_relation_size,
 * pg_current_wal_lsn), QStash publishes and delivery attempts by destination (the stand-in's
 * log lines), Redis commands (redis-server's INFO commandstats) and model calls and tokens
 * (the fake model's stats).
 *
 * `npm run bench -- --only=capacity` runs it at 10/s for 600 s over 1 M preloaded jobs;
 * `--quick` 30 s over 100 k. CAPACITY_SECONDS, CAPACITY_RATE and CAPACITY_PRELOAD override.
 */

import { mkdtemp, rm } from "node:fs/promises";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type pg from "pg";
import { ANY_FREE_PORTS, pickPort } from "../dev/ports.ts";
import { type Stack, startStack } from "../dev/stack.ts";
import { createPoller, paceOf } from "../public/poll.js";
import { bulkJobs, createUsers } from "./support/pg.ts";
import { log, machine, quantile, round, sleep, table, writeResult } from "./support/util.ts";

export interface CapacityOptions {
  /** How long enqueues arrive. */
  seconds: number;
  /** Mean enqueues per second (Poisson arrivals). */
  rate: number;
  /** Finished jobs loaded before the run (3 job_events rows each). */
  preload: number;
  /** The PRNG's seed: the same seed draws the same users, kinds and mix. @default 1 */
  seed?: number;
  /** How long the drain may take after the last enqueue before a job counts as stuck. @default 300 s */
  drainSeconds?: number;
  /**
   * The share of jobs whose page stays open and polls until the job ends (the others' pages
   * were closed after the enqueue); jobs canceled while running are always followed. @default 0.3
   */
  pollShare?: number;
  /** Wait before each statistics snapshot, so every backend has flushed its counters
   * (PostgreSQL flushes an idle backend's within 10 s). @default 11 s */
  settleMs?: number;
  /** Progress lines. @default stderr */
  log?: (line: string) => void;
}

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

const EXTRACT_SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string" },
    city: { type: ["string", "null"] },
    items: { type: "array", items: { type: "string" }, maxItems: 3 },
  },
  required: ["name", "city", "items"],
  additionalProperties: false,
};

type Plan = "free" | "pro" | "team";
type Scenario = "ok" | "cancel_queued" | "cancel_running" | "server_error" | "bad_request";

interface Planned {
  at: number;
  plan: Plan;
  kind: "document" | "extract";
  scenario: Scenario;
  inject429: boolean;
  follow: boolean;
  tokens: number;
}

/** mulberry32: a small seeded PRNG, so a run's mix can be drawn again. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The arrivals and the mix: plans 30/55/15 % free/pro/team, a quarter of paid jobs extractions. */
export function plan(
  o: Pick<CapacityOptions, "seconds" | "rate" | "seed" | "pollShare">,
): Planned[] {
  const rnd = prng(o.seed ?? 1);
  const jobs: Planned[] = [];
  let t = 0;
  for (;;) {
    t += -Math.log(1 - rnd()) / o.rate;
    if (t >= o.seconds) break;
    const p = rnd();
    const planOf: Plan = p < 0.3 ? "free" : p < 0.85 ? "pro" : "team";
    const kind = planOf !== "free" && rnd() < 0.25 ? "extract" : "document";
    const s = rnd();
    const scenario: Scenario =
      s < 0.03
        ? "cancel_queued"
        : s < 0.06
          ? "cancel_running"
          : s < 0.07
            ? "server_error"
            : s < 0.075
              ? "bad_request"
              : "ok";
    jobs.push({
      at: t * 1000,
      plan: planOf,
      kind,
      scenario,
      inject429: rnd() < 0.03,
      follow: scenario === "cancel_running" || rnd() < (o.pollShare ?? 0.3),
      tokens: 30 + Math.floor(rnd() * 60),
    });
  }
  return jobs;
}

function body(j: Planned, i: number): unknown {
  const markers = [
    `[fake:tokens:${j.kind === "extract" ? 20 : j.tokens}]`,
    "[fake:chunk_ms:40]",
    j.scenario === "server_error" ? "[fake:server_error]" : "",
    j.scenario === "bad_request" ? "[fake:bad_request]" : "",
  ].join(" ");
  if (j.kind === "extract")
    return {
      kind: "extract",
      input: {
        text: `Order ${i}: Ada from Lyon bought tea, a pot and two cups. ${markers}`,
        schema: EXTRACT_SCHEMA,
      },
    };
  return { kind: "document", input: { prompt: `Capacity job ${i}: a note on queues. ${markers}` } };
}

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

async function redisCommands(port: number): Promise<Record<string, number>> {
  const text = await redisInfo(port, "INFO commandstats");
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm))
    out[m[1] as string] = Number(m[2]);
  return out;
}

interface DbSnapshot {
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

async function dbSnapshot(sql: pg.Pool): Promise<DbSnapshot> {
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
async function preload(sql: pg.Pool, count: number): Promise<{ seconds: number; events: number }> {
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

const stats = (xs: number[]) => ({
  n: xs.length,
  p50: round(quantile(xs, 0.5), 1),
  p95: round(quantile(xs, 0.95), 1),
  p99: round(quantile(xs, 0.99), 1),
  max: round(quantile(xs, 1), 1),
});

export async function capacityRun(o: CapacityOptions) {
  const say = o.log ?? log;
  const planned = plan(o);
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-capacity-"));
  const redisPort = await pickPort();
  const qstash = { publish: {} as Record<string, number>, attempts: {} as Record<string, number> };
  const appEvents: Record<string, number> = {};
  /** The first warnings and errors the app logged (event and error only: no prompt is logged). */
  const problems: string[] = [];
  let counting = false;
  const count = (m: Record<string, number>, k: string) => {
    m[k] = (m[k] ?? 0) + 1;
  };
  const stack: Stack = await startStack({
    ports: { ...ANY_FREE_PORTS, redisServer: redisPort },
    dataDir,
    reset: true,
    // QStash's retry backoff at 1/100 (a 503's Retry-After: 10 s waits 0.1 s); notBefore (a
    // provider wait) stays real time.
    timeScale: 0.01,
    sweepEverySeconds: 60,
    // Flow Control sized for this scale, as an operator would size it for a provider tier that
    // serves 10 jobs a second with room for the 429s' requeues (the defaults, 1 per 3 s, are a
    // tier-1 account's; CAPACITY.md, "Where it breaks"): CAPACITY_FLOW_* override.
    env: {
      QSTASH_FLOW_PARALLELISM: process.env.CAPACITY_FLOW_PARALLELISM ?? "200",
      QSTASH_FLOW_RATE: process.env.CAPACITY_FLOW_RATE ?? "15",
      QSTASH_FLOW_PERIOD_SECONDS: "1",
    },
    log: (line) => {
      if (!counting) return;
      const pub = /publish \S+ POST \S+\/api\/([a-z/]+)/.exec(line);
      if (pub) return count(qstash.publish, pub[1] as string);
      const del = /deliver \S+ retried=\d+ → (\S+) \S+\/api\/([a-z/]+)/.exec(line);
      if (del) return count(qstash.attempts, `${del[2]} ${del[1]}`);
      const ev = /"event":"([a-z_]+)"/.exec(line);
      if (ev) count(appEvents, ev[1] as string);
      if (ev && /"level":"(warn|error)"/.test(line) && problems.length < 20)
        problems.push(line.slice(0, 400));
    },
  });
  try {
    const { sql } = stack;
    await sql.query("alter system set track_functions = 'all'");
    await sql.query("select pg_reload_conf()");
    say(`  capacity: stack up in ${stack.startupMs} ms; loading ${o.preload} finished jobs`);
    const loaded = await preload(sql, o.preload);
    say(`  capacity: loaded ${o.preload} jobs and ${loaded.events} events in ${loaded.seconds} s`);

    // The run's users: one per free job (1 a day), pro and team users with a few jobs each,
    // spread so one user's jobs are minutes apart (plan limits and the rate limit are not the
    // point here; the refusals they cause are still counted).
    const byPlan = { free: 0, pro: 0, team: 0 };
    for (const j of planned) byPlan[j.plan]++;
    const users: Record<Plan, string[]> = {
      free: await createUsers(sql, Math.max(1, byPlan.free), "free"),
      pro: await createUsers(sql, Math.max(1, Math.ceil(byPlan.pro / 3)), "pro"),
      team: await createUsers(sql, Math.max(1, Math.ceil(byPlan.team / 3)), "team"),
    };
    const tokens = new Map<string, string>();
    for (const id of Object.values(users).flat())
      tokens.set(id, await stack.auth.mint({ userId: id, expiresInSeconds: 4 * 3600 }));
    const next = { free: 0, pro: 0, team: 0 };
    const userFor = (p: Plan) => users[p][next[p]++ % users[p].length] as string;

    await sleep(o.settleMs ?? 11_000);
    const r0 = await redisCommands(redisPort);
    const d0 = await dbSnapshot(sql);
    const m0 = stack.model.stats();
    counting = true;

    const enqueueMs: number[] = [];
    const replies: Record<string, number> = {};
    const sentAt = new Map<string, number>();
    const cancels: Record<string, number> = {};
    const polls: Promise<void>[] = [];
    let followed = 0;
    const inflight = new Set<Promise<void>>();
    const api = (token: string, path: string, init: RequestInit = {}) =>
      fetch(`${stack.urls.app}${path}`, {
        ...init,
        headers: {
          authorization: `Bearer ${token}`,
          ...(init.body ? { "content-type": "application/json" } : {}),
        },
      });
    const cancel = async (token: string, id: string, what: string) => {
      const res = await api(token, `/api/jobs/${id}`, { method: "DELETE" });
      await res.arrayBuffer();
      count(cancels, `${what} ${res.status}`);
    };
    const follow = (token: string, id: string, j: Planned) =>
      new Promise<void>((resolve) => {
        let last = "";
        let seen: { phase: string; partialOutput?: string | null } | undefined;
        let canceled = false;
        const poller = createPoller({
          pace: () => paceOf(seen),
          tick: async () => {
            const res = await api(token, `/api/jobs/${id}`);
            if (res.status !== 200) {
              await res.arrayBuffer();
              return "same";
            }
            const job = ((await res.json()) as { job: Record<string, unknown> }).job;
            seen = job as typeof seen;
            if (["succeeded", "failed", "canceled"].includes(String(job.status))) {
              resolve();
              return "stop";
            }
            if (j.scenario === "cancel_running" && !canceled && job.partialOutput) {
              canceled = true;
              await cancel(token, id, "running");
            }
            const now = `${job.phase}|${String(job.partialOutput ?? "").length}`;
            const changed = now !== last;
            last = now;
            return changed ? "changed" : "same";
          },
        });
        poller.start();
      });

    const started = performance.now();
    say(`  capacity: ${planned.length} enqueues over ${o.seconds} s at ${o.rate}/s`);
    let lastReport = started;
    for (const [i, j] of planned.entries()) {
      const wait = started + j.at - performance.now();
      if (wait > 0) await sleep(wait);
      const one = (async () => {
        try {
          const userId = userFor(j.plan);
          const token = tokens.get(userId) as string;
          if (j.inject429) stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 2 });
          const t0 = performance.now();
          const sent = Date.now();
          const res = await api(token, "/api/jobs", {
            method: "POST",
            body: JSON.stringify(body(j, i)),
          });
          const reply = (await res.json().catch(() => null)) as {
            job?: { id: string };
            error?: { code: string };
          } | null;
          enqueueMs.push(performance.now() - t0);
          count(replies, `${res.status}${reply?.error ? ` ${reply.error.code}` : ""}`);
          const id = reply?.job?.id;
          if (res.status !== 202 || !id) return;
          sentAt.set(id, sent);
          if (j.scenario === "cancel_queued") await cancel(token, id, "queued");
          if (j.follow) {
            followed++;
            polls.push(follow(token, id, j));
          }
        } catch (error) {
          // A request that never got an answer (the machine overloaded): counted, not fatal.
          count(
            replies,
            `no answer (${(error as Error).cause ? String((error as { cause: { code?: string } }).cause.code) : (error as Error).message})`,
          );
        }
      })();
      inflight.add(one);
      void one.finally(() => inflight.delete(one));
      if (performance.now() - lastReport > 30_000) {
        lastReport = performance.now();
        const { rows } = await sql.query<{ n: number }>(
          "select count(*)::int n from public.generation_jobs where status in ('queued', 'running')",
        );
        say(
          `  capacity: ${Math.round((performance.now() - started) / 1000)} s, ${i + 1} sent, ${rows[0]?.n} active, enqueue p50 ${round(quantile(enqueueMs, 0.5), 1)} ms`,
        );
      }
    }
    await Promise.all([...inflight]);
    const loadSeconds = round((performance.now() - started) / 1000, 1);

    // The drain: every job the page follows ends, QStash has nothing left, then one sweep.
    const drainDeadline = performance.now() + (o.drainSeconds ?? 300) * 1000;
    const activeRun = async () =>
      (
        await sql.query<{ n: number }>(
          "select count(*)::int n from public.generation_jobs where status in ('queued', 'running')",
        )
      ).rows[0]?.n ?? -1;
    while (performance.now() < drainDeadline && (await activeRun()) > 0) await sleep(500);
    await stack.qstash
      .waitIdle(Math.max(1_000, drainDeadline - performance.now()))
      .catch(() => undefined);
    // The final sweep, as the cron would run it again while it reports more to do (bounded).
    let sweep = await stack.sweep();
    for (let i = 0; i < 20 && (sweep.body as { more?: boolean } | null)?.more === true; i++)
      sweep = await stack.sweep();
    // Still active after the drain: within their bounds (a lease not yet expired, a provider
    // wait) or past them. Past a bound after the final sweep is stuck (docs/DESIGN.md#invariant-5-nothing-stuck):
    // a running job past its lease and the sweeper's grace, a queued one undelivered past
    // SWEEP_UNDELIVERED_AFTER_SECONDS, any active one past JOB_MAX_AGE_SECONDS.
    const active = await sql.query<{ id: string; status: string; age_s: number }>(
      `select id, status, extract(epoch from now() - created_at)::int age_s
       from public.generation_jobs where status in ('queued', 'running')`,
    );
    const env = (name: string, fallback: number) => Number(stack.env[name] ?? fallback);
    const stuck = await sql.query<{ id: string; status: string; age_s: number }>(
      `select id, status, extract(epoch from now() - created_at)::int age_s
       from public.generation_jobs
       where (status = 'running' and lease_expires_at + make_interval(secs => $1) < now())
          or (status = 'queued' and coalesce(resume_at, queued_at) + make_interval(secs => $2) < now())
          or (status in ('queued', 'running') and created_at + make_interval(secs => $3) < now())`,
      [
        env("SWEEP_LEASE_GRACE_SECONDS", env("WORKER_MAX_DURATION_SECONDS", 300)),
        env("SWEEP_UNDELIVERED_AFTER_SECONDS", 900),
        env("JOB_MAX_AGE_SECONDS", 10_800),
      ],
    );
    const drift = await sql.query("select * from public.quota_drift");
    await sleep(o.settleMs ?? 11_000);
    counting = false;
    const d1 = await dbSnapshot(sql);
    const r1 = await redisCommands(redisPort);
    const m1 = stack.model.stats();

    const ids = [...sentAt.keys()];
    const { rows: ended } = await sql.query<{
      id: string;
      status: string;
      failure_reason: string | null;
      refund_withheld: string | null;
      kind: string;
      attempts: number;
      hits: number;
      finished_ms: string | null;
    }>(
      `select id, status, failure_reason, refund_withheld, kind, attempts,
         provider_quota_hits hits, (extract(epoch from finished_at) * 1000)::bigint::text finished_ms
       from public.generation_jobs where id = any($1::uuid[])`,
      [ids],
    );
    const endToEndMs: number[] = [];
    const byStatus: Record<string, number> = {};
    for (const r of ended) {
      count(
        byStatus,
        `${r.status}${r.failure_reason ? ` (${r.failure_reason})` : ""}${r.refund_withheld ? ` withheld ${r.refund_withheld}` : ""}`,
      );
      if (r.finished_ms !== null)
        endToEndMs.push(Number(r.finished_ms) - (sentAt.get(r.id) as number));
    }
    const accepted = ids.length;
    const per = (n: number, digits = 2) => round(n / Math.max(1, accepted), digits);
    const writes = Object.fromEntries(
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
    const dbCalls: Record<string, number> = {};
    let dbTotal = 0;
    for (const fn of RPC_FUNCTIONS) {
      const n = (d1.functions[fn] ?? 0) - (d0.functions[fn] ?? 0);
      if (n > 0) {
        dbCalls[fn] = per(n, 3);
        dbTotal += n;
      }
    }
    const redis: Record<string, number> = {};
    let redisTotal = 0;
    for (const [cmd, n] of Object.entries(r1)) {
      const d = n - (r0[cmd] ?? 0);
      if (d > 0 && cmd !== "info") {
        redis[cmd] = per(d, 3);
        redisTotal += d;
      }
    }
    const requests = m1.requests;
    const answered = requests.slice(-Math.min(requests.length, m1.calls - m0.calls));
    const result = {
      at: new Date().toISOString(),
      options: { seconds: o.seconds, rate: o.rate, preload: o.preload, seed: o.seed ?? 1 },
      machine: machine(),
      preload: { jobs: o.preload, events: loaded.events, seconds: loaded.seconds },
      load: { planned: planned.length, seconds: loadSeconds, replies, cancels },
      latencyMs: { enqueue: stats(enqueueMs), endToEnd: stats(endToEndMs) },
      jobs: { accepted, ended: ended.length, followedByThePage: followed, byStatus },
      invariants: {
        driftRows: drift.rowCount ?? 0,
        activeAfterDrain: active.rows.length,
        stuck: stuck.rows.length,
        stuckJobs: stuck.rows.slice(0, 10),
        finalSweep: sweep.body,
      },
      perJob: {
        dbCalls: {
          total: per(dbTotal, 2),
          byFunction: dbCalls,
          // The page's reads, per job it followed (its poller ran from the 202 to the end).
          statusReadsPerFollowedJob: round(
            ((d1.functions.get_job ?? 0) - (d0.functions.get_job ?? 0)) / Math.max(1, followed),
            2,
          ),
        },
        transactions: per(d1.commits - d0.commits, 2),
        walBytes: per(Number(d1.walBytes - d0.walBytes), 0),
        writes,
        qstash: {
          published: Object.fromEntries(
            Object.entries(qstash.publish).map(([k, v]) => [k, per(v, 3)]),
          ),
          deliveryAttempts: Object.fromEntries(
            Object.entries(qstash.attempts).map(([k, v]) => [k, per(v, 3)]),
          ),
          billedMessages: per(
            Object.values(qstash.attempts).reduce((a, b) => a + b, 0),
            3,
          ),
        },
        redis: { total: per(redisTotal, 2), byCommand: redis },
        model: {
          calls: per(m1.calls - m0.calls, 3),
          completionTokens: per(m1.completionTokens - m0.completionTokens, 1),
          promptTokensPerAnsweredCall: round(
            answered.reduce((a, r) => a + r.promptTokens, 0) / Math.max(1, answered.length),
            1,
          ),
        },
        appEvents: Object.fromEntries(Object.entries(appEvents).map(([k, v]) => [k, per(v, 3)])),
      },
      problems,
    };
    say(
      `  capacity: ${accepted} jobs, enqueue p50/p99 ${result.latencyMs.enqueue.p50}/${result.latencyMs.enqueue.p99} ms, end to end ${result.latencyMs.endToEnd.p50}/${result.latencyMs.endToEnd.p99} ms, drift ${result.invariants.driftRows}, stuck ${result.invariants.stuck}`,
    );
    return result;
  } finally {
    await stack.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

export type CapacityResult = Awaited<ReturnType<typeof capacityRun>>;

/** The bench section: 10/s for 600 s over 1 M jobs; `--quick` 30 s over 100 k; env overrides. */
export async function runCapacity(opts: { quick: boolean }): Promise<CapacityResult> {
  const num = (name: string, fallback: number) => {
    const v = process.env[name];
    if (v === undefined || v === "") return fallback;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`${name} must be a positive number`);
    return n;
  };
  const result = await capacityRun({
    seconds: num("CAPACITY_SECONDS", opts.quick ? 30 : 600),
    rate: num("CAPACITY_RATE", 10),
    preload: num("CAPACITY_PRELOAD", opts.quick ? 100_000 : 1_000_000),
    // Long enough for a lease (330 s) to expire and the sweeper to end what a lost worker left.
    drainSeconds: num("CAPACITY_DRAIN_SECONDS", 420),
  });
  await writeResult("capacity", result);
  return result;
}

export function printCapacity(r: CapacityResult): string {
  const lat = table(
    ["latency (ms)", "n", "p50", "p95", "p99", "max"],
    [
      ["enqueue (POST /api/jobs)", ...Object.values(r.latencyMs.enqueue)],
      ["end to end (POST → finished_at)", ...Object.values(r.latencyMs.endToEnd)],
    ],
  );
  const status = table(
    ["final status", "jobs"],
    Object.entries(r.jobs.byStatus).sort((a, b) => b[1] - a[1]),
  );
  const writes = table(
    [
      "table (per job)",
      "rows inserted",
      "updated",
      "of them HOT",
      "index entries ≤",
      "heap bytes",
      "index bytes",
      "toast bytes",
    ],
    Object.entries(r.perJob.writes).map(([t, w]) =>
      w === null
        ? [t, null, null, null, null, null, null, null]
        : [
            t,
            w.inserted,
            w.updated,
            w.hotUpdated,
            w.indexEntriesAtMost,
            w.heapBytes,
            w.indexBytes,
            w.toastBytes,
          ],
    ),
  );
  const p = r.perJob;
  const lines = [
    `${r.jobs.accepted} jobs accepted of ${r.load.planned} planned at ${r.options.rate}/s for ${r.options.seconds} s over ${r.preload.jobs} preloaded jobs (${r.preload.events} events); replies ${JSON.stringify(r.load.replies)}; cancels ${JSON.stringify(r.load.cancels)}`,
    `quota_drift rows: ${r.invariants.driftRows}; after the drain and a final sweep: ${r.invariants.activeAfterDrain} jobs still active, ${r.invariants.stuck} of them past their bound (stuck)`,
    `per job: ${p.dbCalls.total} database calls ${JSON.stringify(p.dbCalls.byFunction)}; ${p.transactions} transactions; ${p.walBytes} WAL bytes; ${p.dbCalls.statusReadsPerFollowedJob} status reads per job the page followed (${r.jobs.followedByThePage})`,
    `per job: QStash published ${JSON.stringify(p.qstash.published)}, delivery attempts ${JSON.stringify(p.qstash.deliveryAttempts)} (${p.qstash.billedMessages} billed messages)`,
    `per job: Redis ${p.redis.total} commands ${JSON.stringify(p.redis.byCommand)}`,
    `per job: model ${p.model.calls} calls, ${p.model.completionTokens} completion tokens, ${p.model.promptTokensPerAnsweredCall} prompt tokens per answered call`,
  ];
  return `${lat}\n\n${status}\n\n${writes}\n\n${lines.join("\n")}`;
}
