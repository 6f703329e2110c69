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
 *
 * The phases are modules of bench/capacity/: plan.ts (the arrivals and the mix), measure.ts (the
 * services' counters, the preload), load.ts (the users and the enqueues), drain.ts (the drain,
 * the final sweep, the invariants) and report.ts (the result); this file runs them in order.
 */

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ANY_FREE_PORTS, pickPort } from "../dev/ports.ts";
import { type Stack, startStack } from "../dev/stack.ts";
import { drain } from "./capacity/drain.ts";
import { count, createRunUsers, sendLoad } from "./capacity/load.ts";
import { dbSnapshot, preload, redisCommands } from "./capacity/measure.ts";
import { plan } from "./capacity/plan.ts";
import { report, type Snapshot } from "./capacity/report.ts";
import { log, sleep, table, writeResult } from "./support/util.ts";

export { plan } from "./capacity/plan.ts";

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

/** What the services have counted so far: the database, Redis and the model. */
async function snapshot(stack: Stack, redisPort: number): Promise<Snapshot> {
  const redis = await redisCommands(redisPort);
  const db = await dbSnapshot(stack.sql);
  return { db, redis, model: stack.model.stats() };
}

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
    const users = await createRunUsers(sql, stack, planned);

    await sleep(o.settleMs ?? 11_000);
    const before = await snapshot(stack, redisPort);
    counting = true;
    const load = await sendLoad(stack, planned, o, users, say);
    const drained = await drain(stack, o.drainSeconds);
    await sleep(o.settleMs ?? 11_000);
    counting = false;
    const after = await snapshot(stack, redisPort);

    const result = await report(sql, {
      o,
      planned: planned.length,
      loaded,
      load,
      drained,
      before,
      after,
      qstash,
      appEvents,
      problems,
    });
    const accepted = result.jobs.accepted;
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
