/**
 * A user's erasure over HTTP on the whole local stack: while one of their jobs streams from the
 * model, `DELETE /api/me` cancels it (the worker's next progress write finds it gone and cuts the
 * stream, as after a cancel), erases every row about them and their account; then nothing of
 * their text is anywhere in the database, and the token that outlives the account can start
 * nothing and read nothing.
 */
import { expect, test } from "vitest";
import { findMarker, newMarker } from "../support/personal-data.ts";
import { expectAllSettled, newUser, until, useStack } from "../support/stack.ts";

const fixture = useStack({
  env: { WORKER_MAX_DURATION_SECONDS: "40", MODEL_TIMEOUT_MS: "30000", JOB_LEASE_SECONDS: "45" },
});
const CHUNK_MS = 50;

test("DELETE /api/me while a job streams: the stream is cut, the user and their text are gone, the token can do nothing more", async () => {
  const { stack } = fixture;
  stack.model.reset();
  stack.model.setChunkMs(CHUNK_MS);
  const marker = newMarker();
  const { api, userId } = await newUser(stack, "pro");
  const created = await api.enqueue(`[fake:tokens:5000] An endless essay about ${marker}`);
  expect(created.status).toBe(202);
  const id = created.body.job.id as string;
  await api.waitFor(id, (job) => job.status === "running" && !!job.partialOutput, "partial output");
  expect(await findMarker(stack.sql, marker)).toContain("public.generation_jobs");

  const erased = await api.call("DELETE", "/api/me");

  expect(erased.status).toBe(200);
  expect(erased.body).toEqual({ deleted: true, jobs: 1, canceledJobs: 1, accountDeleted: true });
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
}, 120_000);
