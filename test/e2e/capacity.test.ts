/**
 * The capacity bench (bench/capacity.ts, docs/CAPACITY.md) kept from rotting: 10 s of it at 2
 * enqueues a second over 2,000 preloaded jobs, through the whole local stack. Whatever the mix
 * did, no drift and nothing stuck after the drain and a final sweep, and every accepted job
 * ended with its work counted at the services. The bench itself runs ~15 s; starting the stack
 * (Vercel's build checked, Postgres migrated) takes 10-40 s more on a shared machine.
 */
import { expect, test } from "vitest";
import { capacityRun } from "../../bench/capacity.ts";

test("capacity bench, 10 s at 2/s: every job ends, no drift, nothing stuck, per-job counts measured", async () => {
  const r = await capacityRun({
    seconds: 10,
    rate: 2,
    preload: 2_000,
    seed: 7,
    drainSeconds: 60,
    settleMs: 1_500,
    log: () => {},
  });
  expect(r.preload.events).toBe(6_000);
  expect(r.jobs.accepted).toBeGreaterThan(5);
  expect(r.jobs.ended).toBe(r.jobs.accepted);
  expect(r.invariants.driftRows).toBe(0);
  expect(r.invariants.stuck).toBe(0);
  expect(r.invariants.activeAfterDrain).toBe(0);
  expect(Object.keys(r.load.replies).filter((k) => k.startsWith("5"))).toEqual([]);
  // Each accepted job was enqueued once over PostgREST, and its worker message published.
  expect(r.perJob.dbCalls.byFunction.enqueue_job).toBeGreaterThanOrEqual(1);
  expect(r.perJob.qstash.published.worker).toBeGreaterThanOrEqual(1);
  expect(r.perJob.model.calls).toBeGreaterThan(0);
  expect(r.perJob.writes.job_events?.inserted).toBeGreaterThanOrEqual(2);
  expect(r.latencyMs.endToEnd.n).toBe(r.jobs.accepted);
}, 240_000);
