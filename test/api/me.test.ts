/**
 * A user's own data, in-process: GET /api/me/export (everything stored about the caller, no one
 * else's) and DELETE /api/me (the erasure: status codes, idempotence, what a token that outlives
 * its account can still do).
 */
import { describe, expect, test } from "vitest";
import { createHandler as exportHandler } from "../../api/me/export.ts";
import { createHandler as meHandler } from "../../api/me/index.ts";
import { supabaseKeys } from "../../lib/config.ts";
import { exportUser } from "../../lib/erasure.ts";
import { createRateLimiter, rateLimitIdentifier } from "../../lib/rate-limit.ts";
import { createRedis } from "../../lib/redis.ts";
import { CRON_SECRET, type TestUser, useApi } from "../support/api.ts";
import { findInRedis } from "../support/personal-data.ts";
import { freePort } from "../support/ports.ts";

const app = useApi();
const me = (init: RequestInit = {}) =>
  meHandler(() => app.deps)(new Request("https://app.test/api/me", init));
const exported = (user?: TestUser, init: RequestInit = {}) =>
  exportHandler(() => app.deps)(
    new Request("https://app.test/api/me/export", { headers: user ? user.headers : {}, ...init }),
  );

/** A finished job of the user's (enqueue + cancel), so a pro user can have many. */
async function pastJob(user: TestUser, prompt: string): Promise<string> {
  const id = await app.enqueueOk(user, prompt);
  expect((await app.cancel(user, id)).status).toBe(200);
  return id;
}

type Export = {
  exported_at: string;
  user_id: string;
  log_pseudonym: string | null;
  plan: { plan_id: string } | null;
  usage: Array<{ units_used: number }>;
  jobs: Array<{ id: string; prompt: string; input: unknown; events: Array<{ event: string }> }>;
};

describe("GET /api/me/export", () => {
  test("every job of the caller with its input and events, their plan and usage, nothing of anyone else's", async () => {
    const user = await app.newUser("pro");
    const other = await app.newUser("pro");
    const mine = [];
    for (let i = 0; i < 4; i++) mine.push(await pastJob(user, `mine ${i} ${user.id}`));
    const active = await app.enqueueOk(user, `mine active ${user.id}`);
    const theirs = await pastJob(other, `theirs ${other.id}`);

    const res = await exported(user);

    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("content-disposition")).toMatch(/^attachment/);
    const text = await res.text();
    const body = JSON.parse(text) as Export;
    expect(body.user_id).toBe(user.id);
    // The pseudonym their log lines name them by (the enqueue's line made it).
    const enqueued = app.logs.find((l) => l.includes('"event":"job_enqueued"')) ?? "{}";
    expect(body.log_pseudonym).toMatch(/^u[0-9a-f]{32}$/);
    expect(body.log_pseudonym).toBe(JSON.parse(enqueued).user);
    expect(body.plan?.plan_id).toBe("pro");
    expect(body.usage.length).toBe(1);
    expect(body.jobs.map((j) => j.id)).toEqual([...mine, active]);
    expect(body.jobs[0]?.prompt).toBe(`mine 0 ${user.id}`);
    expect(body.jobs[0]?.input).toEqual({ prompt: `mine 0 ${user.id}` });
    expect(body.jobs[0]?.events.map((e) => e.event)).toEqual(["enqueued", "canceled"]);
    expect(text).not.toContain(other.id);
    expect(text).not.toContain(theirs);
  });

  test("pages through a large history oldest first, every job once", async () => {
    const user = await app.newUser("pro");
    const ids = [];
    for (let i = 0; i < 7; i++) ids.push(await pastJob(user, `paged ${i}`));
    const stream = await exportUser(app.deps, user.id, 2);
    const body = JSON.parse(await new Response(stream).text()) as Export;
    expect(body.jobs.map((j) => j.id)).toEqual(ids);
  });

  test("an export reads the whole history: past EXPORT_RATE_LIMIT_PER_HOUR (6) an hour, 429 rate_limited with Retry-After; another user is not held back", async () => {
    const user = await app.newUser("pro");
    const other = await app.newUser("pro");
    for (let i = 0; i < 6; i++) {
      const res = await exported(user);
      expect(res.status).toBe(200);
      await res.body?.cancel();
    }
    const refused = await exported(user);
    expect(refused.status).toBe(429);
    const retryAfter = Number(refused.headers.get("retry-after"));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(3600);
    const body = await refused.json();
    expect(body.error).toMatchObject({ code: "rate_limited" });
    expect(body.error.message).toMatch(/^Too many exports\. Try again in \d+ s\.$/);
    expect((await exported(other)).status).toBe(200);
  });

  test("no token: 401", async () => {
    const res = await exported();
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("unauthorized");
  });

  test("other methods: 405 with Allow", async () => {
    const user = await app.newUser("free");
    const res = await exported(user, { method: "DELETE" });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET");
  });
});

