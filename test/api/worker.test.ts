/**
 * POST /api/worker, in-process, with deliveries signed exactly as QStash signs them and the
 * fake model behind the real OpenAI SDK: one model call per claim, every model failure
 * classified, and a database error never answered with a 200.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { DEV_SIGNING_KEYS, DEV_TOKEN } from "../../dev/qstash/constants.ts";
import {
  APP_URL,
  CRON_SECRET,
  eventually,
  JWT_SECRET,
  OPENAI_API_KEY,
  type PublishedMessage,
  signAsQStash,
  useApi,
} from "../support/api.ts";

const app = useApi();

const outcomeOf = async (res: Response) => ((await res.json()) as { outcome: string }).outcome;

async function queuedJob(plan: "free" | "pro" = "free") {
  const user = await app.newUser(plan);
  const prompt = `Write a report ${randomUUID()}`;
  const id = await app.enqueueOk(user, prompt);
  return { user, id, prompt, message: app.qstash.latestFor(id) };
}

function rawWorkerRequest(body: string, signature: string | null): Request {
  return new Request(`${APP_URL}/api/worker`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(signature === null ? {} : { "upstash-signature": signature }),
    },
    body,
  });
}

describe("POST /api/worker: delivery", () => {
  test("success: job succeeded with its output, exactly one model call, unit stays spent", async () => {
    const { user, id, message } = await queuedJob();
    const res = await app.deliver(message);
    expect(res.status).toBe(200);
    expect(await outcomeOf(res)).toBe("completed");
    expect(app.model.calls()).toBe(1);

    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "succeeded", attempts: 1, refunded_at: null });
    expect(row.output).toEqual(expect.any(String));
    expect(row.output?.length).toBeGreaterThan(0);
    expect(await app.unitsUsed(user.id)).toBe(1);
    expect((await app.events(id)).map((e) => e.event)).toEqual([
      "enqueued",
      "started",
      "completed",
    ]);

    const job = await (await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).json();
    expect(job.job).toMatchObject({ status: "succeeded", phase: "succeeded", output: row.output });
  });

  test("a duplicate delivery while the job runs, and one after it succeeded: 200, no second model call", async () => {
    const { id, message } = await queuedJob();
    // The duplicate must arrive while the first still runs: the model answers after 3 s (inside
    // a model timeout of 10 s), room for a loaded machine's polls and the duplicate's own claim.
    const { deps, workerDeps } = app.makeDeps({ MODEL_TIMEOUT_MS: "10000" });
    const handlers = app.handlersFor(deps, workerDeps);
    app.model.failNext("slow", 1, { delayMs: 3_000 });
    const first = app.deliver(message, { handlers });
    await eventually(async () => (await app.jobRow(id)).status === "running", {
      what: "the first delivery to claim the job",
    });

    const duplicate = await app.deliver(message, { retried: 1, handlers });
    expect(duplicate.status).toBe(200);
    expect(await outcomeOf(duplicate)).toBe("already_running");

    const done = await first;
    expect(done.status).toBe(200);
    expect(await outcomeOf(done)).toBe("completed");

    const late = await app.deliver(message, { retried: 1, handlers });
    expect(late.status).toBe(200);
    expect(await outcomeOf(late)).toBe("already_final");
    expect(app.model.calls()).toBe(1);
    expect(await app.jobRow(id)).toMatchObject({ status: "succeeded", attempts: 1 });
  });

  describe("401 invalid_signature, and nothing changed", () => {
    const cases: Array<[string, (m: PublishedMessage) => Promise<Request>]> = [
      ["no signature", async (m) => rawWorkerRequest(m.body, null)],
      ["a garbage signature", async (m) => rawWorkerRequest(m.body, "not-a-jwt")],
      [
        "a signature made with another key",
        async (m) =>
          rawWorkerRequest(
            m.body,
            await signAsQStash(m.destination, m.body, { key: "sig_notTheRightKey000000000" }),
          ),
      ],
      [
        "a signature for another URL (the failure callback's)",
        async (m) => rawWorkerRequest(m.body, await signAsQStash(`${APP_URL}/api/dlq`, m.body)),
      ],
      [
        "a signature for another host",
        async (m) =>
          rawWorkerRequest(m.body, await signAsQStash("https://evil.test/api/worker", m.body)),
      ],
      [
        "a tampered body (another job id under a valid signature)",
        async (m) =>
          rawWorkerRequest(
            JSON.stringify({ jobId: randomUUID() }),
            await signAsQStash(m.destination, m.body),
          ),
      ],
      [
        "a re-serialized body (whitespace added)",
        async (m) =>
          rawWorkerRequest(
            JSON.stringify(JSON.parse(m.body), null, 2),
            await signAsQStash(m.destination, m.body),
          ),
      ],
      [
        "an expired signature",
        async (m) =>
          rawWorkerRequest(
            m.body,
            await signAsQStash(m.destination, m.body, { nowMs: Date.now() - 3600_000 }),
          ),
      ],
    ];
    test.each(cases)("%s", async (_what, build) => {
      const { user, id, message } = await queuedJob();
      const res = await app.handlers.worker(await build(message));
      expect(res.status).toBe(401);
      expect((await res.json()).error.code).toBe("invalid_signature");
      expect(app.model.calls()).toBe(0);
      expect(await app.jobRow(id)).toMatchObject({ status: "queued", attempts: 0 });
      expect(await app.unitsUsed(user.id)).toBe(1);
    });
  });

  test("a signature made with the NEXT signing key is accepted (key rotation)", async () => {
    const { id, message } = await queuedJob();
    const res = await app.handlers.worker(
      rawWorkerRequest(
        message.body,
        await signAsQStash(message.destination, message.body, { key: DEV_SIGNING_KEYS.next }),
      ),
    );
    expect(res.status).toBe(200);
    expect((await app.jobRow(id)).status).toBe("succeeded");
  });

  test("a validly signed body that is not {jobId} is 400, not a retry loop", async () => {
    const body = JSON.stringify({ hello: "world" });
    const res = await app.handlers.worker(
      rawWorkerRequest(body, await signAsQStash(`${APP_URL}/api/worker`, body)),
    );
    expect(res.status).toBe(400);
  });
});

describe("POST /api/worker: model failures", () => {
  test("transient (the model answers 500): claim released, 503 so QStash retries, unit kept reserved", async () => {
    const { user, id, message } = await queuedJob();
    app.model.failNext("server_error");
    const res = await app.deliver(message);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBeTruthy();
    expect(app.model.calls()).toBe(1);
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "queued", attempts: 1, provider_quota_hits: 0 });
    expect(row.refunded_at).toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(1);

    // QStash's retry claims it again and succeeds.
    const retry = await app.deliver(message, { retried: 1 });
    expect(retry.status).toBe(200);
    expect(await app.jobRow(id)).toMatchObject({ status: "succeeded", attempts: 2 });
  });

  test("transient (the model is slower than MODEL_TIMEOUT_MS): released and 503", async () => {
    const { id, message } = await queuedJob();
    app.model.failNext("slow", 1, { delayMs: 10_000 });
    const started = Date.now();
    const res = await app.deliver(message);
    expect(res.status).toBe(503);
    expect(Date.now() - started).toBeLessThan(8_000);
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", attempts: 1 });
    expect((await app.events(id)).map((e) => e.event)).toEqual(["enqueued", "started", "released"]);
  });

  test("transient after the job was canceled meanwhile: 200 (a retry cannot help), the cancel stands", async () => {
    // A worker that records no progress within the test: it learns of the cancel only from the
    // release its timeout leads to (test/api/streaming.test.ts covers the worker that does).
    const { user, id, delivery } = await canceledWhileSlow(10_000);
    const res = await delivery; // the model call times out after MODEL_TIMEOUT_MS
    expect(res.status).toBe(200);
    expect(await outcomeOf(res)).toBe("not_running");
    expect(await app.jobRow(id)).toMatchObject({ status: "canceled", output: null });
    expect(await app.unitsUsed(user.id)).toBe(0);
  });

  test("refused (the model answers 400): failed model_refused, refunded, 200 so QStash stops", async () => {
    const { user, id, message } = await queuedJob();
    app.model.failNext("bad_request");
    const res = await app.deliver(message);
    expect(res.status).toBe(200);
    expect(await outcomeOf(res)).toBe("failed");
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "failed", failure_reason: "model_refused" });
    expect(row.refunded_at).not.toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(0);
    const job = await (await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).json();
    expect(job.job).toMatchObject({
      status: "failed",
      failureReason: "model_refused",
      quotaRefunded: true,
    });
    // A prompt's refusal is the user's: counted into the window's roll-up, not paged.
    expect(await app.redis.keys("quota-jobs:alert:rollup:*")).not.toEqual([]);
    expect(app.webhook.payloads).toHaveLength(0);
  });

  test("429 rate_limit_exceeded: requeued until retry-after, a new message with Upstash-Not-Before and a new dedup id, phase waiting_for_provider", async () => {
    const { user, id, message } = await queuedJob();
    app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 30 });
    const before = Date.now();
    const res = await app.deliver(message);
    expect(res.status).toBe(200);
    expect(await outcomeOf(res)).toBe("requeued");

    const row = await app.jobRow(id);
    expect(row).toMatchObject({
      status: "queued",
      provider_quota_hits: 1,
      publish_seq: 2,
      attempts: 1,
    });
    const resumeAt = row.resume_at?.getTime() ?? 0;
    expect(resumeAt).toBeGreaterThanOrEqual(before + 29_000);
    expect(resumeAt).toBeLessThanOrEqual(Date.now() + 31_000);
    expect(await app.unitsUsed(user.id)).toBe(1);

    const messages = app.qstash.forJob(id);
    expect(messages).toHaveLength(2);
    const requeued = messages[1];
    expect(requeued?.destination).toBe(`${APP_URL}/api/worker`);
    expect(requeued?.headers["upstash-not-before"]).toBe(String(Math.ceil(resumeAt / 1000)));
    expect(requeued?.headers["upstash-deduplication-id"]).toBe(`job-${id}-2`);
    expect(JSON.parse(requeued?.body ?? "")).toEqual({ jobId: id, seq: 2 });
    expect(requeued?.headers["upstash-deduplication-id"]).not.toBe(
      message.headers["upstash-deduplication-id"],
    );
    expect(requeued?.headers["upstash-failure-callback"]).toBe(`${APP_URL}/api/dlq`);

    const job = (await (await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).json())
      .job;
    expect(job).toMatchObject({
      status: "queued",
      phase: "waiting_for_provider",
      providerQuotaHits: 1,
    });
    expect(job.resumeAt).toBe(new Date(resumeAt).toISOString());

    // Delivered early anyway (the old message retried): no model call, nothing counted.
    const early = await app.deliver(message, { retried: 1 });
    expect(early.status).toBe(200);
    expect(await outcomeOf(early)).toBe("not_ready");
    expect(app.model.calls()).toBe(1);
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", provider_quota_hits: 1 });
  });

  test("QStash down when the requeue publishes: 503, and QStash's retry of the old delivery publishes it", async () => {
    const { id, message } = await queuedJob();
    app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 30 });
    app.qstash.failWith("500");
    const res = await app.deliver(message);
    expect(res.status).toBe(503);
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "queued", provider_quota_hits: 1, publish_seq: 2 });
    expect(app.qstash.forJob(id)).toHaveLength(1);

    app.qstash.failWith(null);
    const signature = await signAsQStash(message.destination, message.body);
    const redeliver = (retried: number) =>
      app.handlers.worker(
        new Request(message.destination, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "upstash-signature": signature,
            "upstash-message-id": message.messageId,
            "upstash-retried": String(retried),
          },
          body: message.body,
        }),
      );
    const retry = await redeliver(1);
    expect(retry.status).toBe(200);
    expect(await outcomeOf(retry)).toBe("not_ready");
    const republished = app.qstash.latestFor(id);
    // An id of its own: had the requeue's publish got through after all, the job's id would be
    // dropped as a duplicate and the job left to the sweeper. Its tail names this delivery by
    // its signature, never by a header the signature does not cover.
    expect(republished.headers["upstash-deduplication-id"]).toMatch(
      new RegExp(`^job-${id}-2-after-[\\w-]{22}$`),
    );
    expect(republished.deduplicated).toBe(false);
    // The old message (seq 1) publishes for the job's current message: its callback counts.
    expect(JSON.parse(message.body)).toEqual({ jobId: id, seq: 1 });
    expect(JSON.parse(republished.body)).toEqual({ jobId: id, seq: 2 });
    // The same signed delivery again publishes nothing new: QStash drops the copy.
    const accepted = app.qstash.forJob(id).length;
    expect(await outcomeOf(await redeliver(2))).toBe("not_ready");
    expect(app.qstash.forJob(id)).toHaveLength(accepted);
    expect(app.qstash.messages.at(-1)).toMatchObject({ deduplicated: true });
    expect(republished.headers["upstash-not-before"]).toBe(
      String(Math.ceil((row.resume_at?.getTime() ?? 0) / 1000)),
    );
    expect(app.model.calls()).toBe(1);
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", provider_quota_hits: 1 });
  });

  test("insufficient_quota: on-call is paged once across two jobs, without a secret in the payload", async () => {
    const a = await queuedJob();
    const b = await queuedJob();
    app.model.failNext("insufficient_quota", 2);

    expect(await outcomeOf(await app.deliver(a.message))).toBe("requeued");
    // The provider gate (held for PROVIDER_BACKOFF_SECONDS) lapses; the next worker asks again.
    await app.redis.del("quota-jobs:provider:resume-at");
    expect(await outcomeOf(await app.deliver(b.message))).toBe("requeued");
    expect(app.model.calls()).toBe(2);

    for (const job of [a, b]) {
      expect(await app.jobRow(job.id)).toMatchObject({ status: "queued", provider_quota_hits: 1 });
    }
    const pages = app.webhook.ofKind("provider_quota_exhausted");
    expect(pages).toHaveLength(1);
    expect(app.webhook.payloads).toHaveLength(1);
    const text = JSON.stringify(pages[0]);
    expect(text).toContain("insufficient_quota");
    expect(text).toContain(a.id);
    for (const secret of [
      OPENAI_API_KEY,
      JWT_SECRET,
      CRON_SECRET,
      DEV_TOKEN,
      DEV_SIGNING_KEYS.current,
      DEV_SIGNING_KEYS.next,
      app.env.SUPABASE_SECRET_KEY ?? "",
      a.prompt,
      b.prompt,
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  test("a revoked key (the model answers 401 invalid_api_key) in ten jobs: each failed provider_misconfigured and refunded, one page that says what to do, nothing in the user roll-up, the gate open", async () => {
    const jobs = await Promise.all(Array.from({ length: 10 }, () => queuedJob()));
    app.model.revokeKey(OPENAI_API_KEY);

    const answers = await Promise.all(jobs.map((j) => app.deliver(j.message)));
    for (const res of answers) {
      expect(res.status).toBe(200); // QStash stops: no retry fixes a revoked key
      expect(await outcomeOf(res)).toBe("failed");
    }
    expect(app.model.calls()).toBe(10);

    for (const j of jobs) {
      const row = await app.jobRow(j.id);
      expect(row).toMatchObject({
        status: "failed",
        failure_reason: "provider_misconfigured",
        attempts: 1,
      });
      expect(row.refunded_at).not.toBeNull();
      expect(row.last_error).toContain("invalid_api_key");
      expect(await app.unitsUsed(j.user.id)).toBe(0);
    }
    const first = jobs[0];
    if (!first) throw new Error("no job");
    const shown = await (
      await app.call("job", `/api/jobs/${first.id}`, { headers: first.user.headers })
    ).json();
    expect(shown.job).toMatchObject({
      status: "failed",
      failureReason: "provider_misconfigured",
      quotaRefunded: true,
    });
    const { rows: drift } = await app.admin.query("select * from public.quota_drift");
    expect(drift).toEqual([]);

    // One page for ten jobs, and nothing else: no user caused it.
    const pages = app.webhook.ofKind("provider_misconfigured");
    expect(pages).toHaveLength(1);
    expect(app.webhook.payloads).toHaveLength(1);
    const text = JSON.stringify(pages[0]);
    expect(text).toContain("401");
    expect(text).toContain("invalid_api_key");
    expect(text).toContain("rotate OPENAI_API_KEY");
    expect(await app.redis.keys("quota-jobs:alert:rollup:*")).toEqual([]);
    // The gate is shared by every deployment: a key of this one must not hold back the others.
    expect(await app.redis.get("quota-jobs:provider:resume-at")).toBeNull();

    // The 401 echoes the key masked (first 8 and last 4 characters): neither part leaves.
    const logs = app.logs.join("\n");
    for (const secret of [
      OPENAI_API_KEY,
      OPENAI_API_KEY.slice(0, 8),
      `${OPENAI_API_KEY.slice(-4)}.`,
      ...jobs.map((j) => j.prompt),
    ]) {
      expect(text).not.toContain(secret);
      expect(logs).not.toContain(secret);
      for (const j of jobs) expect((await app.jobRow(j.id)).last_error).not.toContain(secret);
    }
  });

  test("an unknown model (404 model_not_found) and an unsupported region (403): provider_misconfigured, refunded, one page each naming OPENAI_MODEL / the region", async () => {
    const a = await queuedJob();
    const b = await queuedJob();
    app.model.failNext("model_not_found");
    expect(await outcomeOf(await app.deliver(a.message))).toBe("failed");
    app.model.failNext("unsupported_country_region_territory");
    expect(await outcomeOf(await app.deliver(b.message))).toBe("failed");
    for (const j of [a, b]) {
      const row = await app.jobRow(j.id);
      expect(row).toMatchObject({ status: "failed", failure_reason: "provider_misconfigured" });
      expect(row.refunded_at).not.toBeNull();
      expect(await app.unitsUsed(j.user.id)).toBe(0);
    }
    const pages = app.webhook.ofKind("provider_misconfigured").map((p) => p.text);
    expect(pages).toHaveLength(2);
    expect(pages[0]).toContain("model_not_found");
    expect(pages[0]).toContain("OPENAI_MODEL");
    expect(pages[1]).toContain("unsupported_country_region_territory");
    expect(pages[1]).toContain("region");
    expect(await app.redis.keys("quota-jobs:alert:rollup:*")).toEqual([]);
  });

  test("gives up after PROVIDER_QUOTA_MAX_HITS (3) quota hits: failed provider_quota_exhausted, refunded once", async () => {
    const { user, id } = await queuedJob();
    app.model.failNext("rate_limit_exceeded", 3, { retryAfterSeconds: 0 });
    const outcomes: string[] = [];
    for (let i = 0; i < 3; i++) {
      outcomes.push(await outcomeOf(await app.deliver(app.qstash.latestFor(id))));
    }
    expect(outcomes).toEqual(["requeued", "requeued", "gave_up"]);
    expect(app.model.calls()).toBe(3);
    const row = await app.jobRow(id);
    expect(row).toMatchObject({
      status: "failed",
      failure_reason: "provider_quota_exhausted",
      provider_quota_hits: 3,
    });
    expect(row.refunded_at).not.toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(0);
    const events = await app.events(id);
    expect(events.filter((e) => e.to_status === "failed")).toHaveLength(1);
    // Only the two requeues published a new message.
    expect(app.qstash.forJob(id)).toHaveLength(3);

    // Any later delivery is a no-op: no model call, no second refund.
    const after = await app.deliver(app.qstash.latestFor(id), { retried: 1 });
    expect(await outcomeOf(after)).toBe("already_final");
    expect(app.model.calls()).toBe(3);
    expect(await app.unitsUsed(user.id)).toBe(0);
  });

  test("the provider gate is closed: no model call, requeued until the gate opens without a quota hit", async () => {
    const first = await queuedJob();
    app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 45 });
    expect(await outcomeOf(await app.deliver(first.message))).toBe("requeued");
    const gateUntil = (await app.jobRow(first.id)).resume_at?.getTime() ?? 0;

    const second = await queuedJob();
    const res = await app.deliver(second.message);
    expect(res.status).toBe(200);
    expect(await outcomeOf(res)).toBe("requeued");
    expect(app.model.calls()).toBe(1);
    const row = await app.jobRow(second.id);
    expect(row).toMatchObject({
      status: "queued",
      provider_quota_hits: 0,
      attempts: 1,
      publish_seq: 2,
    });
    expect(Math.abs((row.resume_at?.getTime() ?? 0) - gateUntil)).toBeLessThan(1000);
    const requeued = app.qstash.latestFor(second.id);
    expect(requeued.headers["upstash-not-before"]).toBe(
      String(Math.ceil((row.resume_at?.getTime() ?? 0) / 1000)),
    );
    const job = (
      await (
        await app.call("job", `/api/jobs/${second.id}`, { headers: second.user.headers })
      ).json()
    ).job;
    expect(job.phase).toBe("waiting_for_provider");
  });

  test("a completion racing a cancel: canceled wins, refunded once, the late output dropped", async () => {
    const { user, id, cancel, delivery } = await canceledWhileSlow(800);
    expect((await cancel.json()).quotaRefunded).toBe(true);

    const res = await delivery;
    expect(res.status).toBe(200);
    expect(await outcomeOf(res)).toBe("late_output_dropped");
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "canceled", output: null });
    expect(row.refunded_at).not.toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(0);
    const events = (await app.events(id)).map((e) => e.event);
    // The attempt's usage is appended after the cancel: the completion that would have carried
    // it was refused.
    expect(events).toEqual(["enqueued", "started", "canceled", "attempt_usage"]);
  });
});

/** Handlers whose worker writes progress only once a minute (never, within a test). */
function slowProgress() {
  const { deps, workerDeps } = app.makeDeps({ PROGRESS_INTERVAL_MS: "60000" });
  return { handlers: app.handlersFor(deps, workerDeps) };
}

