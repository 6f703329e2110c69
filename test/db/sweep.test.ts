import { afterEach, describe, expect, test } from "vitest";
import { addSeconds, at, expectNoDrift, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { orgPlan } from "../support/organizations.ts";

// The sweeper touches every job in the database: this file gets a database of its own, and each
// test ends every job it left active, so the next test's sweeps see only their own.
const db = dbFixture({ fresh: true, noDrift: "never" });
const { svc, admin } = db;

afterEach(async () => {
  await expectNoDrift(admin);
  // leave no active job behind for the next test's sweeps (its clock may be later)
  await sweepAll(at("2100-01-01T00:00:00Z"), { p_max_republish: 0 });
  expect(
    (
      await admin.query(
        "select count(*)::int as n from public.generation_jobs where status in ('queued', 'running')",
      )
    ).rows[0].n,
  ).toBe(0);
});

const defaults = {
  p_batch_size: 100,
  p_lease_grace_seconds: 300,
  p_undelivered_after_seconds: 900,
  p_max_age_seconds: 10800,
  p_max_republish: 1,
};

async function enqueue(now: Date) {
  const user = await db.user("pro");
  const queued = await db.enqueued(user, { prompt: "p", now });
  return { user, id: queued.id as string };
}

async function sweepAll(now: Date, opts: Partial<typeof defaults> = {}) {
  const reports = [];
  for (;;) {
    const r = await rpc(svc, "sweep_jobs", { ...defaults, ...opts, p_now: now });
    reports.push(r);
    if (!r.more) return reports;
  }
}

async function job(id: string) {
  return (await admin.query("select * from public.generation_jobs where id = $1", [id])).rows[0];
}

describe("sweep_jobs", () => {
  test("a running job whose lease expired more than the grace ago is failed and refunded; within grace it is left", async () => {
    const T = at("2026-01-01T00:00:00Z");
    const j = await enqueue(T);
    await rpc(svc, "start_job", { p_job_id: j.id, p_lease_seconds: 90, p_now: T });
    const leaseEnd = addSeconds(T, 90);
    await sweepAll(addSeconds(leaseEnd, 299));
    expect((await job(j.id)).status).toBe("running");
    const [report] = await sweepAll(addSeconds(leaseEnd, 301));
    expect(report.failed).toEqual([
      { id: j.id, user_id: j.user, reason: "lease_expired", from_status: "running" },
    ]);
    expect(await job(j.id)).toMatchObject({ status: "failed", failure_reason: "lease_expired" });
    expect((await job(j.id)).refunded_at).not.toBeNull();
  });

  test("a queued job never delivered is republished once, then failed as never_delivered", async () => {
    const T = at("2026-01-02T00:00:00Z");
    const j = await enqueue(T);
    await sweepAll(addSeconds(T, 899));
    expect((await job(j.id)).publish_seq).toBe(1);
    const [first] = await sweepAll(addSeconds(T, 901));
    expect(first.republish.map((r: { id: string }) => r.id)).toEqual([j.id]);
    expect(first.republish[0]).toMatchObject({
      status: "queued",
      publish_seq: 2,
      republish_count: 1,
    });
    // the republished message is not delivered either
    const [second] = await sweepAll(addSeconds(T, 901 + 899));
    expect(second.republish).toEqual([]);
    const [third] = await sweepAll(addSeconds(T, 901 + 901));
    expect(third.failed).toEqual([
      { id: j.id, user_id: j.user, reason: "never_delivered", from_status: "queued" },
    ]);
    expect(await job(j.id)).toMatchObject({ status: "failed", failure_reason: "never_delivered" });
  });

  test("a job waiting for the provider is left alone until its resume time plus the window", async () => {
    const T = at("2026-01-03T00:00:00Z");
    const j = await enqueue(T);
    await rpc(svc, "start_job", { p_job_id: j.id, p_now: T });
    const resumeAt = addSeconds(T, 1800);
    await db.requeued(j.id, { resumeAt, now: T });
    const [report] = await sweepAll(addSeconds(resumeAt, 899));
    expect(report.republish).toEqual([]);
    expect(report.failed).toEqual([]);
    const [later] = await sweepAll(addSeconds(resumeAt, 901));
    expect(later.republish.map((r: { id: string }) => r.id)).toEqual([j.id]);
  });

  test("any active job older than the max age is failed, even with a live lease", async () => {
    const T = at("2026-01-04T00:00:00Z");
    const j = await enqueue(T);
    const late = addSeconds(T, 10800 + 1);
    await rpc(svc, "start_job", {
      p_job_id: j.id,
      p_lease_seconds: 90,
      p_now: addSeconds(late, -10),
    });
    const [report] = await sweepAll(late);
    expect(report.failed).toEqual([
      { id: j.id, user_id: j.user, reason: "max_age_exceeded", from_status: "running" },
    ]);
  });

  test("works in batches and says when more remain", async () => {
    const T = at("2026-01-05T00:00:00Z");
    const ids = [];
    for (let i = 0; i < 7; i++) ids.push((await enqueue(T)).id);
    const reports = await sweepAll(addSeconds(T, 10801), { p_batch_size: 3 });
    expect(reports.map((r) => r.failed.length)).toEqual([3, 3, 1]);
    expect(reports.map((r) => r.more)).toEqual([true, true, false]);
    const failed = reports.flatMap((r) => r.failed.map((f: { id: string }) => f.id));
    expect(new Set(failed)).toEqual(new Set(ids));
  });

  test("two sweepers at once share the work: every stale job ends once, one refund each", async () => {
    const T = at("2026-01-06T00:00:00Z");
    const ids = [];
    for (let i = 0; i < 40; i++) ids.push((await enqueue(T)).id);
    const now = addSeconds(T, 10801);
    const run = () => sweepAll(now, { p_batch_size: 5 });
    const [a, b] = await Promise.all([run(), run()]);
    const failed = [...a, ...b].flatMap((r) => r.failed.map((f: { id: string }) => f.id));
    expect(failed.sort()).toEqual([...ids].sort());
    const events = await admin.query(
      "select count(*)::int as n from public.job_events where job_id = any($1) and event = 'swept'",
      [ids],
    );
    expect(events.rows[0].n).toBe(40);
  });

  test("finished jobs are never touched", async () => {
    const T = at("2026-01-07T00:00:00Z");
    const j = await enqueue(T);
    await rpc(svc, "start_job", { p_job_id: j.id, p_now: T });
    await rpc(svc, "complete_job", { p_job_id: j.id, p_attempt: 1, p_output: "done", p_now: T });
    const reports = await sweepAll(addSeconds(T, 100000));
    expect(reports.flatMap((r) => r.failed).filter((f: { id: string }) => f.id === j.id)).toEqual(
      [],
    );
    expect((await job(j.id)).status).toBe("succeeded");
  });
});

describe("sweeps that overlap", () => {
  test("two sweeps at once over two users' jobs, in opposite orders: no deadlock, each job ended once", async () => {
    // A sweep's walk locks its rows ten at a time (plpgsql fetches a loop's rows in tens), so
    // the second sweep takes the next ten. The first ten start with u1's job, the next ten with
    // u2's: the sweeps reach the users' counter rows in opposite orders. A third connection holds
    // u1's counter while both start, which makes that happen on every run.
    const t0 = at("2032-05-01T00:00:00Z");
    const plan = await orgPlan(admin, "sweep_overlap", { units: 1000, maxActive: 20 });
    const [u1, u2] = [await db.user(plan), await db.user(plan)];
    const order = [...Array(5).fill([u1, u2]).flat(), ...Array(5).fill([u2, u1]).flat()];
    const ids: string[] = [];
    for (const [i, u] of order.entries())
      ids.push((await db.enqueued(u, { now: addSeconds(t0, i) })).id);
    const late = addSeconds(t0, defaults.p_max_age_seconds + 60);
    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const blocker = await admin.connect();
    let settled: PromiseSettledResult<unknown>[];
    try {
      await blocker.query("begin");
      await blocker.query("select from public.quota_usage where user_id = $1 for update", [u1]);
      const first = rpc(svc, "sweep_jobs", { ...defaults, p_now: late });
      await pause(150);
      const second = rpc(svc, "sweep_jobs", { ...defaults, p_now: late });
      await pause(300);
      await blocker.query("commit");
      settled = await Promise.allSettled([first, second]);
    } finally {
      blocker.release();
    }
    expect(settled.filter((r) => r.status === "rejected")).toEqual([]);
    const { rows } = await admin.query(
      `select count(*)::int as failed,
              count(*) filter (where refunded_at is not null)::int as refunded
       from public.generation_jobs where id = any($1) and failure_reason = 'max_age_exceeded'`,
      [ids],
    );
    expect(rows[0]).toEqual({ failed: 20, refunded: 20 });
  });
});
