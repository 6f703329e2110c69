/**
 * End to end, over HTTP: the ways a job fails, and that each failure refunds exactly once and
 * pages on-call as it should. QStash retries run at 1/100 of real time; notBefore is real time.
 */
import { expect, test } from "vitest";
import { DEV_TOKEN } from "../../dev/qstash/index.ts";
import { gaveUpAfterHits } from "../support/job-events.ts";
import {
  alertsAbout,
  events,
  newUser,
  newUserJob,
  publishThroughQStash,
  refundEvents,
  until,
  useStack,
} from "../support/stack.ts";

const fixture = useStack();

test("model 500 on every try: QStash retries, then the failure callback: failed, refunded once, counted for the window's summary (no page of its own); a second callback and a DLQ retry change nothing", async () => {
  const { stack, api, id, modelCalls, events, refundEvents } = await newUserJob(
    fixture,
    "[fake:server_error] this will never work",
  );
  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({
    status: "failed",
    failureReason: "delivery_failed",
    attempts: 2, // the first delivery + QSTASH_RETRIES=1
    quotaRefunded: true,
  });
  expect(modelCalls()).toBe(2);
  await stack.qstash.waitIdle(10_000);
  // A user can cause this at will: no page names the job; the error log line does.
  expect(alertsAbout(stack, id)).toHaveLength(0);
  expect(fixture.logs.some((l) => l.includes('"job_delivery_failed"') && l.includes(id))).toBe(
    true,
  );
  expect(await events()).toEqual([
    "enqueued",
    "started",
    "released",
    "started",
    "released",
    "failed",
  ]);

  // The dead letter QStash kept, exactly as its API shows it.
  const dlq = await fetch(`${stack.urls.qstash}/v2/dlq`, {
    headers: { authorization: `Bearer ${DEV_TOKEN}` },
  }).then((r) => r.json() as Promise<{ messages: Record<string, unknown>[] }>);
  const letter = dlq.messages.find((m) => String(m.body).includes(id));
  expect(letter).toMatchObject({ responseStatus: 503, maxRetries: 1 });
  if (!letter) throw new Error("no dead letter");

  // The failure callback delivered a second time (QStash is at-least-once)...
  const b64 = (s: string) => Buffer.from(s).toString("base64");
  await publishThroughQStash(stack, "/api/dlq", {
    status: letter.responseStatus,
    header: letter.responseHeader,
    body: b64(String(letter.responseBody ?? "")),
    retried: 1,
    maxRetries: 1,
    dlqId: letter.dlqId,
    sourceMessageId: letter.messageId,
    url: letter.url,
    method: "POST",
    sourceHeader: letter.header,
    sourceBody: b64(String(letter.body)),
    notBefore: letter.notBefore,
    createdAt: letter.createdAt,
    callerIP: letter.callerIP,
  });
  // ...and someone pressing "retry" on the dead letter.
  const retry = await fetch(`${stack.urls.qstash}/v2/dlq/retry/${letter.dlqId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${DEV_TOKEN}` },
  });
  expect(retry.status).toBe(201);
  await stack.qstash.waitIdle(10_000);
  expect(
    fixture.logs.filter((l) => l.includes("failure_callback_noop") && l.includes(id)).length,
  ).toBeGreaterThanOrEqual(1);

  expect((await api.job(id)).body.job).toMatchObject({ status: "failed", attempts: 2 });
  expect(modelCalls()).toBe(2);
  expect(await refundEvents()).toBe(1);
  expect(alertsAbout(stack, id)).toHaveLength(0);
  expect(
    fixture.logs.filter((l) => l.includes('"job_delivery_failed"') && l.includes(id)),
  ).toHaveLength(1);
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
});

test("QStash down at enqueue: 503 unavailable with Retry-After, nothing stays reserved", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  await stack.stopQStash();
  try {
    const refused = await api.enqueue("Nobody will deliver this");
    expect(refused.status).toBe(503);
    expect(refused.body.error.code).toBe("unavailable");
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
    const jobs = (await api.list()).body.jobs;
    for (const job of jobs) {
      expect(job).toMatchObject({
        status: "failed",
        failureReason: "publish_failed",
        quotaRefunded: true,
      });
    }
  } finally {
    await stack.startQStash();
  }
  // Back up: the same user can enqueue again and it runs.
  const created = await api.enqueue("Now it works");
  expect(created.status).toBe(202);
  expect(await api.waitTerminal(created.body.job.id)).toMatchObject({ status: "succeeded" });
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
});

