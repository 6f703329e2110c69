/**
 * POST /api/dlq (QStash's failure callback), in-process, with the real callback body
 * (QStash's documented failure-callback payload) signed for the callback URL.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { APP_URL, signAsQStash, useApi } from "../support/api.ts";

const app = useApi();

async function queuedJob() {
  const user = await app.newUser();
  const id = await app.enqueueOk(user);
  return { user, id, message: app.qstash.latestFor(id) };
}

describe("POST /api/dlq", () => {
  test("the last retry failed: job failed delivery_failed, refunded, one alert with job, user, status, retries and dlqId", async () => {
    const { user, id, message } = await queuedJob();
    const res = await app.failureCallback(message, { status: 503, dlqId: "1725323658779-0" });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ outcome: "failed" });

    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "failed", failure_reason: "delivery_failed" });
    expect(row.refunded_at).not.toBeNull();
    expect(row.last_error).toContain("503");
    expect(await app.unitsUsed(user.id)).toBe(0);

    const pages = app.webhook.ofKind("dlq_failure");
    expect(pages).toHaveLength(1);
    const text = JSON.stringify(pages[0]);
    for (const expected of [id, user.id, "503", "1/1", "1725323658779-0"]) {
      expect(text).toContain(expected);
    }
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

  test("the same callback twice: one refund, one alert, both answered 200", async () => {
    const { user, id, message } = await queuedJob();
    const first = await app.failureCallback(message, { dlqId: "1-0" });
    const second = await app.failureCallback(message, { dlqId: "1-0" });
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(await second.json()).toEqual({ outcome: "already_final" });
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect((await app.events(id)).filter((e) => e.to_status === "failed")).toHaveLength(1);
    expect(app.webhook.ofKind("dlq_failure")).toHaveLength(1);
  });

  test("two callbacks at once for one job: exactly one refund and one alert", async () => {
    const { user, id, message } = await queuedJob();
    const results = await Promise.all([
      app.failureCallback(message, { dlqId: "2-0" }),
      app.failureCallback(message, { dlqId: "2-1" }),
    ]);
    expect(results.map((r) => r.status)).toEqual([200, 200]);
    const outcomes = (await Promise.all(results.map((r) => r.json()))).map((b) => b.outcome).sort();
    expect(outcomes).toEqual(["already_final", "failed"]);
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect((await app.events(id)).filter((e) => e.to_status === "failed")).toHaveLength(1);
    expect(app.webhook.ofKind("dlq_failure")).toHaveLength(1);
  });

  test("a cancel racing the failure callback: one of them wins, one refund", async () => {
    const { user, id, message } = await queuedJob();
    const [cancel, callback] = await Promise.all([
      app.call("job", `/api/jobs/${id}`, { method: "DELETE", headers: user.headers }),
      app.failureCallback(message, { dlqId: "5-0" }),
    ]);
    expect(callback.status).toBe(200);
    const status = (await app.jobRow(id)).status;
    expect(["canceled", "failed"]).toContain(status);
    expect(cancel.status).toBe(status === "canceled" ? 200 : 409);
    expect(await app.unitsUsed(user.id)).toBe(0);
    const ends = (await app.events(id)).filter((e) => ["canceled", "failed"].includes(e.to_status));
    expect(ends).toHaveLength(1);
    expect(app.webhook.ofKind("dlq_failure")).toHaveLength(status === "failed" ? 1 : 0);
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

  test("a failing webhook never blocks or undoes the refund; the alert is kept as an error log line", async () => {
    const { user, id, message } = await queuedJob();
    app.webhook.answerWith(500);
    const res = await app.failureCallback(message, { dlqId: "3-0" });
    expect(res.status).toBe(200);
    expect(await app.jobRow(id)).toMatchObject({
      status: "failed",
      failure_reason: "delivery_failed",
    });
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.webhook.payloads).toHaveLength(0);
    const logged = app.logs
      .map((line) => JSON.parse(line))
      .filter((l) => l.event === "alert" && l.kind === "dlq_failure");
    expect(logged).toHaveLength(1);
    expect(logged[0]).toMatchObject({ level: "error", delivery: "webhook_refused", status: 500 });
    expect(logged[0].fields).toMatchObject({ job: id, user: user.id, dlqId: "3-0" });
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