describe("DELETE /api/me", () => {
  test("cancels the active job, erases everything, deletes the account; twice is the same answer with zeros", async () => {
    const user = await app.newUser("pro");
    const other = await app.newUser("pro");
    const done = await pastJob(user, "gone soon");
    const active = await app.enqueueOk(user, "active, gone soon");
    const theirs = await pastJob(other, "stays");

    const first = await me({ method: "DELETE", headers: user.headers });
    expect(first.status).toBe(200);
    expect(await first.json()).toEqual({
      deleted: true,
      jobs: 2,
      canceledJobs: 1,
      accountDeleted: true,
    });

    const second = await me({ method: "DELETE", headers: user.headers });
    expect(second.status).toBe(200);
    expect(await second.json()).toEqual({
      deleted: true,
      jobs: 0,
      canceledJobs: 0,
      accountDeleted: false,
    });

    for (const id of [done, active]) {
      expect((await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).status).toBe(
        404,
      );
    }
    expect((await app.jobRow(theirs)).status).toBe("canceled");
    const { rows } = await app.admin.query(
      "select count(*)::int as n from public.generation_jobs where user_id = $1",
      [user.id],
    );
    expect(rows[0].n).toBe(0);
  });

  test("the token that outlives the account: enqueue is refused 403 user_not_found, the export is empty", async () => {
    const user = await app.newUser("pro");
    await pastJob(user, "before");
    expect((await me({ method: "DELETE", headers: user.headers })).status).toBe(200);

    const enq = await app.enqueue(user, "after");
    expect(enq.status).toBe(403);
    expect((await enq.json()).error.code).toBe("user_not_found");
    const body = (await (await exported(user)).json()) as Export;
    expect(body).toMatchObject({ user_id: user.id, plan: null, usage: [], jobs: [] });
  });

  test("concurrent DELETEs of one account: all 200, the jobs counted once", async () => {
    const user = await app.newUser("pro");
    for (let i = 0; i < 3; i++) await pastJob(user, `c ${i}`);
    const answers = await Promise.all(
      Array.from({ length: 5 }, () => me({ method: "DELETE", headers: user.headers })),
    );
    expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    const bodies = await Promise.all(answers.map((r) => r.json()));
    expect(bodies.reduce((n, b) => n + b.jobs, 0)).toBe(3);
    expect(bodies.filter((b) => b.accountDeleted)).toHaveLength(1);
  });

  test("afterwards no Redis key and no log line names the user's id: rate limits, the alert roll-up, logs by pseudonym", async () => {
    const user = await app.newUser("pro");
    const job = await app.enqueueOk(user, "a job");
    expect((await app.cancel(user, job)).status).toBe(200);
    expect((await exported(user)).status).toBe(200);
    // A refusal of the user's, counted into the window's summary as the worker counts it.
    expect(await app.deps.alerts.record({ reason: "model_refused", userId: user.id })).toBe(
      "counted",
    );
    const limited = rateLimitIdentifier(user.id, supabaseKeys(app.deps.config).server);
    // The searches can fail: before the erasure the roll-up names the user, and the enqueue's
    // and the export's limits hold a key each.
    expect(await findInRedis(app.redis, user.id)).toHaveLength(1);
    expect(await findInRedis(app.redis, limited)).toHaveLength(2);
    const lineOf = (event: string) =>
      JSON.parse(app.logs.find((l) => l.includes(`"event":"${event}"`)) ?? "{}");
    const pseudonym = lineOf("job_enqueued").user;
    expect(pseudonym).toMatch(/^u[0-9a-f]{32}$/);
    expect(lineOf("job_canceled").user).toBe(pseudonym);

    expect((await me({ method: "DELETE", headers: user.headers })).status).toBe(200);

    expect(await findInRedis(app.redis, user.id)).toEqual([]);
    expect(await findInRedis(app.redis, limited)).toEqual([]);
    // The token outlives the account: what it does next writes nothing that names the user.
    expect((await app.enqueue(user, "after")).status).toBe(403);
    expect((await exported(user)).status).toBe(200);
    expect((await app.cancel(user, job)).status).toBe(404);
    expect((await me({ method: "DELETE", headers: user.headers })).status).toBe(200);
    expect(await findInRedis(app.redis, user.id)).toEqual([]);
    expect(app.logs.length).toBeGreaterThan(3);
    expect(app.logs.filter((l) => l.includes(user.id))).toEqual([]);
    // The pseudonym in the kept lines now names no one.
    const { rows } = await app.admin.query(
      "select count(*)::int as n from private.user_pseudonyms where pseudonym = $1",
      [pseudonym],
    );
    expect(rows[0].n).toBe(0);
  });

  test("Redis down at the erasure: 503 unavailable after the rows went; the retry with the same token clears Redis", async () => {
    const user = await app.newUser("pro");
    await app.enqueueOk(user, "a job");
    const limited = rateLimitIdentifier(user.id, supabaseKeys(app.deps.config).server);
    expect(await findInRedis(app.redis, limited)).toHaveLength(1);
    const down = createRateLimiter(
      createRedis({ url: `http://127.0.0.1:${await freePort()}`, token: "t" }),
      { requests: 1, windowSeconds: 60, idKey: "k" },
    );
    // The enqueue limiter (which holds the user's key) cannot reach its Redis.
    const failing = meHandler(() => ({
      ...app.deps,
      rateLimiter: { check: app.deps.rateLimiter.check, forget: down.forget },
    }));

    const first = await failing(
      new Request("https://app.test/api/me", { method: "DELETE", headers: user.headers }),
    );

    expect(first.status).toBe(503);
    expect((await first.json()).error.code).toBe("unavailable");
    expect(first.headers.get("retry-after")).not.toBeNull();
    const { rows } = await app.admin.query(
      "select count(*)::int as n from auth.users where id = $1",
      [user.id],
    );
    expect(rows[0].n).toBe(0);
    expect(await findInRedis(app.redis, limited)).toHaveLength(1);
    const again = await me({ method: "DELETE", headers: user.headers });
    expect(again.status).toBe(200);
    expect(await again.json()).toMatchObject({ jobs: 0, accountDeleted: false });
    expect(await findInRedis(app.redis, limited)).toEqual([]);
  });

  test("no token: 401, and nothing is erased", async () => {
    const res = await me({ method: "DELETE" });
    expect(res.status).toBe(401);
    expect(res.headers.get("www-authenticate")).toBe("Bearer");
  });

  test("other methods: 405 with Allow", async () => {
    const user = await app.newUser("free");
    for (const method of ["GET", "POST"]) {
      const res = await me({ method, headers: user.headers });
      expect(res.status).toBe(405);
      expect(res.headers.get("allow")).toBe("DELETE");
    }
  });
});

