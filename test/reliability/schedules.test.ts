/**
 * Property-based schedules (docs/RELIABILITY.md): random interleavings of enqueues by several users
 * on both plans, deliveries (duplicate, out of order, early), every model outcome, cancels, failure
 * callbacks (also twice, also while the worker runs), sweeps (also two at once), clock jumps and a
 * fault at any boundary, each run on the REAL database (this file's own copy; transitions called
 * straight through pg, see test/support/sim.ts), then settled and checked.
 *
 * QUOTA_JOBS_PROPERTY_RUNS=5000 npm run test:nightly   (default here: 200 runs)
 * QUOTA_JOBS_PROPERTY_SEED=<seed> replays a reported failure.
 */
import fc from "fast-check";
import type pg from "pg";
import { describe, expect, test } from "vitest";
import { useApi } from "../support/api.ts";
import { servicePool } from "../support/db.ts";
import { freePort } from "../support/ports.ts";
import { schedule } from "../support/schedules.ts";
import {
  emptySimStats,
  InvariantError,
  runningCancelTally,
  Sim,
  type SimStats,
} from "../support/sim.ts";

const RUNS = Number(process.env.QUOTA_JOBS_PROPERTY_RUNS ?? 200);
/** Runs per chunk: each chunk starts on emptied tables (see `startChunk`). */
const CHUNK = Number(process.env.QUOTA_JOBS_PROPERTY_CHUNK ?? 250);
const SEED = process.env.QUOTA_JOBS_PROPERTY_SEED;

const app = useApi();
const service = servicePool(12);

/**
 * Every run leaves its users' jobs and events behind, all terminal. Left there, they cost every
 * later run: each transition turns index entries dead (a job leaves the partial "active"
 * indexes), and the sweeper's and the claim's index scans walk them until a vacuum that
 * autovacuum runs far less often than a run ends; the nightly size slowed with every chunk. So
 * each chunk starts on emptied tables (TRUNCATE gives them new files: no dead entries, no
 * bloat), which is a fresh database for what a run touches. Each run was already checked when
 * it ended, so nothing a later check needs is lost.
 */
async function startChunk(admin: pg.Pool): Promise<void> {
  const client = await admin.connect();
  try {
    await client.query("set lock_timeout = '10s'");
    await client.query(
      "truncate public.job_events, public.generation_jobs, public.quota_usage, public.user_plans, auth.users",
    );
    await client.query("analyze public.generation_jobs, public.job_events, public.quota_usage");
  } finally {
    client.release();
  }
}

/** fast-check reports the shrunk failure; the first one (before shrinking) is printed too. */
async function assertReportingFirst(first: () => string | undefined, run: Promise<void>) {
  try {
    await run;
  } catch (error) {
    process.stderr.write(`[reliability] first failing schedule:\n${first()}\n`);
    throw error;
  }
}

/** A simulator on an empty Redis, with a closed port for the model that cannot be reached. */
async function freshSim(): Promise<Sim> {
  await app.redis.flushall();
  return new Sim({
    service,
    admin: app.admin,
    env: app.env,
    deadModelUrl: `http://127.0.0.1:${await freePort()}/v1`,
  });
}

