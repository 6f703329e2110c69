import { randomUUID } from "node:crypto";
import { HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { type RunningUpstashRedis, startUpstashRedis } from "../../dev/upstash-redis/index.ts";
import { type RunningRedisServer, startRedisServer } from "../../dev/upstash-redis/redis-server.ts";
import { type Alert, type AlerterOptions, createAlerter } from "../../lib/alerts.ts";
import { createRedis } from "../../lib/redis.ts";
import { captureLogLines } from "../support/log-lines.ts";
import { freePort } from "../support/ports.ts";

// Dedup and throttle run on a real redis-server behind the Upstash REST stand-in; msw plays
// the Slack incoming webhook (200 "ok", errors as plain-text codes, like Slack).
const token = "unit-test-upstash-token";
const webhookUrl = "https://hooks.slack.com/services/T000/B000/XXXXXXXX";
let redisServer: RunningRedisServer;
let rest: RunningUpstashRedis;
let posted: unknown[] = [];
const msw = setupServer();

beforeAll(async () => {
  redisServer = await startRedisServer({ port: await freePort() });
  rest = await startUpstashRedis({ port: await freePort(), redisUrl: redisServer.url, token });
  msw.listen({
    onUnhandledRequest: (req, print) =>
      new URL(req.url).hostname === "127.0.0.1" ? undefined : print.error(),
  });
});
afterAll(async () => {
  msw.close();
  await rest?.close();
  await redisServer?.stop();
});

const lines = captureLogLines();
beforeEach(() => {
  posted = [];
  msw.use(
    http.post(webhookUrl, async ({ request }) => {
      posted.push(await request.json());
      return new HttpResponse("ok", { status: 200, headers: { "content-type": "text/plain" } });
    }),
  );
});
afterEach(() => msw.resetHandlers());

function alerter(options: Partial<AlerterOptions> = {}) {
  return createAlerter({
    redis: createRedis({ url: rest.url, token }),
    webhookUrl,
    throttleSeconds: 900,
    prefix: `test:${randomUUID()}`,
    ...options,
  });
}

/** An alert of any kind, its fields as given. */
const alertOf = (
  kind: Alert["kind"],
  dedupKey: string,
  title: string,
  fields: Alert["fields"],
): Alert => ({ kind, dedupKey, title, fields });

const dlq = (jobId: string, extra: Alert["fields"] = {}): Alert =>
  alertOf("dlq_failure", jobId, "Job delivery failed after all retries", {
    jobId,
    userId: randomUUID(),
    status: 503,
    retried: 1,
    dlqId: "1725323658779-0",
    ...extra,
  });

describe("createAlerter", () => {
  test("posts a Slack-compatible message with the fields", async () => {
    const jobId = randomUUID();
    expect(await alerter().send(dlq(jobId))).toBe("sent");
    expect(posted).toHaveLength(1);
    const message = posted[0] as {
      text: string;
      blocks: { type: string; fields?: { text: string }[] }[];
    };
    expect(message.text).toBe("[dlq_failure] Job delivery failed after all retries");
    const section = message.blocks.find((b) => b.type === "section");
    expect(section?.fields?.map((f) => f.text)).toContain(`*jobId*\n${jobId}`);
    expect(section?.fields?.map((f) => f.text)).toContain("*status*\n503");
  });

  test("no prompt, output or secret reaches the webhook", async () => {
    const jwt =
      "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    await alerter().send(
      dlq(randomUUID(), {
        prompt: "my private medical question",
        output: "the generated answer",
        apiKey: "sk-proj-abcdefghijklmnop",
        note: `request had Authorization: Bearer ${jwt}`,
      }),
    );
    const text = JSON.stringify(posted);
    for (const secret of ["medical", "generated answer", "sk-proj-abcdefghijklmnop", jwt])
      expect(text).not.toContain(secret);
    expect(text).toContain("[redacted]");
  });

  test("the same dedup key is sent once", async () => {
    const a = alerter();
    const jobId = randomUUID();
    expect(await a.send(dlq(jobId))).toBe("sent");
    expect(await a.send(dlq(jobId))).toBe("deduplicated");
    expect(await a.send(dlq(randomUUID()))).toBe("sent");
    expect(posted).toHaveLength(2);
  });

  test("dedup is shared between instances (two functions, one Redis)", async () => {
    const prefix = `test:${randomUUID()}`;
    const jobId = randomUUID();
    expect(await alerter({ prefix }).send(dlq(jobId))).toBe("sent");
    expect(await alerter({ prefix }).send(dlq(jobId))).toBe("deduplicated");
  });

  test("at most maxPerWindow alerts of a kind per window; other kinds unaffected", async () => {
    const now = new Date("2026-03-01T12:00:00Z");
    const a = alerter({ maxPerWindow: 2, now: () => now });
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push(await a.send(dlq(randomUUID())));
    expect(outcomes).toEqual(["sent", "sent", "throttled", "throttled", "throttled"]);
    expect(
      await a.send(alertOf("stuck_jobs", "sweep-1", "3 stuck jobs failed", { count: 3 })),
    ).toBe("sent");
    expect(posted).toHaveLength(3);
  });

  test("a new window lets alerts through again", async () => {
    const prefix = `test:${randomUUID()}`;
    let now = new Date("2026-03-01T12:00:00Z");
    const a = alerter({ prefix, maxPerWindow: 1, now: () => now });
    expect(await a.send(dlq(randomUUID()))).toBe("sent");
    expect(await a.send(dlq(randomUUID()))).toBe("throttled");
    now = new Date(now.getTime() + 900_000);
    expect(await a.send(dlq(randomUUID()))).toBe("sent");
  });

  test("webhook 500: 'failed', no throw, logged, and a later retry can still send", async () => {
    msw.use(
      http.post(
        webhookUrl,
        () =>
          new HttpResponse("rollup_error", {
            status: 500,
            headers: { "content-type": "text/plain" },
          }),
      ),
    );
    const a = alerter();
    const jobId = randomUUID();
    expect(await a.send(dlq(jobId))).toBe("failed");
    expect(lines.some((l) => l.includes('"delivery":"webhook_refused"') && l.includes(jobId))).toBe(
      true,
    );

    msw.resetHandlers();
    msw.use(
      http.post(webhookUrl, async ({ request }) => {
        posted.push(await request.json());
        return new HttpResponse("ok");
      }),
    );
    expect(await a.send(dlq(jobId))).toBe("sent");
  });

  test("webhook unreachable: 'failed', no throw", async () => {
    msw.use(http.post(webhookUrl, () => HttpResponse.error()));
    expect(await alerter().send(dlq(randomUUID()))).toBe("failed");
  });

  test("no webhook configured: one structured error log line, no prompt in it", async () => {
    const jobId = randomUUID();
    expect(
      await alerter({ webhookUrl: undefined }).send(dlq(jobId, { prompt: "my private question" })),
    ).toBe("logged");
    const line = lines.find((l) => l.includes('"event":"alert"'));
    expect(line).toBeDefined();
    const record = JSON.parse(line ?? "{}");
    expect(record).toMatchObject({
      level: "error",
      kind: "dlq_failure",
      dedup: jobId,
      delivery: "no_webhook",
    });
    expect(record.fields.jobId).toBe(jobId);
    expect(line).not.toContain("private question");
    expect(posted).toHaveLength(0);
  });

  test("Redis down: logged instead of posted unthrottled, never throws", async () => {
    const down = createRedis({ url: `http://127.0.0.1:${await freePort()}`, token });
    expect(await alerter({ redis: down }).send(dlq(randomUUID()))).toBe("logged");
    expect(posted).toHaveLength(0);
    expect(lines.some((l) => l.includes('"delivery":"redis_unavailable"'))).toBe(true);
  });
});

