/**
 * POST /api/dlq (QStash's failure callback), in-process, with the real callback body
 * (QStash's documented failure-callback payload) signed for the callback URL.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { createAlerter } from "../../lib/alerts.ts";
import { createRedis } from "../../lib/redis.ts";
import { APP_URL, signAsQStash, useApi } from "../support/api.ts";

const app = useApi();

/**
 * The handlers with an alerter whose clock the test moves: a failure callback is counted into
 * its window (no page of its own), and `closeWindow` moves past the window and flushes, as the
 * sweeper's next tick does. Each call has its own Redis prefix (its own windows).
 */
function withAlertClock() {
  let now = new Date(Date.UTC(2026, 2, 1, 12, 0, 10));
  const alerts = createAlerter({
    redis: createRedis({
      url: app.env.UPSTASH_REDIS_REST_URL as string,
      token: app.env.UPSTASH_REDIS_REST_TOKEN as string,
    }),
    webhookUrl: app.env.ALERT_WEBHOOK_URL,
    throttleSeconds: 900,
    prefix: `test:${randomUUID()}`,
    now: () => now,
  });
  return {
    handlers: app.handlersFor({ ...app.deps, alerts }, app.workerDeps),
    async closeWindow() {
      now = new Date(now.getTime() + 900_000);
      return alerts.flush();
    },
  };
}
const summaries = () => app.webhook.ofKind("user_failures");

/** The job failed once, its unit went back, and the window's summary counts one delivery failure. */
async function expectFailedOnce(
  userId: string,
  id: string,
  clock: ReturnType<typeof withAlertClock>,
) {
  expect(await app.unitsUsed(userId)).toBe(0);
  expect((await app.events(id)).filter((e) => e.to_status === "failed")).toHaveLength(1);
  await clock.closeWindow();
  expect(summaries().map((p) => p.text.includes("delivery_failed 1"))).toEqual([true]);
}

async function queuedJob() {
  const user = await app.newUser();
  const id = await app.enqueueOk(user);
  return { user, id, message: app.qstash.latestFor(id) };
}

