/**
 * The drain after the load: every job ends, QStash has nothing left, then the final sweep; what
 * is still active after it, what is stuck, and the quota_drift rows.
 */
import type { Stack } from "../../dev/stack.ts";
import { sleep } from "../support/util.ts";

export async function drain(stack: Stack, drainSeconds: number | undefined) {
  const { sql } = stack;
  // The drain: every job the page follows ends, QStash has nothing left, then one sweep.
  const drainDeadline = performance.now() + (drainSeconds ?? 300) * 1000;
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
  return { active, stuck, drift, sweep };
}