describe("user-caused failures: counted, summarized once per window, never paged one by one", () => {
  const t0 = new Date("2026-03-01T12:00:00Z"); // a window boundary (900 s windows)
  const later = (s: number) => new Date(t0.getTime() + s * 1000);
  /** The roll-up's window number at `later(s)` (900 s windows). */
  const windowAt = (s: number) => Math.floor(later(s).getTime() / 1000 / 900);
  const summaries = () =>
    (posted as Array<{ text: string; blocks: unknown[] }>).filter((p) =>
      p.text.startsWith("[user_failures]"),
    );

  test("50 failures of one window page nothing; the next window's first alert sends one summary with the counts and top users", async () => {
    let now = later(10);
    const a = alerter({ now: () => now });
    const flooder = randomUUID();
    const others = [randomUUID(), randomUUID()];
    for (let i = 0; i < 45; i++)
      expect(await a.record({ reason: "delivery_failed", userId: flooder })).toBe("counted");
    for (const u of others) await a.record({ reason: "model_refused", userId: u });
    for (let i = 0; i < 3; i++) await a.record({ reason: "model_refused", userId: flooder });
    expect(posted).toHaveLength(0);

    // A provider page in the same window still goes out at once: a kind of its own.
    const page = alertOf(
      "provider_quota_exhausted",
      "provider:insufficient_quota",
      "AI provider quota exhausted",
      { hits: 1 },
    );
    expect(await a.send(page)).toBe("sent");
    expect(posted).toHaveLength(1);
    expect(summaries()).toHaveLength(0);

    // The window closes; the next counted failure (another user) sends the summary once.
    now = later(900 + 5);
    expect(await a.record({ reason: "delivery_failed", userId: randomUUID() })).toBe("counted");
    await a.record({ reason: "delivery_failed", userId: randomUUID() });
    expect(await a.flush()).toBe(0);
    const [summary] = summaries();
    expect(summaries()).toHaveLength(1);
    expect(summary?.text).toBe(
      "[user_failures] 50 user-caused failure(s) from 12:00 to 12:15 UTC: delivery_failed 45, model_refused 5",
    );
    const fields = JSON.stringify(summary?.blocks);
    expect(fields).toContain(`${flooder} ×48`);
    expect(fields).toContain("*users*\\n3");
  });

  test("a quiet window is summarized by the sweeper's flush alone, exactly once however many flush at once", async () => {
    let now = later(100);
    const prefix = `test:${randomUUID()}`;
    const a = alerter({ prefix, now: () => now });
    for (let i = 0; i < 7; i++) await a.record({ reason: "delivery_failed", userId: randomUUID() });
    expect(await a.flush()).toBe(0); // the window is still open
    now = later(1000);
    // Ten function instances' cron ticks at once, one Redis.
    const sent = await Promise.all(
      Array.from({ length: 10 }, () => alerter({ prefix, now: () => now }).flush()),
    );
    expect(sent.reduce((x, y) => x + y, 0)).toBe(1);
    expect(summaries()).toHaveLength(1);
    expect(summaries()[0]?.text).toContain("7 user-caused failure(s)");
    expect(await a.flush()).toBe(0);
  });

  test("an erased user's id leaves every kept window: a later summary names them `erased` with their count, and no key holds the id", async () => {
    let now = later(100);
    const prefix = `test:${randomUUID()}`;
    const a = alerter({ prefix, now: () => now });
    const [erased, other] = [randomUUID(), randomUUID()];
    // Window 1: counted and already summarized (its keys are kept four windows after).
    await a.record({ reason: "model_refused", userId: erased });
    now = later(900 + 100);
    // Window 2, still open: the first record sends window 1's summary, which names the user.
    for (let i = 0; i < 3; i++) await a.record({ reason: "delivery_failed", userId: erased });
    await a.record({ reason: "delivery_failed", userId: other });
    expect(summaries()).toHaveLength(1);
    expect(JSON.stringify(summaries()[0]?.blocks)).toContain(`${erased} ×1`);
    const keysNaming = async (id: string) => {
      const direct = createRedis({ url: rest.url, token });
      const found: string[] = [];
      for (const k of await direct.keys(`${prefix}:*`)) {
        const type = await direct.type(k);
        const text =
          type === "zset"
            ? JSON.stringify(await direct.zrange(k, 0, -1))
            : type === "hash"
              ? JSON.stringify(await direct.hgetall(k))
              : JSON.stringify(await direct.get(k));
        if (k.includes(id) || text.includes(id)) found.push(k);
      }
      return found.sort();
    };
    expect(await keysNaming(erased)).toEqual([
      `${prefix}:rollup:${windowAt(100)}:users`,
      `${prefix}:rollup:${windowAt(1000)}:users`,
    ]);

    await a.forget(erased);

    expect(await keysNaming(erased)).toEqual([]);
    expect(await keysNaming(other)).toHaveLength(1);
    now = later(1800 + 100);
    expect(await a.flush()).toBe(1);
    const summary = summaries()[1];
    expect(summary?.text).toContain("4 user-caused failure(s)");
    const fields = JSON.stringify(summary?.blocks);
    expect(fields).toContain("erased ×3");
    expect(fields).toContain(`${other} ×1`);
    expect(fields).not.toContain(erased);
  });

  test("a webhook that fails at the flush keeps the summary for the next tick", async () => {
    let now = later(100);
    const a = alerter({ now: () => now });
    await a.record({ reason: "model_refused", userId: randomUUID() });
    now = later(950);
    msw.use(http.post(webhookUrl, () => new HttpResponse("no", { status: 500 })));
    expect(await a.flush()).toBe(0);
    msw.resetHandlers();
    msw.use(
      http.post(webhookUrl, async ({ request }) => {
        posted.push(await request.json());
        return new HttpResponse("ok");
      }),
    );
    expect(await a.flush()).toBe(1);
    expect(summaries()).toHaveLength(1);
  });

  test("the per-kind budget never hides a kind not yet reported in the window", async () => {
    const now = later(30);
    const a = alerter({ maxPerWindow: 1, now: () => now });
    expect(await a.send(dlq(randomUUID()))).toBe("sent");
    expect(await a.send(dlq(randomUUID()))).toBe("throttled");
    for (const kind of ["stuck_jobs", "provider_quota_exhausted", "some_new_kind"])
      expect(await a.send({ kind, dedupKey: "x", title: kind, fields: {} })).toBe("sent");
  });

  test("Redis down: a user failure is one error log line (its reason, no user id), never a page", async () => {
    const down = createRedis({ url: `http://127.0.0.1:${await freePort()}`, token });
    const user = randomUUID();
    expect(await alerter({ redis: down }).record({ reason: "delivery_failed", userId: user })).toBe(
      "logged",
    );
    expect(posted).toHaveLength(0);
    const line = lines.find((l) => l.includes('"event":"alert_rollup_unavailable"'));
    expect(JSON.parse(line ?? "{}")).toMatchObject({ reason: "delivery_failed" });
    expect(lines.join("\n")).not.toContain(user);
  });
});