describe("random schedules on the real database", () => {
  test(
    `${RUNS} schedules with faults: no drift, all terminal, each failed/canceled job refunded once (a running cancel past the plan's bound: never, and only then), limits held, one model call per claim`,
    async () => {
      const deadModelUrl = `http://127.0.0.1:${await freePort()}/v1`;
      const totals: SimStats & { runs: number; rounds: number; jobs: number } = {
        runs: 0,
        rounds: 0,
        jobs: 0,
        ...emptySimStats(),
      };
      const started = Date.now();
      let clock = new Date();
      let firstFailure: string | undefined;
      let chunkStarted = Date.now();
      let lastChunkAt = 0;
      const chunkMs: number[] = [];
      await assertReportingFirst(
        () => firstFailure,
        fc.assert(
          fc.asyncProperty(schedule(), async (s) => {
            if (totals.runs > 0 && totals.runs % CHUNK === 0 && totals.runs !== lastChunkAt) {
              lastChunkAt = totals.runs;
              chunkMs.push(Date.now() - chunkStarted);
              process.stderr.write(
                `[reliability] schedules: ${totals.runs} passed, last ${CHUNK} in ${chunkMs.at(-1)} ms\n`,
              );
              await startChunk(app.admin);
              chunkStarted = Date.now();
            }
            await app.redis.flushall();
            app.logs.length = 0;
            const sim = new Sim({
              service,
              admin: app.admin,
              env: app.env,
              deadModelUrl,
              startAt: clock,
            });
            try {
              await sim.run(s);
              await sim.check();
            } catch (error) {
              const message = `${(error as Error).message}\n--- journal ---\n${sim.journal.join("\n")}`;
              firstFailure ??= `${JSON.stringify(s)}\n${message}`;
              throw new Error(message);
            } finally {
              clock = new Date(sim.clock.getTime() + 86_400_000);
            }
            totals.runs++;
            totals.rounds += s.rounds.length;
            totals.jobs += sim.jobs.flat().length;
            for (const k of [
              "invocations",
              "viaEdge",
              "killed",
              "threw",
              "faultsFired",
              "modelCalls",
            ] as const)
              totals[k] += sim.stats[k];
            for (const [k, v] of Object.entries(sim.stats.byCommand))
              totals.byCommand[k] = (totals.byCommand[k] ?? 0) + v;
          }),
          { numRuns: RUNS, ...(SEED ? { seed: Number(SEED) } : {}) },
        ),
      );
      chunkMs.push(Date.now() - chunkStarted);
      process.stderr.write(
        `[reliability] schedules: ${JSON.stringify({ ...totals, runningCancels: runningCancelTally, ms: Date.now() - started, chunkMs })}\n`,
      );
      expect(totals.runs).toBeGreaterThanOrEqual(RUNS);
    },
    Math.max(120_000, RUNS * 4_000),
  ); // ~0.25 s a run alone, ~0.7 s with the nightly's chunks side by side on a busy 2-core machine

  test("the edge has teeth: a bug behind POST /api/worker (a 500) fails the run even though lib/ settles the job", async () => {
    const sim = await freshSim();
    const start = sim.workerDeps.jobs.start;
    let broken = true;
    sim.workerDeps.jobs = {
      ...sim.workerDeps.jobs,
      start: async (id, o) => {
        if (broken) {
          broken = false;
          throw new TypeError("Cannot read properties of undefined (reading 'outcome')");
        }
        return start(id, o);
      },
    };
    await sim.run({
      users: ["pro"],
      rounds: [
        [{ t: "enqueue", user: 0, key: null, edge: true }],
        [{ t: "deliver", msg: 0, model: "ok", duplicate: false, early: false, edge: true }],
      ],
    });
    await expect(sim.check()).rejects.toThrow(/POST \/api\/worker answered 500/);
  });

  test("the check has teeth: a worker that runs the model on a duplicate delivery (already_running) is caught", async () => {
    const sim = await freshSim();
    const start = sim.workerDeps.jobs.start;
    sim.workerDeps.jobs = {
      ...sim.workerDeps.jobs,
      start: async (id, o) => {
        const r = await start(id, o);
        return r.outcome === "already_running"
          ? { ...r, outcome: "started", max_output_tokens: 512 }
          : r;
      },
    };
    await sim.run({
      users: ["pro"],
      rounds: [
        [{ t: "enqueue", user: 0, key: null }],
        [
          {
            t: "deliver",
            msg: 0,
            model: "ok",
            duplicate: false,
            early: false,
            fault: { at: "model", action: "kill-after" },
          },
        ],
        [{ t: "deliver", msg: 0, model: "ok", duplicate: false, early: false }],
      ],
    });
    await expect(sim.check()).rejects.toThrow(InvariantError);
    await expect(sim.check()).rejects.toThrow(/2 model calls for 1 claims/);
  });
});
