/**
 * End to end: the function dies mid-call. The app runs in a process of its own, killed with
 * SIGKILL while the model is answering (as Vercel ends an instance at maxDuration or on a
 * crash), then started again. Whoever notices first (QStash's retry reclaiming the expired
 * lease, the failure callback, or the sweeper) ends the job; it is never left running and is
 * refunded at most once.
 */
import { expect, test } from "vitest";
import { type apiAs, isTerminal, newUser, newUserJob, until, useStack } from "../support/stack.ts";

const LEASE_SECONDS = 5;
const fixture = useStack({
  env: {
    WORKER_MAX_DURATION_SECONDS: "4",
    MODEL_TIMEOUT_MS: "3500",
    JOB_LEASE_SECONDS: String(LEASE_SECONDS),
    SWEEP_LEASE_GRACE_SECONDS: "0",
  },
  // The failure callback's own retries (18 s at this scale) may still be pending at the end.
  waitIdle: false,
});

/** Polls the database's own clock until the job's claim has lapsed. */
function waitLeaseExpired(jobId: string) {
  return until(
    async () =>
      (
        await fixture.stack.sql.query<{ expired: boolean }>(
          "select lease_expires_at < now() as expired from public.generation_jobs where id = $1",
          [jobId],
        )
      ).rows[0]?.expired,
    (expired) => expired === true,
    {
      timeoutMs: (LEASE_SECONDS + 5) * 1000,
      intervalMs: 100,
      what: `the lease of ${jobId} to expire`,
    },
  );
}

/** Waits until the job runs AND its model call has reached the fake model: truly mid-call. */
async function waitMidCall(api: ReturnType<typeof apiAs>, jobId: string, modelCalls: () => number) {
  const job = await api.waitRunning(jobId);
  await until(
    async () => modelCalls(),
    (n) => n > 0,
    { timeoutMs: 10_000, what: "the model call to start" },
  );
  return job as { startedAt: string };
}

test("the worker process killed mid-call: the job ends (reclaimed, failure callback or sweeper), refunded at most once", async () => {
  const { stack, api, id, modelCalls, refundEvents } = await newUserJob(
    fixture,
    "[fake:slow:3000] the function dies while I am written",
  );
  const running = await waitMidCall(api, id, modelCalls);

  await stack.killApp();
  await stack.restartApp();

  // Poll as the page would; once the lease has expired, run the sweeper as cron would.
  const leaseOver = Date.parse(running.startedAt) + LEASE_SECONDS * 1000;
  let swept = false;
  const job = await until(
    async () => {
      const current = (await api.job(id)).body.job;
      if (!isTerminal(current.status) && Date.now() > leaseOver + 200) {
        const r = await stack.sweep();
        expect(r.status).toBe(200);
        swept = true;
      }
      return current;
    },
    (j) => isTerminal(j.status),
    { timeoutMs: 20_000, intervalMs: 100, what: `job ${id} to end after the crash` },
  );

  if (job.status === "succeeded") {
    // Reclaimed after the lease by a redelivery: a second claim, no refund.
    expect(job.attempts).toBeGreaterThanOrEqual(2);
    expect(job.quotaRefunded).toBe(false);
    expect(await refundEvents()).toBe(0);
    expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
  } else {
    expect(job.status).toBe("failed");
    expect(["delivery_failed", "lease_expired"]).toContain(job.failureReason);
    if (job.failureReason === "lease_expired") expect(swept).toBe(true);
    expect(job.quotaRefunded).toBe(true);
    expect(await refundEvents()).toBe(1);
    expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
  }
  // Whatever arrives late (a callback retry, another sweep) changes nothing.
  await stack.sweep();
  expect((await api.job(id)).body.job).toMatchObject({ status: job.status });
  expect(await refundEvents()).toBeLessThanOrEqual(1);
});

test("killed mid-call and QStash's messages lost too: the sweeper ends it after the lease, refunded once", async () => {
  fixture.stack.model.failNext("slow", 1, { delayMs: 3_000 });
  const { stack, api, id, modelCalls, events, refundEvents } = await newUserJob(
    fixture,
    "Nobody will come back for me",
  );
  await waitMidCall(api, id, modelCalls);

  // The instance dies and the dev QStash (in memory, like the real one) loses its messages.
  await stack.killApp();
  await stack.stopQStash();
  await stack.startQStash();
  await stack.restartApp();
  expect((await api.job(id)).body.job.status).toBe("running");

  await waitLeaseExpired(id);
  const sweep = await stack.sweep();
  expect(sweep.body).toMatchObject({ failed: { lease_expired: 1 } });
  expect((await api.job(id)).body.job).toMatchObject({
    status: "failed",
    failureReason: "lease_expired",
    quotaRefunded: true,
  });
  expect(await refundEvents()).toBe(1);
  expect(await events()).toEqual(["enqueued", "started", "swept"]);
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
});

test("killed mid-call, redelivered after the lease expired: reclaimed, succeeded, no refund", async () => {
  fixture.stack.model.failNext("slow", 1, { delayMs: 3_000 });
  const { stack, api, id, modelCalls, events, refundEvents, redeliver } = await newUserJob(
    fixture,
    "Try me again later",
  );
  await waitMidCall(api, id, modelCalls);

  await stack.killApp();
  await stack.stopQStash(); // its retry and failure callback are gone with it
  await stack.startQStash();
  await stack.restartApp();

  // A redelivery before the lease ends must not call the model (the first claim may be alive).
  // The kill and the two restarts above took ~1.6 s of the 5 s lease on a quiet machine, several
  // on a loaded one: the lease is taken again from now, as long as a claim takes it, so the
  // redelivery below meets a live lease however long the restarts took.
  const renewed = await stack.sql.query(
    "update public.generation_jobs set lease_expires_at = now() + make_interval(secs => $2) where id = $1 and status = 'running' and attempts = 1",
    [id, LEASE_SECONDS],
  );
  expect(renewed.rowCount).toBe(1);
  await redeliver();
  await stack.qstash.waitIdle(5_000);
  expect((await api.job(id)).body.job).toMatchObject({ status: "running", attempts: 1 });
  expect(modelCalls()).toBe(1);

  await waitLeaseExpired(id);
  await redeliver();
  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({ status: "succeeded", attempts: 2, quotaRefunded: false });
  expect(modelCalls()).toBe(2);
  expect(await events()).toEqual(["enqueued", "started", "reclaimed", "completed"]);
  expect(await refundEvents()).toBe(0);
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
});

test("after the restart the app serves new jobs normally", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  const created = await api.enqueue("Life goes on");
  expect(created.status).toBe(202);
  expect(await api.waitTerminal(created.body.job.id)).toMatchObject({ status: "succeeded" });
});
