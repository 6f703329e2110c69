/**
 * The run's result: latency, the jobs' final states, the invariants after the drain, and what
 * each service did per accepted job (the difference of two snapshots, divided by the jobs).
 */
import type pg from "pg";
import type { FakeStats } from "../../dev/openai/index.ts";
import { machine, quantile, round } from "../support/util.ts";
import type { drain } from "./drain.ts";
import { count, type LoadResult } from "./load.ts";
import { callsPerJob, type DbSnapshot, redisPerJob, writesPerJob } from "./measure.ts";

const stats = (xs: number[]) => ({
  n: xs.length,
  p50: round(quantile(xs, 0.5), 1),
  p95: round(quantile(xs, 0.95), 1),
  p99: round(quantile(xs, 0.99), 1),
  max: round(quantile(xs, 1), 1),
});

/** The counters read at the services before the load and after the drain. */
export interface Snapshot {
  db: DbSnapshot;
  redis: Record<string, number>;
  model: FakeStats;
}

export interface ReportInput {
  o: { seconds: number; rate: number; preload: number; seed?: number };
  planned: number;
  loaded: { seconds: number; events: number };
  load: LoadResult;
  drained: Awaited<ReturnType<typeof drain>>;
  before: Snapshot;
  after: Snapshot;
  qstash: { publish: Record<string, number>; attempts: Record<string, number> };
  appEvents: Record<string, number>;
  problems: string[];
}

export async function report(sql: pg.Pool, input: ReportInput) {
  const { o, loaded, drained, qstash, appEvents, problems } = input;
  const { enqueueMs, replies, sentAt, cancels, followed, loadSeconds } = input.load;
  const { active, stuck, drift, sweep } = drained;
  const { db: d0, redis: r0, model: m0 } = input.before;
  const { db: d1, redis: r1, model: m1 } = input.after;
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
  const writes = writesPerJob(d0, d1, per);
  const { dbCalls, dbTotal } = callsPerJob(d0, d1, per);
  const { redis, redisTotal } = redisPerJob(r0, r1, per);
  const requests = m1.requests;
  const answered = requests.slice(-Math.min(requests.length, m1.calls - m0.calls));
  const result = {
    at: new Date().toISOString(),
    options: { seconds: o.seconds, rate: o.rate, preload: o.preload, seed: o.seed ?? 1 },
    machine: machine(),
    preload: { jobs: o.preload, events: loaded.events, seconds: loaded.seconds },
    load: { planned: input.planned, seconds: loadSeconds, replies, cancels },
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
  return result;
}
