/**
 * POST /api/jobs, in-process: reservation, publish, idempotency, every refusal, and what stays
 * reserved when QStash does not take the message (nothing).
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { mintAnonKey } from "../../dev/postgrest/auth.ts";
import { mintServiceRoleKey } from "../../dev/postgrest/index.ts";
import { mintUserToken } from "../../dev/token.ts";
import { APP_URL, JOB_KEYS, JWT_SECRET, USAGE_KEYS, useApi } from "../support/api.ts";

const app = useApi();

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  const body = (await res.json()) as { error: { code: string; message: string } };
  expect(Object.keys(body.error).sort()).toEqual(["code", "message"]);
  return body.error;
}

const jobsFor = async (userId: string) =>
  (
    await app.admin.query<{ n: number }>(
      "select count(*)::int as n from public.generation_jobs where user_id = $1",
      [userId],
    )
  ).rows[0]?.n;

describe("POST /api/jobs", () => {
  test("202 {job, usage}: one unit reserved, one message to the worker with retries, failure callback and dedup id", async () => {
    const user = await app.newUser();
    const res = await app.enqueue(user, "Write a haiku about queues");
    expect(res.status).toBe(202);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    const body = await res.json();
    expect(Object.keys(body).sort()).toEqual(["job", "usage"]);
    expect(Object.keys(body.job).sort()).toEqual(JOB_KEYS);
    expect(Object.keys(body.usage).sort()).toEqual(USAGE_KEYS);
    expect(body.job).toMatchObject({
      status: "queued",
      phase: "queued",
      attempts: 0,
      providerQuotaHits: 0,
      resumeAt: null,
      failureReason: null,
      quotaRefunded: false,
      output: null,
      startedAt: null,
      finishedAt: null,
    });
    expect(body.usage).toMatchObject({ plan: "free", used: 1, limit: 1, active: 1, maxActive: 1 });

    const row = await app.jobRow(body.job.id);
    expect(row).toMatchObject({ user_id: user.id, status: "queued", publish_seq: 1 });
    expect(await app.unitsUsed(user.id)).toBe(1);

    const published = app.qstash.forJob(body.job.id);
    expect(published).toHaveLength(1);
    const [message] = published;
    expect(message?.destination).toBe(`${APP_URL}/api/worker`);
    expect(JSON.parse(message?.body ?? "")).toEqual({ jobId: body.job.id, seq: 1 });
    expect(message?.headers).toMatchObject({
      "content-type": "application/json",
      "upstash-retries": "1",
      "upstash-failure-callback": `${APP_URL}/api/dlq`,
      "upstash-deduplication-id": `job-${body.job.id}-1`,
    });
    expect(message?.headers["upstash-not-before"]).toBeUndefined();
  });

  test("a replay with the same Idempotency-Key and body: 200 with the same job, nothing reserved again", async () => {
    const user = await app.newUser("pro");
    const key = `key-${randomUUID()}`;
    const first = await app.enqueue(user, "same prompt", { "idempotency-key": key });
    expect(first.status).toBe(202);
    const firstBody = await first.json();

    const replay = await app.enqueue(user, "same prompt", { "idempotency-key": key });
    expect(replay.status).toBe(200);
    const replayBody = await replay.json();
    expect(replayBody.job.id).toBe(firstBody.job.id);
    expect(replayBody.usage).toMatchObject({ used: 1, active: 1 });
    expect(await app.unitsUsed(user.id)).toBe(1);
    expect(await jobsFor(user.id)).toBe(1);
    // At most one message stands for the job: a republish under the same id is dropped.
    expect(app.qstash.forJob(firstBody.job.id)).toHaveLength(1);
  });

  test("422 idempotency_key_reused: the same key with another prompt reserves nothing", async () => {
    const user = await app.newUser("pro");
    const key = `key-${randomUUID()}`;
    expect((await app.enqueue(user, "first prompt", { "idempotency-key": key })).status).toBe(202);
    const res = await app.enqueue(user, "another prompt", { "idempotency-key": key });
    expect(res.status).toBe(422);
    expect((await errorOf(res)).code).toBe("idempotency_key_reused");
    expect(await app.unitsUsed(user.id)).toBe(1);
    expect(await jobsFor(user.id)).toBe(1);
  });

  test("400 invalid_idempotency_key for a key that is not 1 to 255 visible ASCII characters", async () => {
    const user = await app.newUser();
    for (const key of ["x".repeat(256), "has space"]) {
      const res = await app.enqueue(user, "a prompt", { "idempotency-key": key });
      expect(res.status).toBe(400);
      expect((await errorOf(res)).code).toBe("invalid_idempotency_key");
    }
    expect(await app.unitsUsed(user.id)).toBe(0);
  });

  test("400 invalid_json for a body that is not JSON, or empty", async () => {
    const user = await app.newUser();
    for (const body of ["{not json", "", '{"prompt": "unterminated']) {
      const res = await app.call("jobs", "/api/jobs", {
        method: "POST",
        headers: { ...user.headers, "content-type": "application/json" },
        body,
      });
      expect(res.status).toBe(400);
      expect((await errorOf(res)).code).toBe("invalid_json");
    }
    expect(await jobsFor(user.id)).toBe(0);
  });

  test("400 invalid_json for a body that is not UTF-8", async () => {
    const user = await app.newUser();
    const res = await app.call("jobs", "/api/jobs", {
      method: "POST",
      headers: { ...user.headers, "content-type": "application/json" },
      body: new Uint8Array([0x7b, 0x22, 0x70, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
    });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).code).toBe("invalid_json");
  });

  test("concurrent requests of one user: exactly max_active jobs reserved, the rest 409, no drift", async () => {
    const user = await app.newUser("pro");
    const responses = await Promise.all(
      Array.from({ length: 8 }, (_, i) => app.enqueue(user, `racing ${i}`)),
    );
    const statuses = responses.map((r) => r.status).sort();
    expect(statuses).toEqual([202, 202, 202, 409, 409, 409, 409, 409]);
    expect(await app.unitsUsed(user.id)).toBe(3);
    expect(await jobsFor(user.id)).toBe(3);
  });

  test.each([
    ["empty", { prompt: "" }],
    ["whitespace only", { prompt: " \n\t  " }],
    ["8,001 characters", { prompt: "x".repeat(8001) }],
    ["a number", { prompt: 42 }],
    ["null", { prompt: null }],
    ["missing", { text: "hello" }],
    ["an array body", ["hello"]],
    ["a NUL character", { prompt: "before\u0000after" }],
    ["a control character", { prompt: "bell \u0007 rings" }],
    ["a lone surrogate", { prompt: "half an emoji \ud83d" }],
  ])("400 invalid_prompt: %s, nothing reserved", async (_what, body) => {
    const user = await app.newUser();
    const res = await app.call("jobs", "/api/jobs", {
      method: "POST",
      headers: { ...user.headers, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).code).toBe("invalid_prompt");
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(await jobsFor(user.id)).toBe(0);
    expect(app.qstash.messages).toHaveLength(0);
  });

  test("exactly 8,000 characters is accepted, counted in characters not bytes (8,000 emoji)", async () => {
    const user = await app.newUser("pro");
    expect((await app.enqueue(user, "y".repeat(8000))).status).toBe(202);
    const emoji = "😀".repeat(8000); // 32,000 bytes of UTF-8, 16,000 UTF-16 units
    const res = await app.enqueue(user, emoji);
    expect(res.status).toBe(202);
    const { job } = await res.json();
    const { rows } = await app.admin.query(
      "select char_length(prompt)::int as n from public.generation_jobs where id = $1",
      [job.id],
    );
    expect(rows[0].n).toBe(8000);
  });

  test.each(["free", "pro", "team"] as const)(
    "a prompt with a special-token string is plain text: 202 on the %s plan, no error logged",
    async (plan) => {
      // OpenAI encodes `<|endoftext|>` in a user message as plain text; a tokenizer that
      // refuses it once made this a 500.
      const user = await app.newUser(plan);
      const prompt = "Explain <|endoftext|> please";
      const res = await app.enqueue(user, prompt);
      expect(res.status).toBe(202);
      const { job } = await res.json();
      if (plan === "team") {
        // The hold's prompt part: its UTF-8 bytes + 8 (docs/DESIGN.md#metering-hold-and-capture).
        expect(job.hold).toBe(Buffer.byteLength(prompt) + 8 + 2048);
      }
      expect(app.logs.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
    },
  );

  test("413 payload_too_large for a 10 MB body, refused without buffering it all", async () => {
    const user = await app.newUser();
    const res = await app.call("jobs", "/api/jobs", {
      method: "POST",
      headers: { ...user.headers, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "x".repeat(10 * 1024 * 1024) }),
    });
    expect(res.status).toBe(413);
    expect((await errorOf(res)).code).toBe("payload_too_large");
    expect(await jobsFor(user.id)).toBe(0);
  });

  test("415 unsupported_media_type without a JSON Content-Type", async () => {
    const user = await app.newUser();
    const variants: Array<Record<string, string>> = [{ "content-type": "text/plain" }, {}];
    for (const headers of variants) {
      const res = await app.call("jobs", "/api/jobs", {
        method: "POST",
        headers: { ...user.headers, ...headers },
        body: JSON.stringify({ prompt: "hello" }),
      });
      expect(res.status).toBe(415);
      expect((await errorOf(res)).code).toBe("unsupported_media_type");
    }
    expect(await jobsFor(user.id)).toBe(0);
  });

  describe("401 unauthorized", () => {
    const cases: Array<[string, (userId: string) => Promise<string | null>]> = [
      ["no Authorization header", async () => null],
      ["a garbage token", async () => "Bearer not.a.jwt"],
      ["a Basic credential", async () => "Basic dXNlcjpwYXNz"],
      [
        "an expired token",
        async (userId) =>
          `Bearer ${await mintUserToken({
            secret: JWT_SECRET,
            userId,
            issuer: app.issuer,
            now: new Date(Date.now() - 7200_000),
            expiresInSeconds: 3600,
          })}`,
      ],
      [
        "a token signed with another secret",
        async (userId) =>
          `Bearer ${await mintUserToken({
            secret: "another-secret-that-is-also-32-chars-long!!",
            userId,
            issuer: app.issuer,
          })}`,
      ],
      ["the anon key", async () => `Bearer ${await mintAnonKey(JWT_SECRET)}`],
      ["the service_role key", async () => `Bearer ${await mintServiceRoleKey(JWT_SECRET)}`],
      [
        "a token with role anon",
        async (userId) =>
          `Bearer ${await mintUserToken({ secret: JWT_SECRET, userId, issuer: app.issuer, role: "anon" })}`,
      ],
      [
        "a token with role service_role",
        async (userId) =>
          `Bearer ${await mintUserToken({ secret: JWT_SECRET, userId, issuer: app.issuer, role: "service_role" })}`,
      ],
      [
        "a token for another audience",
        async (userId) =>
          `Bearer ${await mintUserToken({ secret: JWT_SECRET, userId, issuer: app.issuer, aud: "anon" })}`,
      ],
    ];
    test.each(cases)("%s: nothing reserved", async (_what, authorization) => {
      const userId = randomUUID();
      const auth = await authorization(userId);
      const res = await app.call("jobs", "/api/jobs", {
        method: "POST",
        headers: { "content-type": "application/json", ...(auth ? { authorization: auth } : {}) },
        body: JSON.stringify({ prompt: "hello" }),
      });
      expect(res.status).toBe(401);
      expect(res.headers.get("www-authenticate")).toBe("Bearer");
      expect((await errorOf(res)).code).toBe("unauthorized");
      expect(await jobsFor(userId)).toBe(0);
    });
  });

  test("403 user_not_found: a valid token for an account that does not exist (never created, or deleted) reserves nothing", async () => {
    const never = randomUUID();
    const deleted = await app.newUser("pro");
    await app.admin.query("delete from auth.users where id = $1", [deleted.id]);
    for (const userId of [never, deleted.id]) {
      const token = await mintUserToken({ secret: JWT_SECRET, userId, issuer: app.issuer });
      const res = await app.enqueue(
        { id: userId, token, headers: { authorization: `Bearer ${token}` } },
        "hello",
      );
      expect(res.status).toBe(403);
      expect(await errorOf(res)).toEqual({
        code: "user_not_found",
        message:
          "This account does not exist (it may have been deleted). Sign in with an existing account.",
      });
      expect(await jobsFor(userId)).toBe(0);
    }
    expect(app.qstash.messages).toHaveLength(0);
  });

  test("409 too_many_active_jobs (pro: 3 active) reserves nothing", async () => {
    const user = await app.newUser("pro");
    for (let i = 0; i < 3; i++) await app.enqueueOk(user);
    const res = await app.enqueue(user, "a fourth one");
    expect(res.status).toBe(409);
    const body = await res.json();
    expect(body.error.code).toBe("too_many_active_jobs");
    expect(body.usage).toMatchObject({ used: 3, active: 3, maxActive: 3 });
    expect(await app.unitsUsed(user.id)).toBe(3);
    expect(await jobsFor(user.id)).toBe(3);
  });

  test("429 quota_exceeded with Retry-After to the period reset (free: next UTC midnight)", async () => {
    const user = await app.newUser();
    await app.enqueueOk(user);
    const before = Date.now();
    const res = await app.enqueue(user, "one more today");
    expect(res.status).toBe(429);
    const body = await res.json();
    expect(body.error.code).toBe("quota_exceeded");
    const midnight = new Date(before);
    midnight.setUTCHours(24, 0, 0, 0);
    expect(body.usage).toMatchObject({ used: 1, limit: 1, resetsAt: midnight.toISOString() });
    const retryAfter = Number(res.headers.get("retry-after"));
    const expected = Math.ceil((midnight.getTime() - before) / 1000);
    expect(retryAfter).toBeGreaterThanOrEqual(expected - 5);
    expect(retryAfter).toBeLessThanOrEqual(expected + 1);
    expect(await app.unitsUsed(user.id)).toBe(1);
    expect(await jobsFor(user.id)).toBe(1);
  });

  test("429 quota_exceeded on a token plan when used + the hold would pass the limit; nothing held", async () => {
    const user = await app.newUser("team");
    // Leave 2,000 tokens: less than any hold (2,048 output tokens alone).
    await app.admin.query(
      `insert into public.quota_usage (user_id, period_start, meter, units_used)
       values ($1, date_trunc('month', now() at time zone 'UTC') at time zone 'UTC', 'tokens', 1998000)`,
      [user.id],
    );
    const res = await app.enqueue(user, "a short prompt");
    expect(res.status).toBe(429);
    const body = await res.json();
    expect(body.error.code).toBe("quota_exceeded");
    expect(body.error.message).toMatch(
      /^This document needs up to \d+ tokens and 2000 of your 2000000 are left/,
    );
    expect(body.usage).toMatchObject({ meter: "tokens", used: 1_998_000, limit: 2_000_000 });
    expect(await app.unitsUsed(user.id)).toBe(1_998_000);
    expect(await jobsFor(user.id)).toBe(0);
    // The quota_drift view counts only jobs: this hand-made counter is removed again.
    await app.admin.query("delete from public.quota_usage where user_id = $1", [user.id]);
  });

  test("429 rate_limited with Retry-After once a user exceeds RATE_LIMIT_REQUESTS", async () => {
    const limited = app.handlersFor(app.makeDeps({ RATE_LIMIT_REQUESTS: "2" }).deps);
    const post = (user: { headers: Record<string, string> }) =>
      app.call(
        "jobs",
        "/api/jobs",
        {
          method: "POST",
          headers: { ...user.headers, "content-type": "application/json" },
          body: JSON.stringify({ prompt: `p ${randomUUID()}` }),
        },
        limited,
      );
    // The sliding window weighs the previous window's count down and rounds it down, so posts
    // that straddle a window boundary (windows start at multiples of RATE_LIMIT_WINDOW_SECONDS,
    // 60 s) are let through once more: such a run is made again by another user. At most once:
    // the run is far shorter than a window.
    const windowOf = (t: number) => Math.floor(t / 60_000);
    let user = await app.newUser("pro");
    let statuses: number[] = [];
    let res = new Response();
    for (let attempt = 0; attempt < 2; attempt++) {
      if (attempt > 0) user = await app.newUser("pro");
      const started = Date.now();
      statuses = [(await post(user)).status, (await post(user)).status];
      res = await post(user);
      if (windowOf(started) === windowOf(Date.now())) break;
    }
    expect(statuses).toEqual([202, 202]);
    expect(res.status).toBe(429);
    expect((await errorOf(res)).code).toBe("rate_limited");
    const retryAfter = Number(res.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(await app.unitsUsed(user.id)).toBe(2);
    // Another user is not limited by this one.
    const other = await app.newUser();
    const otherRes = await app.enqueue(other, "mine", {}, limited);
    expect(otherRes.status).toBe(202);
  });

  describe("503 unavailable when QStash does not take the message: nothing stays reserved", () => {
    test.each([
      ["500", "answers 500"],
      ["429", "answers 429 (daily limit)"],
      ["network", "cannot be reached"],
    ] as const)("QStash %s (%s): job failed publish_failed and refunded", async (failure, _how) => {
      const user = await app.newUser();
      app.qstash.failWith(failure);
      const res = await app.enqueue(user, "a prompt QStash never sees");
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBe("5");
      expect((await errorOf(res)).code).toBe("unavailable");

      const { rows } = await app.admin.query(
        "select * from public.generation_jobs where user_id = $1",
        [user.id],
      );
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ status: "failed", failure_reason: "publish_failed" });
      expect(rows[0].refunded_at).not.toBeNull();
      expect(await app.unitsUsed(user.id)).toBe(0);

      // The unit is really back: the user's one daily job can be started now.
      app.qstash.failWith(null);
      const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
      expect(usage).toMatchObject({ used: 0, active: 0 });
      expect((await app.enqueue(user, "second try")).status).toBe(202);
    });
  });

  test("the client's retry after a 503 with the same Idempotency-Key starts the job (nothing was charged the first time)", async () => {
    const user = await app.newUser();
    const key = { "idempotency-key": "submit-1" };
    app.qstash.failWith("500");
    expect((await app.enqueue(user, "retry me", key)).status).toBe(503);
    app.qstash.failWith(null);
    const retry = await app.enqueue(user, "retry me", key);
    expect(retry.status).toBe(202);
    expect((await retry.json()).job).toMatchObject({ status: "queued" });
    const again = await app.enqueue(user, "retry me", key);
    expect(again.status).toBe(200);
    expect(await app.unitsUsed(user.id)).toBe(1);
  });

  test("Redis down: jobs still start (the rate limit fails open; quota is enforced in Postgres)", async () => {
    const noRedis = app.handlersFor((await app.redisDown()).deps);
    const user = await app.newUser();
    const post = (prompt: string) => app.enqueue(user, prompt, {}, noRedis);
    expect((await post("first")).status).toBe(202);
    expect((await post("second")).status).toBe(429); // the free plan's one unit a day still holds
    expect(await app.unitsUsed(user.id)).toBe(1);
  });

  test("503 unavailable (never a success) when the database is down, nothing published", async () => {
    const down = app.handlersFor((await app.databaseDown()).deps);
    const user = await app.newUser();
    const res = await app.enqueue(user, "hello", {}, down);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBeTruthy();
    expect((await errorOf(res)).code).toBe("unavailable");
    expect(app.qstash.messages).toHaveLength(0);
    expect(await jobsFor(user.id)).toBe(0);
  });
});
