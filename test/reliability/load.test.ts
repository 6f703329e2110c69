/**
 * Load on the whole local stack over HTTP (docs/RELIABILITY.md): 1,000 concurrent enqueues from 100
 * users (half free, half pro) at once, QStash's deliveries running the jobs meanwhile, and cancels
 * sent while the burst is still in flight. Then: no 5xx, every job ends, no drift, and the limits
 * held at every moment (replayed from job_events, test/support/sim.ts).
 *
 * Loopback only, free ports, bounded: the suite runs 1,000 requests; QUOTA_JOBS_LOAD_USERS and
 * QUOTA_JOBS_LOAD_PER_USER change the size (npm run test:load runs 200 users x 10).
 *
 * The latencies are CPU queueing on the machine the test shares (docs/RELIABILITY.md#load), so
 * the figures say what else the machine did during the burst (`machine`): the load average at
 * its start and the CPU seconds of this run's processes, of everyone else's, and stolen. They
 * also count the rate-limit checks that failed open (Redis slower than the limiter's 1 s).
 */
import { expect, test } from "vitest";
import { machineCpu } from "../support/machine-cpu.ts";
import { checkInvariants } from "../support/sim.ts";
import { apiAs, expectAllSettled, useStack } from "../support/stack.ts";

const FULL = process.env.QUOTA_JOBS_LOAD_FULL === "1";
const USERS = Number(process.env.QUOTA_JOBS_LOAD_USERS ?? (FULL ? 200 : 100));
const PER_USER = Number(process.env.QUOTA_JOBS_LOAD_PER_USER ?? 10);

const fx = useStack({ env: { RATE_LIMIT_REQUESTS: "1000" }, timeScale: 0.01 });

const percentile = (sorted: number[], p: number) =>
  sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

test(`${USERS * PER_USER} concurrent enqueues from ${USERS} users, deliveries and cancels in flight: no 5xx, limits held, every job ends, no drift`, async () => {
  const stack = fx.stack;
  const users = await Promise.all(
    Array.from({ length: USERS }, (_, i) => stack.signIn({ plan: i % 2 === 0 ? "free" : "pro" })),
  );
  const byStatus: Record<string, number> = {};
  const latencies: number[] = [];
  const count = (what: string) => {
    byStatus[what] = (byStatus[what] ?? 0) + 1;
  };
  const timed = async <T>(fn: () => Promise<T>) => {
    const t = performance.now();
    const r = await fn();
    latencies.push(performance.now() - t);
    return r;
  };

  const cpu = machineCpu();
  const started = performance.now();
  const cancels: Promise<unknown>[] = [];
  await Promise.all(
    users.flatMap((u, ui) => {
      const api = apiAs(stack, u.accessToken);
      return Array.from({ length: PER_USER }, async (_, k) => {
        const res = await timed(() => api.enqueue(`load ${ui}/${k}`));
        count(`POST ${res.status} ${res.body?.error?.code ?? ""}`.trim());
        // Every third accepted job is canceled at once, while the burst is still running.
        if (res.status === 202 && k % 3 === 0) {
          cancels.push(
            timed(() => api.cancel(res.body.job.id)).then((c) => count(`DELETE ${c.status}`)),
          );
        }
      });
    }),
  );
  await Promise.all(cancels);
  const burstMs = performance.now() - started;
  const machine = cpu?.stop();

  await stack.qstash.waitIdle(60_000).catch(() => undefined);
  await expectAllSettled(stack, 60_000);
  const settledMs = performance.now() - started;

  const sorted = [...latencies].sort((a, b) => a - b);
  const figures = {
    requests: latencies.length,
    burstMs: Math.round(burstMs),
    requestsPerSecond: Math.round((latencies.length / burstMs) * 1000),
    p50Ms: Math.round(percentile(sorted, 50)),
    p99Ms: Math.round(percentile(sorted, 99)),
    maxMs: Math.round(sorted.at(-1) ?? 0),
    allJobsEndedMs: Math.round(settledMs),
    byStatus,
    rateLimitFailedOpen: fx.logs.filter((line) => line.includes('"event":"rate_limit_open"'))
      .length,
    ...(machine ? { machine } : {}),
  };
  const { rows } = await stack.sql.query<{ status: string; n: number }>(
    "select status, count(*)::int as n from public.generation_jobs group by status order by status",
  );
  process.stderr.write(
    `[reliability] load: ${JSON.stringify({ ...figures, jobs: Object.fromEntries(rows.map((r) => [r.status, r.n])) })}\n`,
  );
  // Another workload on the machine moves p50 more than any change here does: say so.
  if (machine && machine.cpuSecondsOthers > 0.2 * machine.seconds)
    process.stderr.write(
      `[reliability] load: other processes used ${machine.cpuSecondsOthers} CPU s of the ${machine.cores} cores during the ${machine.seconds} s burst; these latencies are not comparable with a quiet run's\n`,
    );

  expect(Object.keys(byStatus).filter((k) => / 5\d\d/.test(k))).toEqual([]);
  expect(
    Object.entries(byStatus)
      .filter(([k]) => k.startsWith("POST 202"))
      .reduce((n, [, v]) => n + v, 0),
  ).toBeGreaterThanOrEqual(USERS / 2); // every free user got their one unit, at least
  await checkInvariants(
    stack.sql,
    users.map((u) => u.userId),
  );
}, 180_000);
