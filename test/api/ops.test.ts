/**
 * The routes on-call and the scheduler rely on, in-process: GET /api/cron/sweep, GET
 * /api/health, and 405 + Allow on every route for the methods it does not serve.
 */
import { describe, expect, test } from "vitest";
import { CRON_SECRET, type Route, type TestUser, useApi } from "../support/api.ts";

const app = useApi();

const sweep = (authorization?: string, handlers = app.handlers) =>
  app.call(
    "sweep",
    "/api/cron/sweep",
    { headers: authorization === undefined ? {} : { authorization } },
    handlers,
  );

/** Makes a job look as if its message was lost `minutes` ago (the function died after commit). */
async function backdateQueued(id: string, minutes: number) {
  await app.admin.query(
    `update public.generation_jobs
     set queued_at = now() - make_interval(mins => $2), created_at = least(created_at, now() - make_interval(mins => $2))
     where id = $1`,
    [id, minutes],
  );
}

async function queuedJob(): Promise<{ user: TestUser; id: string }> {
  const user = await app.newUser();
  return { user, id: await app.enqueueOk(user) };
}

describe("GET /api/cron/sweep", () => {
  test.each([
    ["no Authorization header", undefined],
    ["a wrong secret", "Bearer not-the-cron-secret-at-all"],
    ["the secret with a suffix", `Bearer ${CRON_SECRET}x`],
    ["the secret without the Bearer scheme", CRON_SECRET],
  ])("401 with %s, and nothing swept", async (_what, authorization) => {
    const { id } = await queuedJob();
    await backdateQueued(id, 30);
    const res = await sweep(authorization);
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("unauthorized");
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", republish_count: 0 });
    // leave nothing stale for the next test's sweeps
    await app.admin.query(
      "update public.generation_jobs set queued_at = now(), created_at = now() where id = $1",
      [id],
    );
  });

  test("200 with a report; nothing to do sends no alert", async () => {
    const res = await sweep(`Bearer ${CRON_SECRET}`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      batches: 1,
      failed: {},
      republished: 0,
      republishFailed: 0,
      more: false,
      retention: { erased: 0, batches: 1, more: false },
      // Then the history's maintenance (lib/history.ts), through the database's own function:
      // the months ahead exist already and no month is past the retention.
      history: {
        outcome: "maintained",
        created: [],
        dropped: [],
        cutoff: expect.any(String),
        events_complete_since: "-infinity",
      },
    });
    expect(app.webhook.payloads).toHaveLength(0);
  });

  test("a queued job whose message was lost is republished once, then failed never_delivered with its refund", async () => {
    const { user, id } = await queuedJob();
    const fresh = await queuedJob();
    await backdateQueued(id, 20);

    const first = await sweep(`Bearer ${CRON_SECRET}`);
    expect(first.status).toBe(200);
    expect(await first.json()).toMatchObject({ republished: 1, failed: {}, republishFailed: 0 });
    expect(await app.jobRow(id)).toMatchObject({
      status: "queued",
      republish_count: 1,
      publish_seq: 2,
    });
    const messages = app.qstash.forJob(id);
    expect(messages).toHaveLength(2);
    expect(messages[1]?.headers["upstash-deduplication-id"]).toBe(`job-${id}-2`);
    expect(JSON.parse(messages[1]?.body ?? "")).toEqual({ jobId: id, seq: 2 });
    expect(app.webhook.ofKind("stuck_jobs")).toHaveLength(1);
    // The fresh job is nobody's business yet.
    expect(app.qstash.forJob(fresh.id)).toHaveLength(1);

    // The republished message was lost too.
    await backdateQueued(id, 20);
    const second = await sweep(`Bearer ${CRON_SECRET}`);
    expect(second.status).toBe(200);
    expect(await second.json()).toMatchObject({ failed: { never_delivered: 1 }, republished: 0 });
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "failed", failure_reason: "never_delivered" });
    expect(row.refunded_at).not.toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.qstash.forJob(id)).toHaveLength(2);
    expect((await app.jobRow(fresh.id)).status).toBe("queued");
  });

  test("a running job whose worker died (lease expired long ago): failed lease_expired, refunded, on-call paged", async () => {
    const { user, id } = await queuedJob();
    await app.admin.query(
      `update public.generation_jobs
       set status = 'running', attempts = 1, started_at = now() - interval '20 minutes',
           lease_expires_at = now() - interval '10 minutes'
       where id = $1`,
      [id],
    );
    const res = await sweep(`Bearer ${CRON_SECRET}`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ failed: { lease_expired: 1 } });
    expect(await app.jobRow(id)).toMatchObject({
      status: "failed",
      failure_reason: "lease_expired",
    });
    expect(await app.unitsUsed(user.id)).toBe(0);
    const pages = app.webhook.ofKind("stuck_jobs");
    expect(pages).toHaveLength(1);
    expect(JSON.stringify(pages[0])).toContain(id);
  });

  test("QStash down while republishing: counted in the report, the job stays queued for the next sweep", async () => {
    const { user, id } = await queuedJob();
    await backdateQueued(id, 20);
    app.qstash.failWith("500");
    const res = await sweep(`Bearer ${CRON_SECRET}`);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ republished: 0, republishFailed: 1 });
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", republish_count: 1 });
    expect(await app.unitsUsed(user.id)).toBe(1);
    // end it, so no later test sweeps it
    await backdateQueued(id, 20);
    app.qstash.failWith(null);
    expect(await (await sweep(`Bearer ${CRON_SECRET}`)).json()).toMatchObject({
      failed: { never_delivered: 1 },
    });
  });

  test("the database is down: 503, so cron runs it again", async () => {
    const down = app.handlersFor((await app.databaseDown()).deps);
    const res = await sweep(`Bearer ${CRON_SECRET}`, down);
    expect(res.status).toBe(503);
  });
});