describe("retention on the cron tick", () => {
  test("a job finished more than RETENTION_DAYS ago loses its text, a recent one keeps it; the report counts them", async () => {
    const user = await app.newUser("pro");
    const old = await pastJob(user, "old text, to be erased");
    const recent = await pastJob(user, "recent text, kept");
    // Ended 31 days ago (the default retention is 30): backdated as the stale-row tests do.
    await app.admin.query(
      "alter table public.generation_jobs disable trigger generation_jobs_final_is_final",
    );
    try {
      await app.admin.query(
        "update public.generation_jobs set finished_at = now() - interval '31 days' where id = $1",
        [old],
      );
    } finally {
      await app.admin.query(
        "alter table public.generation_jobs enable trigger generation_jobs_final_is_final",
      );
    }

    const res = await app.call("sweep", "/api/cron/sweep", {
      headers: { authorization: `Bearer ${CRON_SECRET}` },
    });

    expect(res.status).toBe(200);
    expect((await res.json()).retention).toEqual({ erased: 1, batches: 1, more: false });
    expect(await app.jobRow(old)).toMatchObject({ prompt: "", input: {}, status: "canceled" });
    expect(await app.jobRow(recent)).toMatchObject({ prompt: "recent text, kept" });
    const page = await (
      await app.call("job", `/api/jobs/${old}`, { headers: user.headers })
    ).json();
    expect(page.job).toMatchObject({ status: "canceled", prompt: "" });
  });
});
