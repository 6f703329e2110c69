/**
 * End to end, over HTTP, on the built artifact: the failure callback of a message a requeue
 * superseded arrives while the new message's worker runs the job. QStash's own timing (the old
 * message's last retry failing just then) is not something a test can steer, so the callback is
 * QStash's real failure-callback payload for the old message's body, published through the
 * QStash stand-in to /api/dlq, which delivers it signed, as QStash would.
 */
import { expect, test } from "vitest";
import { newUserJob, publishThroughQStash, until, useStack } from "../support/stack.ts";

const fixture = useStack();

test("an old message's failure callback during the new message's run is superseded: the job succeeds, 1 unit used, nothing refunded", async () => {
  // The first claim hits a provider 429 (requeued, a new message for 1 s later); the second
  // claim's model call takes 4 s, the window the old message's callback lands in.
  fixture.stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 1 });
  fixture.stack.model.failNext("slow", 1, { delayMs: 4_000 });
  const { stack, api, created, id, modelCalls, events } = await newUserJob(
    fixture,
    "Summarise the quarterly report",
  );
  expect(created.status).toBe(202);
  const running = await api.waitFor(
    id,
    (j) => j.status === "running" && j.attempts === 2,
    "the new message's claim",
  );
  expect(running).toMatchObject({ providerQuotaHits: 1 });
  const row = await stack.sql.query<{ publish_seq: number }>(
    "select publish_seq from public.generation_jobs where id = $1",
    [id],
  );
  expect(row.rows[0]?.publish_seq).toBe(2);

  // The old message, as the enqueue published it (`{"jobId","seq":1}`), failed its last retry.
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  await publishThroughQStash(stack, "/api/dlq", {
    status: 503,
    header: { "Content-Type": ["application/json"], "Retry-After": ["10"] },
    body: b64('{"error":{"code":"unavailable","message":"publish failed"}}'),
    retried: 1,
    maxRetries: 1,
    dlqId: `${Date.now()}-0`,
    sourceMessageId: "msg_the_old_one",
    url: `${stack.env.APP_URL}/api/worker`,
    method: "POST",
    sourceHeader: { "Content-Type": ["application/json"], "Upstash-Retries": ["1"] },
    sourceBody: b64(JSON.stringify({ jobId: id, seq: 1 })),
    notBefore: Date.now(),
    createdAt: Date.now(),
    callerIP: "127.0.0.1",
  });
  // The route logs what it did: failure_callback_noop, or job_delivery_failed had it failed the job.
  const handled = await until(
    async () =>
      fixture.logs
        .filter(
          (l) =>
            l.includes(id) &&
            (l.includes('"failure_callback_noop"') || l.includes('"job_delivery_failed"')),
        )
        .map((l) => JSON.parse(l.slice(l.indexOf("{")))),
    (found) => found.length > 0,
    { timeoutMs: 10_000, what: "the failure callback to be handled" },
  );
  expect(handled[0]).toMatchObject({
    event: "failure_callback_noop",
    jobId: id,
    outcome: "superseded",
    messageSeq: 1,
    jobSeq: 2,
    status: "running",
  });
  // Handled while the worker still ran: the callback changed nothing under it.
  expect((await api.job(id)).body.job).toMatchObject({ status: "running", attempts: 2 });

  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({
    status: "succeeded",
    attempts: 2,
    quotaRefunded: false,
    failureReason: null,
  });
  expect(job.output).toBeTruthy();
  expect(modelCalls()).toBe(2);
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
  expect(await events()).toEqual(["enqueued", "started", "requeued", "started", "completed"]);
});
