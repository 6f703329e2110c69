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
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect((await app.events(id)).filter((e) => e.to_status === "failed")).toHaveLength(1);
    await clock.closeWindow();
    expect(summaries().map((p) => p.text.includes("delivery_failed 1"))).toEqual([true]);
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
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect((await app.events(id)).filter((e) => e.to_status === "failed")).toHaveLength(1);
    await clock.closeWindow();
    expect(summaries().map((p) => p.text.includes("delivery_failed 1"))).toEqual([true]);
  });

  test("a cancel racing the failure callback: one of them wins, one refund", async () => {
    const clock = withAlertClock();
    const { user, id, message } = await queuedJob();
    const [cancel, callback] = await Promise.all([
      app.call("job", `/api/jobs/${id}`, { method: "DELETE", headers: user.headers }),
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
    expect(
      (await app.call("job", `/api/jobs/${id}`, { method: "DELETE", headers: user.headers }))
        .status,
    ).toBe(200);
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
