/**
 * End to end, over HTTP, on the whole local stack: a job's life as the page sees it, with
 * QStash deliveries made by the stand-in and the fake model answering.
 */
import { expect, test } from "vitest";
import { newUserJob, useStack } from "../support/stack.ts";

const fixture = useStack();

test("happy path: enqueue → delivered → model → succeeded, output readable, 1 unit used", async () => {
  const { api, created, id, modelCalls, events } = await newUserJob(
    fixture,
    "Write a haiku about queues",
  );
  expect(created.status).toBe(202);
  expect(created.body.job).toMatchObject({ status: "queued", phase: "queued", attempts: 0 });
  expect(created.body.usage).toMatchObject({ plan: "pro", used: 1, active: 1 });

  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({
    status: "succeeded",
    phase: "succeeded",
    attempts: 1,
    quotaRefunded: false,
    failureReason: null,
  });
  expect(job.output).toContain("Write a haiku about queues");
  expect(modelCalls()).toBe(1);

  const usage = await api.usage();
  expect(usage.body).toMatchObject({ used: 1, active: 0 });
  const list = await api.list();
  expect(list.body.jobs.map((j: { id: string }) => j.id)).toEqual([job.id]);
  expect(await events()).toEqual(["enqueued", "started", "completed"]);
});

test("the same message delivered twice: one model call", async () => {
  // The model answers after 5 s: the job must be seen running and the second delivery reach
  // the app before then, a loaded machine's polls and round trips included.
  const { stack, api, id, modelCalls, events, redeliver } = await newUserJob(
    fixture,
    "[fake:slow:5000] a slow document",
  );
  await api.waitRunning(id);
  // A second delivery of {jobId} while the first still runs (QStash is at-least-once).
  await redeliver();
  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({ status: "succeeded", attempts: 1 });
  // And once more after it finished.
  await redeliver();
  await stack.qstash.waitIdle(10_000);

  expect(modelCalls()).toBe(1);
  expect((await api.job(id)).body.job).toMatchObject({ status: "succeeded", attempts: 1 });
  expect(fixture.logs.some((l) => l.includes('"already_running"') && l.includes(id))).toBe(true);
  expect(await events()).toEqual(["enqueued", "started", "completed"]);
});

test("cancel while the model runs: canceled, refunded once, the model call cut, nothing overwrites it", async () => {
  const { stack, api, id, modelCalls, events, refundEvents } = await newUserJob(
    fixture,
    "[fake:slow:5000] take your time",
  );
  await api.waitRunning(id);

  const canceled = await api.cancel(id);
  expect(canceled.status).toBe(200);
  expect(canceled.body).toMatchObject({
    quotaRefunded: true,
    job: { status: "canceled", quotaRefunded: true },
  });
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });

  // The worker's next progress write finds the job canceled and cuts the model call; what the
  // attempt consumed is appended to the history.
  await stack.qstash.waitIdle(10_000);
  expect(fixture.logs.some((l) => l.includes("model_stream_aborted") && l.includes(id))).toBe(true);
  const job = (await api.job(id)).body.job;
  expect(job).toMatchObject({ status: "canceled", output: null, quotaRefunded: true });
  expect(modelCalls()).toBe(1);
  expect(await refundEvents()).toBe(1);
  expect(await events()).toEqual(["enqueued", "started", "canceled", "attempt_usage"]);

  // A second cancel is refused and refunds nothing.
  const again = await api.cancel(id);
  expect(again.status).toBe(409);
  expect(again.body.error.code).toBe("already_finished");
  expect((await api.usage()).body.used).toBe(0);
});

test("provider 429 rate_limit_exceeded: waiting_for_provider with resumeAt, then succeeded", async () => {
  // The phase shows only until the resume time: 5 s, so a loaded machine's polls still see it.
  fixture.stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 5 });
  const { api, id, modelCalls, events } = await newUserJob(
    fixture,
    "Summarise the quarterly report",
  );
  const waiting = await api.waitFor(id, (j) => j.phase === "waiting_for_provider", "waiting");
  expect(waiting).toMatchObject({ status: "queued", providerQuotaHits: 1 });
  expect(Date.parse(waiting.resumeAt)).toBeGreaterThan(Date.now() - 1_000);

  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({
    status: "succeeded",
    attempts: 2,
    providerQuotaHits: 1,
    quotaRefunded: false,
  });
  expect(modelCalls()).toBe(2);
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
  expect(await events()).toEqual(["enqueued", "started", "requeued", "started", "completed"]);
});

test("cancel while queued (waiting for the provider): canceled, refunded once, never run again", async () => {
  // The job must be seen waiting and canceled before its message comes back at the resume
  // time: 5 s, so a loaded machine's polls and the cancel's round trip fit inside it.
  fixture.stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 5 });
  const { stack, api, id, modelCalls, events, refundEvents } = await newUserJob(
    fixture,
    "Draft a polite reminder",
  );
  await api.waitFor(id, (j) => j.phase === "waiting_for_provider", "waiting");

  const canceled = await api.cancel(id);
  expect(canceled.status).toBe(200);
  expect(canceled.body.job).toMatchObject({ status: "canceled", quotaRefunded: true });

  // The requeued message still arrives at its notBefore; the claim finds the job final.
  await stack.qstash.waitIdle(15_000);
  expect(modelCalls()).toBe(1);
  expect((await api.job(id)).body.job).toMatchObject({ status: "canceled", output: null });
  expect(await refundEvents()).toBe(1);
  expect(await events()).toEqual(["enqueued", "started", "requeued", "canceled"]);
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
});