describe("GET /api/health", () => {
  const operator = { headers: { authorization: `Bearer ${CRON_SECRET}` } };

  /** Calls of a Redis command so far, from the real redis-server's own statistics. */
  async function redisCalls(command: string): Promise<number> {
    const info = await app.redis.info("commandstats");
    return Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info)?.[1] ?? 0);
  }

  test("the operator (Bearer CRON_SECRET) gets each dependency's state: 200 when both answer", async () => {
    const res = await app.call("health", "/api/health", operator);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok", database: "ok", redis: "ok" });
  });

  test("the operator sees 503 with Redis down, naming it", async () => {
    const down = app.handlersFor((await app.redisDown()).deps);
    const res = await app.call("health", "/api/health", operator, down);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ status: "degraded", database: "ok", redis: "down" });
  });

  test("the operator sees 503 with the database down, naming it", async () => {
    const down = app.handlersFor((await app.databaseDown()).deps);
    const res = await app.call("health", "/api/health", operator, down);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ status: "degraded", database: "down", redis: "ok" });
  });

  test("anyone else gets only the overall status, never which dependency is down", async () => {
    const callers: Record<string, string>[] = [
      {},
      { authorization: "Bearer not-the-cron-secret-0000" },
    ];
    for (const headers of callers) {
      const res = await app.call("health", "/api/health", { headers });
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ status: "ok" });
    }
    const down = app.handlersFor((await app.redisDown()).deps);
    const res = await app.call("health", "/api/health", {}, down);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ status: "degraded" });
  });

  test("50 anonymous requests at once and more within a few seconds cost one database call and one Redis command", async () => {
    const { deps } = app.makeDeps({});
    let databaseCalls = 0;
    const counted = {
      ...deps,
      jobs: {
        ...deps.jobs,
        usage: (...args: Parameters<typeof deps.jobs.usage>) => {
          databaseCalls++;
          return deps.jobs.usage(...args);
        },
      },
    };
    const handlers = app.handlersFor(counted);
    const pingsBefore = await redisCalls("ping");
    const answers = await Promise.all(
      Array.from({ length: 50 }, () => app.call("health", "/api/health", {}, handlers)),
    );
    for (let i = 0; i < 10; i++)
      answers.push(await app.call("health", "/api/health", {}, handlers));
    expect(answers.map((r) => r.status)).toEqual(answers.map(() => 200));
    expect(await redisCalls("ping")).toBe(pingsBefore + 1);
    expect(databaseCalls).toBe(1);
  });
});

describe("405 method_not_allowed with an Allow header", () => {
  const routes: Array<[Route, string, string[], string[]]> = [
    ["jobs", "/api/jobs", ["GET", "POST"], ["PUT", "PATCH", "DELETE"]],
    [
      "job",
      "/api/jobs/00000000-0000-4000-8000-000000000000",
      ["DELETE", "GET"],
      ["POST", "PUT", "PATCH"],
    ],
    ["usage", "/api/usage", ["GET"], ["POST", "DELETE"]],
    ["worker", "/api/worker", ["POST"], ["GET", "PUT", "DELETE"]],
    ["dlq", "/api/dlq", ["POST"], ["GET", "PUT"]],
    ["sweep", "/api/cron/sweep", ["GET"], ["POST", "DELETE"]],
    ["health", "/api/health", ["GET"], ["POST"]],
  ];
  test.each(routes)("%s (%s) allows %j", async (route, path, allowed, others) => {
    for (const method of others) {
      const res = await app.call(route, path, { method });
      expect(res.status, `${method} ${path}`).toBe(405);
      const allow = (res.headers.get("allow") ?? "").split(/,\s*/).sort();
      expect(allow).toEqual(allowed);
      expect((await res.json()).error.code).toBe("method_not_allowed");
    }
  });
});