describe("POST /api/dlq", () => {
  test("the last retry failed: job failed delivery_failed, refunded, logged with job, status and dlqId; no page until the window's summary, which names the user", async () => {
    const clock = withAlertClock();
    const { user, id, message } = await queuedJob();
    const res = await app.failureCallback(message, {
      status: 503,
      dlqId: "1725323658779-0",
      handlers: clock.handlers,
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ outcome: "failed" });

    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "failed", failure_reason: "delivery_failed" });
    expect(row.refunded_at).not.toBeNull();
    expect(row.last_error).toContain("503");
    expect(await app.unitsUsed(user.id)).toBe(0);

    expect(app.webhook.payloads).toHaveLength(0);
    const logged = app.logs
      .map((l) => JSON.parse(l))
      .find((l) => l.event === "job_delivery_failed");
    expect(logged).toMatchObject({ jobId: id, status: 503, dlqId: "1725323658779-0" });

    expect(await clock.closeWindow()).toBe(1);
    const [summary] = summaries();
    expect(summaries()).toHaveLength(1);
    expect(summary?.text).toContain("1 user-caused failure(s)");
    expect(summary?.text).toContain("delivery_failed 1");
    expect(JSON.stringify(summary)).toContain(`${user.id} ×1`);
  });

  test("a running job (QStash gave up on a slow delivery) is failed and refunded too", async () => {
    const { user, id, message } = await queuedJob();
    await app.admin.query(
      `update public.generation_jobs
       set status = 'running', attempts = 1, started_at = now(), lease_expires_at = now() + interval '90 seconds'
       where id = $1`,
      [id],
    );
    const res = await app.failureCallback(message);
    expect(res.status).toBe(200);
    expect(await app.jobRow(id)).toMatchObject({
      status: "failed",
      failure_reason: "delivery_failed",
    });
    expect(await app.unitsUsed(user.id)).toBe(0);
  });

  test("the same callback twice: one refund, one count, both answered 200", async () => {
    const clock = withAlertClock();
    const { user, id, message } = await queuedJob();
    const first = await app.failureCallback(message, { dlqId: "1-0", handlers: clock.handlers });
    const second = await app.failureCallback(message, { dlqId: "1-0", handlers: clock.handlers });
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(await second.json()).toEqual({ outcome: "already_final" });
    await expectFailedOnce(user.id, id, clock);
  });

  test("two callbacks at once for one job: exactly one refund and one count", async () => {
    const clock = withAlertClock();
    const { user, id, message } = await queuedJob();
    const results = await Promise.all([
      app.failureCallback(message, { dlqId: "2-0", handlers: clock.handlers }),
      app.failureCallback(message, { dlqId: "2-1", handlers: clock.handlers }),
    ]);
    expect(results.map((r) => r.status)).toEqual([200, 200]);
    const outcomes = (await Promise.all(results.map((r) => r.json()))).map((b) => b.outcome).sort();
    expect(outcomes).toEqual(["already_final", "failed"]);
    await expectFailedOnce(user.id, id, clock);
  });

  test("a cancel racing the failure callback: one of them wins, one refund", async () => {
    const clock = withAlertClock();
    const { user, id, message } = await queuedJob();
    const [cancel, callback] = await Promise.all([
      app.cancel(user, id),
      app.failureCallback(message, { dlqId: "5-0", handlers: clock.handlers }),
    ]);
    expect(callback.status).toBe(200);
    const status = (await app.jobRow(id)).status;
    expect(["canceled", "failed"]).toContain(status);
    expect(cancel.status).toBe(status === "canceled" ? 200 : 409);
    expect(await app.unitsUsed(user.id)).toBe(0);
    const ends = (await app.events(id)).filter((e) => ["canceled", "failed"].includes(e.to_status));
    expect(ends).toHaveLength(1);
    await clock.closeWindow();
    expect(summaries()).toHaveLength(status === "failed" ? 1 : 0);
  });

  test("an already-succeeded job: 200, no refund, no alert", async () => {
    const { user, id, message } = await queuedJob();
    expect((await app.deliver(message)).status).toBe(200);
    const res = await app.failureCallback(message);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ outcome: "already_final" });
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "succeeded", refunded_at: null });
    expect(await app.unitsUsed(user.id)).toBe(1);
    expect(app.webhook.payloads).toHaveLength(0);
  });

  test("a canceled job: 200, the cancel's refund is the only one", async () => {
    const { user, id, message } = await queuedJob();
    expect((await app.cancel(user, id)).status).toBe(200);
    const res = await app.failureCallback(message);
    expect(res.status).toBe(200);
    expect((await app.jobRow(id)).status).toBe("canceled");
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.webhook.payloads).toHaveLength(0);
  });

  test("a failing webhook never blocks or undoes the refund; the summary is kept as an error log line and sent by a later tick", async () => {
    const clock = withAlertClock();
    const { user, id, message } = await queuedJob();
    app.webhook.answerWith(500);
    const res = await app.failureCallback(message, { dlqId: "3-0", handlers: clock.handlers });
    expect(res.status).toBe(200);
    expect(await app.jobRow(id)).toMatchObject({
      status: "failed",
      failure_reason: "delivery_failed",
    });
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(await clock.closeWindow()).toBe(0);
    expect(app.webhook.payloads).toHaveLength(0);
    const logged = app.logs
      .map((line) => JSON.parse(line))
      .filter((l) => l.event === "alert" && l.kind === "user_failures");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: "error", delivery: "webhook_refused", status: 500 });
    expect(logged[0].fields).toMatchObject({ delivery_failed: 1, topUsers: `${user.id} ×1` });
    app.webhook.reset();
    expect(await clock.closeWindow()).toBe(1);
    expect(summaries()).toHaveLength(1);
  });

  test("50 failures users cause at will page on-call at most once: one summary naming the counts", async () => {
    const clock = withAlertClock();
    // Five users, ten failed jobs each (the enqueue rate limit lets a user start 10 a minute).
    const users = await Promise.all(Array.from({ length: 5 }, () => app.newUser("pro")));
    const started = Date.now();
    for (const user of users)
      for (let i = 0; i < 10; i++) {
        const id = await app.enqueueOk(user);
        const res = await app.failureCallback(app.qstash.latestFor(id), {
          status: 500,
          handlers: clock.handlers,
        });
        expect(await res.json()).toEqual({ outcome: "failed" });
      }
    const during = app.webhook.payloads.length;
    expect(await clock.closeWindow()).toBe(1);
    expect(await clock.closeWindow()).toBe(0);
    const pages = app.webhook.payloads;
    process.stdout.write(
      `[alerts] 50 user-caused delivery failures in ${Date.now() - started} ms: ${during} pages during the window, ${pages.length} after it closed: ${pages.map((p) => p.text).join(" | ")}\n`,
    );
    expect(during).toBe(0);
    expect(pages).toHaveLength(1);
    expect(pages[0]?.text).toContain("50 user-caused failure(s)");
    expect(pages[0]?.text).toContain("delivery_failed 50");
    const text = JSON.stringify(pages[0]);
    expect(text).toContain("*users*\\n5");
    for (const user of users) {
      expect(text).toContain(`${user.id} ×10`);
      expect(await app.unitsUsed(user.id)).toBe(0);
    }
  });

  describe("a superseded message's callback (the job's publish_seq moved on)", () => {
    const until = async (what: string, ok: () => Promise<boolean>) => {
      for (let i = 0; i < 200; i++) {
        if (await ok()) return;
        await new Promise((r) => setTimeout(r, 20));
      }
      throw new Error(`timed out waiting for ${what}`);
    };

    test("the old message's callback while the new message's worker runs: 200 superseded, the job still succeeds, 1 unit used, nothing refunded", async () => {
      const clock = withAlertClock();
      const { user, id, message: first } = await queuedJob();
      expect(JSON.parse(first.body)).toEqual({ jobId: id, seq: 1 });

      // The first message's claim hits a provider 429: requeued, a new message (seq 2) for 1 s later.
      app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 1 });
      expect(await (await app.deliver(first)).json()).toEqual({ outcome: "requeued" });
      const second = app.qstash.latestFor(id);
      expect(JSON.parse(second.body)).toEqual({ jobId: id, seq: 2 });
      const resumeAt = (await app.jobRow(id)).resume_at?.getTime() ?? 0;
      await new Promise((r) => setTimeout(r, Math.max(0, resumeAt - Date.now()) + 100));

      // The new message is delivered and claimed; the model takes 3 s to answer (inside a 10 s
      // model timeout), the window in which the old message's callback must be handled, a
      // loaded machine's polls and round trips included.
      app.model.failNext("slow", 1, { delayMs: 3_000 });
      const slow = app.makeDeps({ MODEL_TIMEOUT_MS: "10000" });
      const running = app.deliver(second, {
        handlers: app.handlersFor(slow.deps, slow.workerDeps),
      });
      await until("the second claim", async () => (await app.jobRow(id)).attempts === 2);
      expect(await app.jobRow(id)).toMatchObject({
        status: "running",
        attempts: 2,
        publish_seq: 2,
      });

      // Meanwhile the first message's last retry failed (its worker died before answering):
      // QStash calls the failure callback for it.
      const res = await app.failureCallback(first, { handlers: clock.handlers });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ outcome: "superseded" });
      expect(await app.jobRow(id)).toMatchObject({ status: "running", refunded_at: null });
      expect(await app.unitsUsed(user.id)).toBe(1);
      const noop = app.logs
        .map((l) => JSON.parse(l))
        .find((l) => l.event === "failure_callback_noop");
      expect(noop).toMatchObject({
        jobId: id,
        outcome: "superseded",
        messageSeq: 1,
        jobSeq: 2,
        status: "running",
      });

      // The live worker's answer is the job's fate.
      const done = await running;
      expect(done.status).toBe(200);
      expect(await done.json()).toEqual({ outcome: "completed" });
      const row = await app.jobRow(id);
      expect(row).toMatchObject({ status: "succeeded", refunded_at: null, failure_reason: null });
      expect(row.output).toBeTruthy();
      const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
      expect(usage).toMatchObject({ used: 1 });
      expect(await app.unitsUsed(user.id)).toBe(1);
      expect((await app.events(id)).map((e) => e.event)).not.toContain("failed");
      // Not counted as a user-caused failure either.
      expect(await clock.closeWindow()).toBe(0);
    });

    test("the current message's callback still fails and refunds", async () => {
      const { user, id, message: first } = await queuedJob();
      app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 30 });
      await app.deliver(first);
      const second = app.qstash.latestFor(id);
      expect(JSON.parse(second.body).seq).toBe(2);
      const res = await app.failureCallback(second);
      expect(await res.json()).toEqual({ outcome: "failed" });
      expect(await app.jobRow(id)).toMatchObject({
        status: "failed",
        failure_reason: "delivery_failed",
      });
      expect(await app.unitsUsed(user.id)).toBe(0);
    });

    test("a message from before messages carried a seq is treated as the current one, as before", async () => {
      const { user, id, message: first } = await queuedJob();
      app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 30 });
      await app.deliver(first);
      expect((await app.jobRow(id)).publish_seq).toBe(2);
      const res = await app.failureCallback({ ...first, body: JSON.stringify({ jobId: id }) });
      expect(await res.json()).toEqual({ outcome: "failed" });
      expect(await app.unitsUsed(user.id)).toBe(0);
    });

    test("a seq that is not a publish_seq: 400 invalid_callback, nothing changed", async () => {
      const { user, id, message } = await queuedJob();
      for (const seq of [0, "1", 1.5]) {
        const res = await app.failureCallback({
          ...message,
          body: JSON.stringify({ jobId: id, seq }),
        });
        expect(res.status).toBe(400);
        expect(await res.json()).toMatchObject({ error: { code: "invalid_callback" } });
      }
      expect(await app.jobRow(id)).toMatchObject({ status: "queued", refunded_at: null });
      expect(await app.unitsUsed(user.id)).toBe(1);
    });
  });

  describe("401 invalid_signature, nothing changed", () => {
    test.each([
      ["no signature", null],
      ["signed for the worker's URL", `${APP_URL}/api/worker`],
      ["signed with another key", "key"],
    ] as const)("%s", async (_what, variant) => {
      const { user, id, message } = await queuedJob();
      const body = JSON.stringify({
        status: 500,
        retried: 1,
        maxRetries: 1,
        dlqId: "4-0",
        sourceBody: Buffer.from(message.body).toString("base64"),
      });
      const signature =
        variant === null
          ? null
          : variant === "key"
            ? await signAsQStash(`${APP_URL}/api/dlq`, body, { key: "sig_wrongwrongwrong000" })
            : await signAsQStash(variant, body);
      const res = await app.handlers.dlq(
        new Request(`${APP_URL}/api/dlq`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            ...(signature ? { "upstash-signature": signature } : {}),
          },
          body,
        }),
      );
      expect(res.status).toBe(401);
      expect((await app.jobRow(id)).status).toBe("queued");
      expect(await app.unitsUsed(user.id)).toBe(1);
      expect(app.webhook.payloads).toHaveLength(0);
    });
  });

  test("a signed body that is not a job's failure callback: 400, nothing changed", async () => {
    const body = JSON.stringify({ sourceBody: Buffer.from("{}").toString("base64") });
    const res = await app.handlers.dlq(
      new Request(`${APP_URL}/api/dlq`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "upstash-signature": await signAsQStash(`${APP_URL}/api/dlq`, body),
        },
        body,
      }),
    );
    expect(res.status).toBe(400);
  });

  test("a callback for a job that does not exist: 200 (nothing to retry)", async () => {
    const res = await app.failureCallback({
      messageId: "msg_x",
      destination: `${APP_URL}/api/worker`,
      body: JSON.stringify({ jobId: randomUUID() }),
      headers: { "upstash-failure-callback": `${APP_URL}/api/dlq`, "upstash-retries": "1" },
      deduplicated: false,
    });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ outcome: "not_found" });
  });

  test("the database is down: 503 so QStash retries the callback; nothing changed", async () => {
    const { user, id, message } = await queuedJob();
    const down = await app.databaseDown();
    const res = await app.failureCallback(message, { handlers: app.handlersFor(down.deps) });
    expect(res.status).toBe(503);
    expect((await app.jobRow(id)).status).toBe("queued");
    expect(await app.unitsUsed(user.id)).toBe(1);
    expect(app.webhook.payloads).toHaveLength(0);

    // QStash's retry, with the database back: the refund happens once.
    expect((await app.failureCallback(message)).status).toBe(200);
    expect(await app.unitsUsed(user.id)).toBe(0);
  });
});