test("a job stuck queued with no message: the sweeper republishes it (it then succeeds) or, too old, ends it with a refund", async () => {
  const { stack } = fixture;
  const { userId, api } = await newUser(stack);
  // The function died between the commit and the publish: the row is there, no message is.
  const enqueue = async (prompt: string) => {
    const { rows } = await stack.sql.query<{ r: { outcome: string; job: { id: string } } }>(
      "select public.enqueue_job(p_user_id => $1, p_prompt => $2) as r",
      [userId, prompt],
    );
    expect(rows[0]?.r.outcome).toBe("enqueued");
    return rows[0]?.r.job.id ?? "";
  };
  const lost = await enqueue("A message that was never published");
  const ancient = await enqueue("A message lost so long ago it is past the max age");
  await stack.sql.query(
    "update public.generation_jobs set queued_at = now() - interval '2 minutes' where id = $1",
    [lost],
  );
  await stack.sql.query(
    "update public.generation_jobs set created_at = now() - interval '4 hours', queued_at = now() - interval '4 hours' where id = $1",
    [ancient],
  );
  expect((await api.usage()).body).toMatchObject({ used: 2, active: 2 });

  const unauthorized = await fetch(`${stack.urls.app}/api/cron/sweep`);
  expect(unauthorized.status).toBe(401);

  const sweep = await stack.sweep();
  expect(sweep.status).toBe(200);
  expect(sweep.body).toMatchObject({ republished: 1, failed: { max_age_exceeded: 1 } });

  expect(await api.waitTerminal(lost)).toMatchObject({ status: "succeeded", attempts: 1 });
  expect((await api.job(ancient)).body.job).toMatchObject({
    status: "failed",
    failureReason: "max_age_exceeded",
    quotaRefunded: true,
  });
  expect(await events(stack, lost)).toEqual(["enqueued", "republished", "started", "completed"]);
  expect(await refundEvents(stack, ancient)).toBe(1);
  expect((await api.usage()).body).toMatchObject({ used: 1, active: 0 });
  await until(
    async () => alertsAbout(stack, ancient, "stuck_jobs").length,
    (n) => n === 1,
    { what: "the sweeper's summary alert" },
  );

  // A second sweep finds nothing left to do.
  const again = await stack.sweep();
  expect(again.body).toMatchObject({ republished: 0, failed: {} });
});

test("a revoked OpenAI key (401 invalid_api_key) under three jobs: each failed provider_misconfigured on its first try, refunded once, one page naming the fix", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  const calls = stack.model.calls();
  const before = stack.alerts.received().length;
  stack.model.failNext("invalid_api_key", 3);

  const ids: string[] = [];
  for (const prompt of ["A poem", "A story", "A letter"]) {
    const created = await api.enqueue(prompt);
    expect(created.status).toBe(202);
    ids.push(created.body.job.id);
  }
  for (const id of ids) {
    expect(await api.waitTerminal(id)).toMatchObject({
      status: "failed",
      failureReason: "provider_misconfigured",
      attempts: 1, // 200 to QStash: no retry, no failure callback
      quotaRefunded: true,
    });
    expect(await refundEvents(stack, id)).toBe(1);
    expect(await events(stack, id)).toEqual(["enqueued", "started", "failed"]);
  }
  expect(stack.model.calls() - calls).toBe(3);
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
  await stack.qstash.waitIdle(10_000);

  const received = stack.alerts.received().slice(before);
  const pages = received.filter((a) =>
    String((a as { text?: string }).text).startsWith("[provider_misconfigured]"),
  );
  expect(pages).toHaveLength(1);
  expect(JSON.stringify(pages[0])).toContain("rotate OPENAI_API_KEY");
  expect(JSON.stringify(pages[0])).not.toContain(stack.env.OPENAI_API_KEY ?? "no key");
  // Nothing else names it: it is not counted into a user-failures summary.
  expect(
    received.filter((a) => !pages.includes(a) && JSON.stringify(a).includes("misconfigured")),
  ).toEqual([]);
  const { rows } = await stack.sql.query("select 1 from public.quota_drift");
  expect(rows).toEqual([]);
});

// Last: the provider gate it closes (shared in Redis, as in production) would make the next
// jobs in this stack wait a second without calling the model.
test("429 insufficient_quota: on-call alerted once, the job gives up at the hit limit, refunded once", async () => {
  const { stack, api, id, modelCalls, events, refundEvents } = await newUserJob(
    fixture,
    "[fake:insufficient_quota] an essay nobody will pay for",
  );
  const job = await api.waitTerminal(id, 30_000);
  expect(job).toMatchObject({
    status: "failed",
    failureReason: "provider_quota_exhausted",
    providerQuotaHits: 3, // PROVIDER_QUOTA_MAX_HITS
    attempts: 3,
    quotaRefunded: true,
  });
  expect(modelCalls()).toBe(3);
  expect(await refundEvents()).toBe(1);
  expect(await events()).toEqual(gaveUpAfterHits(3));
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
  // Three provider refusals, one page (deduplicated per window).
  const pages = stack.alerts
    .received()
    .filter((a) => String((a as { text?: string }).text).startsWith("[provider_quota_exhausted]"));
  expect(pages).toHaveLength(1);
});