/**
 * A job whose model call takes `delayMs`, delivered to a {@link slowProgress} worker and canceled
 * (200) once the call has started; `delivery` is the worker's answer still to come.
 */
async function canceledWhileSlow(delayMs: number) {
  const { user, id, message } = await queuedJob();
  app.model.failNext("slow", 1, { delayMs });
  const { handlers } = slowProgress();
  const delivery = app.deliver(message, { handlers });
  await eventually(() => app.model.calls() === 1, { what: "the model call to start" });
  const cancel = await app.cancel(user, id);
  expect(cancel.status).toBe(200);
  return { user, id, cancel, delivery };
}

test("Redis down: the worker still runs the job (the gate reads open) and pages by log line", async () => {
  const { id, message } = await queuedJob();
  const noRedis = await app.redisDown();
  const handlers = app.handlersFor(noRedis.deps, noRedis.workerDeps);
  const res = await app.deliver(message, { handlers });
  expect(res.status).toBe(200);
  expect((await app.jobRow(id)).status).toBe("succeeded");

  const other = await queuedJob();
  app.model.failNext("insufficient_quota");
  expect(await outcomeOf(await app.deliver(other.message, { handlers }))).toBe("requeued");
  const logged = app.logs
    .map((line) => JSON.parse(line))
    .filter((l) => l.event === "alert" && l.kind === "provider_quota_exhausted");
  expect(logged).toMatchObject([{ level: "error", delivery: "redis_unavailable" }]);
});

describe("POST /api/worker: database errors are never a 200", () => {
  test("the database is down when the delivery arrives: 503, the model is not called", async () => {
    const { id, message } = await queuedJob();
    const down = await app.databaseDown();
    const res = await app.deliver(message, {
      handlers: app.handlersFor(down.deps, down.workerDeps),
    });
    expect(res.status).toBe(503);
    expect((await res.json()).error.code).toBe("unavailable");
    expect(app.model.calls()).toBe(0);
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", attempts: 0 });
  });

  test("the database fails the completion write: 503 (QStash retries), the job is not reported done", async () => {
    const { id, message } = await queuedJob();
    const down = await app.databaseDown();
    // Claim on the real database, then lose it for the write that records the output.
    const workerDeps = {
      ...app.workerDeps,
      jobs: { ...app.workerDeps.jobs, complete: down.workerDeps.jobs.complete },
    };
    const res = await app.deliver(message, { handlers: app.handlersFor(app.deps, workerDeps) });
    expect(res.status).toBe(503);
    expect(app.model.calls()).toBe(1);
    // Still claimed: the lease runs out and QStash's retry (or the sweeper) decides.
    expect(await app.jobRow(id)).toMatchObject({ status: "running", output: null, attempts: 1 });
  });
});
