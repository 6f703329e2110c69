/**
 * A user's erasure over HTTP on the whole local stack: while one of their jobs streams from the
 * model, `DELETE /api/me` cancels it (the worker's next progress write finds it gone and cuts the
 * stream, as after a cancel), erases every row about them and their account; then nothing of
 * their text is anywhere in the database, no Redis key names their id, no log line written after
 * does, and the token that outlives the account can start nothing and read nothing.
 */
import { expect, test } from "vitest";
import type { Stack } from "../../dev/stack.ts";
import { createRedis } from "../../lib/redis.ts";
import { findMarker, newMarker } from "../support/personal-data.ts";
import { expectAllSettled, newUser, until, useStack } from "../support/stack.ts";

const fixture = useStack({
  env: { WORKER_MAX_DURATION_SECONDS: "40", MODEL_TIMEOUT_MS: "30000", JOB_LEASE_SECONDS: "45" },
});
const CHUNK_MS = 50;

/** The stack's Redis keys whose name or value holds `needle`, read through its REST endpoint. */
async function redisKeysNaming(stack: Stack, needle: string): Promise<string[]> {
  const redis = createRedis({
    url: stack.urls.redisRest,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN ?? "",
  });
  const found: string[] = [];
  for (const key of await redis.keys("*")) {
    const type = await redis.type(key);
    const value =
      type === "zset"
        ? await redis.zrange(key, 0, -1)
        : type === "hash"
          ? await redis.hgetall(key)
          : type === "set"
            ? await redis.smembers(key)
            : type === "string"
              ? await redis.get(key)
              : type;
    if (key.includes(needle) || JSON.stringify(value).includes(needle)) found.push(key);
  }
  return found.sort();
}

test("DELETE /api/me while a job streams: the stream is cut, the user and their text are gone, the token can do nothing more", async () => {
  const { stack } = fixture;
  stack.model.reset();
  stack.model.setChunkMs(CHUNK_MS);
  const marker = newMarker();
  const { api, userId } = await newUser(stack, "pro");
  // A refusal first: the worker counts it into the alert roll-up under the user's id.
  const refused = await api.enqueue(`[fake:refuse] ${marker}`);
  expect(refused.status).toBe(202);
  expect(await api.waitTerminal(refused.body.job.id)).toMatchObject({
    status: "failed",
    failureReason: "model_refused",
  });
  // The search can fail: the roll-up names the user until the erasure.
  expect(await redisKeysNaming(stack, userId)).toHaveLength(1);
  const created = await api.enqueue(`[fake:tokens:5000] An endless essay about ${marker}`);
  expect(created.status).toBe(202);
  const id = created.body.job.id as string;
  await api.waitFor(id, (job) => job.status === "running" && !!job.partialOutput, "partial output");
  expect(await findMarker(stack.sql, marker)).toContain("public.generation_jobs");

  const erased = await api.call("DELETE", "/api/me");

  expect(erased.status).toBe(200);
  expect(erased.body).toEqual({ deleted: true, jobs: 2, canceledJobs: 1, accountDeleted: true });
  expect(await redisKeysNaming(stack, userId)).toEqual([]);
  // The model stops streaming: the call ends long before its 5000 tokens (250 s at 50 ms).
  const st = await until(
    async () => stack.model.stats(),
    (s) => s.requests.length > 0,
    { timeoutMs: 10_000, intervalMs: 20, what: "the stream to be cut" },
  );
  expect(st.streamedTokens).toBeLessThan(5000);
  expect(await findMarker(stack.sql, marker)).toEqual([]);
  const { rows } = await stack.sql.query(
    `select (select count(*)::int from public.generation_jobs where user_id = $1) as jobs,
            (select count(*)::int from public.job_events where user_id = $1) as events,
            (select count(*)::int from auth.users where id = $1) as account`,
    [userId],
  );
  expect(rows[0]).toEqual({ jobs: 0, events: 0, account: 0 });

  // The token outlives the account: nothing to start, nothing to read, a second DELETE is zeros.
  const again = await api.enqueue("after the erasure");
  expect(again.status).toBe(403);
  expect(again.body.error.code).toBe("user_not_found");
  expect((await api.job(id)).status).toBe(404);
  const exported = await api.call("GET", "/api/me/export");
  expect(exported.status).toBe(200);
  expect(exported.body.jobs).toEqual([]);
  expect((await api.call("DELETE", "/api/me")).body).toMatchObject({
    jobs: 0,
    accountDeleted: false,
  });
  await expectAllSettled(stack);
  // Nothing after the erasure names the user; log lines never did (they carry a pseudonym).
  expect(await redisKeysNaming(stack, userId)).toEqual([]);
  const appLines = fixture.logs.filter((l) => l.includes('"event":"job_enqueued"'));
  expect(appLines.length).toBeGreaterThanOrEqual(2);
  expect(fixture.logs.filter((l) => l.includes(userId))).toEqual([]);
}, 120_000);
