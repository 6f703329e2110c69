import { randomUUID } from "node:crypto";
import { delay, HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { type RunningUpstashRedis, startUpstashRedis } from "../../dev/upstash-redis/index.ts";
import { type RunningRedisServer, startRedisServer } from "../../dev/upstash-redis/redis-server.ts";
import { createProviderGate } from "../../lib/provider-gate.ts";
import { createRateLimiter, rateLimitIdentifier } from "../../lib/rate-limit.ts";
import { createRedis } from "../../lib/redis.ts";
import { captureLogLines } from "../support/log-lines.ts";
import { freePort } from "../support/ports.ts";

// A real redis-server behind the Upstash REST stand-in from dev/; msw only plays a Redis that
// hangs (it lets every other request through to the stand-in).
const token = "unit-test-upstash-token";
let redisServer: RunningRedisServer;
let rest: RunningUpstashRedis;
let downUrl: string;
const msw = setupServer();

beforeAll(async () => {
  redisServer = await startRedisServer({ port: await freePort() });
  rest = await startUpstashRedis({ port: await freePort(), redisUrl: redisServer.url, token });
  downUrl = `http://127.0.0.1:${await freePort()}`; // nothing listens there
  msw.listen({ onUnhandledRequest: "bypass" });
});
afterAll(async () => {
  msw.close();
  await rest?.close();
  await redisServer?.stop();
});
afterEach(() => msw.resetHandlers());

const lines = captureLogLines();

const redis = () => createRedis({ url: rest.url, token });
const prefix = () => `test:${randomUUID()}`;
const idKey = "unit-test-rate-limit-key";
/** A limiter of `requests` a minute under a prefix of its own. */
const perMinute = (requests: number) =>
  createRateLimiter(redis(), { idKey, requests, windowSeconds: 60, prefix: prefix() });

describe("createRateLimiter", () => {
  test("allows `requests` per window per user, then answers with a Retry-After within the window", async () => {
    const limiter = perMinute(3);
    const user = randomUUID();
    const results = [];
    for (let i = 0; i < 4; i++) results.push(await limiter.check(user));
    expect(results.slice(0, 3)).toEqual([{ ok: true }, { ok: true }, { ok: true }]);
    const blocked = results[3];
    expect(blocked?.ok).toBe(false);
    if (blocked && !blocked.ok) {
      expect(blocked.retryAfterSeconds).toBeGreaterThanOrEqual(1);
      expect(blocked.retryAfterSeconds).toBeLessThanOrEqual(60);
    }
  });

  test("users do not share a budget", async () => {
    const limiter = perMinute(1);
    const [a, b] = [randomUUID(), randomUUID()];
    expect(await limiter.check(a)).toEqual({ ok: true });
    expect((await limiter.check(a)).ok).toBe(false);
    expect(await limiter.check(b)).toEqual({ ok: true });
  });

  test("the limit is shared between instances (two functions, one Redis)", async () => {
    const p = prefix();
    const user = randomUUID();
    const one = createRateLimiter(redis(), { requests: 2, windowSeconds: 60, prefix: p, idKey });
    const two = createRateLimiter(redis(), { requests: 2, windowSeconds: 60, prefix: p, idKey });
    expect(await one.check(user)).toEqual({ ok: true });
    expect(await two.check(user)).toEqual({ ok: true });
    expect((await one.check(user)).ok).toBe(false);
  });

  test("its keys never hold the user id, and forget deletes the user's keys and no one else's", async () => {
    const p = prefix();
    const direct = redis();
    const limiter = createRateLimiter(direct, { requests: 5, windowSeconds: 60, prefix: p, idKey });
    const [user, other] = [randomUUID(), randomUUID()];
    await limiter.check(user);
    await limiter.check(other);
    const keys = await direct.keys(`${p}:*`);
    expect(keys).toHaveLength(2);
    expect(keys).toEqual(
      expect.arrayContaining(
        [user, other].map((u) => expect.stringContaining(`${p}:${rateLimitIdentifier(u, idKey)}:`)),
      ),
    );
    expect(keys.join(" ")).not.toContain(user);
    expect(rateLimitIdentifier(user, idKey)).not.toBe(rateLimitIdentifier(user, "another key"));

    await limiter.forget(user);

    const left = await direct.keys(`${p}:*`);
    expect(left).toHaveLength(1);
    expect(left[0]).toContain(rateLimitIdentifier(other, idKey));
    // The user's budget starts afresh: the count is gone, not only renamed.
    const tight = createRateLimiter(direct, { requests: 1, windowSeconds: 60, prefix: p, idKey });
    expect(await tight.check(user)).toEqual({ ok: true });
  });

  test("forget throws when Redis is unreachable (the erasure answers 503, not 200)", async () => {
    const limiter = createRateLimiter(createRedis({ url: downUrl, token }), {
      idKey,
      requests: 1,
      windowSeconds: 60,
    });
    await expect(limiter.forget(randomUUID())).rejects.toThrow();
  });

  test("Redis unreachable: fails open and logs", async () => {
    const limiter = createRateLimiter(createRedis({ url: downUrl, token }), {
      idKey,
      requests: 1,
      windowSeconds: 60,
    });
    const user = randomUUID();
    expect(await limiter.check(user)).toEqual({ ok: true });
    expect(await limiter.check(user)).toEqual({ ok: true });
    expect(
      lines.filter((l) => l.includes("rate_limit_open") && l.includes("redis_error")),
    ).toHaveLength(2);
  });

  test("Redis that never answers: fails open after the timeout and logs", async () => {
    const hangingUrl = "http://hanging-redis.test";
    msw.use(
      http.post(`${hangingUrl}/*`, async () => {
        await delay("infinite");
        return HttpResponse.json({ result: null });
      }),
    );
    const limiter = createRateLimiter(createRedis({ url: hangingUrl, token }), {
      idKey,
      requests: 1,
      windowSeconds: 60,
      timeoutMs: 100,
    });
    expect(await limiter.check(randomUUID())).toEqual({ ok: true });
    expect(lines.some((l) => l.includes("rate_limit_open"))).toBe(true);
  });
});

describe("createProviderGate", () => {
  test("open until held; then the held time; it only moves later", async () => {
    const gate = createProviderGate(redis(), prefix());
    const now = new Date();
    expect(await gate.resumeAt(now)).toBeNull();

    const inOneMinute = new Date(now.getTime() + 60_000);
    await gate.holdUntil(inOneMinute);
    expect(await gate.resumeAt(now)).toEqual(inOneMinute);

    await gate.holdUntil(new Date(now.getTime() + 10_000)); // earlier: ignored
    expect(await gate.resumeAt(now)).toEqual(inOneMinute);

    const inTwoMinutes = new Date(now.getTime() + 120_000);
    await gate.holdUntil(inTwoMinutes);
    expect(await gate.resumeAt(now)).toEqual(inTwoMinutes);

    // Once the time has passed the gate is open again.
    expect(await gate.resumeAt(new Date(inTwoMinutes.getTime() + 1))).toBeNull();
  });

  test("the hold expires by itself at the held time", async () => {
    const key = prefix();
    const client = redis();
    const at = new Date(Date.now() + 30_000);
    await createProviderGate(client, key).holdUntil(at);
    const pttl = await client.pttl(key);
    expect(pttl).toBeGreaterThan(25_000);
    expect(pttl).toBeLessThanOrEqual(30_000);
  });

  test("a time in the past holds nothing", async () => {
    const gate = createProviderGate(redis(), prefix());
    await gate.holdUntil(new Date(Date.now() - 1_000));
    expect(await gate.resumeAt()).toBeNull();
  });

  test("Redis unreachable: the gate reads open and holding does not throw", async () => {
    const gate = createProviderGate(createRedis({ url: downUrl, token }), prefix());
    await expect(gate.holdUntil(new Date(Date.now() + 60_000))).resolves.toBeUndefined();
    expect(await gate.resumeAt()).toBeNull();
    expect(lines.some((l) => l.includes("provider_gate_open"))).toBe(true);
    expect(lines.some((l) => l.includes("provider_gate_not_held"))).toBe(true);
  });
});
