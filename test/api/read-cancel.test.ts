/**
 * What the frontend reads and cancels, in-process: GET /api/jobs (list), GET and DELETE
 * /api/jobs/:id, GET /api/usage.
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { declarations } from "../../lib/kinds/index.ts";
import { JOB_KEYS, type TestUser, USAGE_KEYS, useApi } from "../support/api.ts";

const app = useApi();

const get = (
  route: "jobs" | "job" | "usage",
  path: string,
  user?: TestUser,
  handlers = app.handlers,
) => app.call(route, path, { headers: user ? user.headers : {} }, handlers);
const del = (path: string, user?: TestUser) =>
  app.call("job", path, { method: "DELETE", headers: user ? user.headers : {} });

/** A finished job of the user's (enqueue + cancel), so a pro user can have many. */
async function pastJob(user: TestUser): Promise<string> {
  const id = await app.enqueueOk(user);
  expect((await del(`/api/jobs/${id}`, user)).status).toBe(200);
  return id;
}

describe("GET /api/jobs", () => {
  test("the caller's jobs, newest first, paged with nextCursor until null", async () => {
    const user = await app.newUser("pro");
    const other = await app.newUser("pro");
    const created: string[] = [];
    for (let i = 0; i < 5; i++) created.push(await pastJob(user));
    await pastJob(other);
    const newestFirst = [...created].reverse();

    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const query: string = cursor ? `?limit=2&cursor=${encodeURIComponent(cursor)}` : "?limit=2";
      const res = await get("jobs", `/api/jobs${query}`, user);
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        jobs: Array<Record<string, unknown>>;
        nextCursor: string | null;
      };
      expect(Object.keys(body).sort()).toEqual(["jobs", "nextCursor"]);
      for (const job of body.jobs) expect(Object.keys(job).sort()).toEqual(JOB_KEYS);
      seen.push(...body.jobs.map((j) => j.id as string));
      expect(body.jobs.length).toBeLessThanOrEqual(2);
      cursor = body.nextCursor;
      pages++;
    } while (cursor !== null && pages < 10);
    expect(pages).toBe(3);
    expect(seen).toEqual(newestFirst);

    const all = await (await get("jobs", "/api/jobs", user)).json();
    expect(all.jobs.map((j: { id: string }) => j.id)).toEqual(newestFirst);
    expect(all.nextCursor).toBeNull();
  });

  test("a user with no jobs gets an empty list", async () => {
    const user = await app.newUser();
    const res = await get("jobs", "/api/jobs", user);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ jobs: [], nextCursor: null });
  });

  test.each([
    "limit=0",
    "limit=101",
    "limit=abc",
    "limit=2.5",
    "cursor=not-a-cursor",
    `cursor=${Buffer.from(JSON.stringify(["2026-01-01T00:00:00Z", "x"])).toString("base64url")}`,
  ])("400 invalid_query for ?%s", async (query) => {
    const user = await app.newUser();
    const res = await get("jobs", `/api/jobs?${query}`, user);
    expect(res.status).toBe(400);
    expect((await res.json()).error.code).toBe("invalid_query");
  });

  const cursorOf = (createdAt: unknown, id: unknown = randomUUID()) =>
    Buffer.from(JSON.stringify([createdAt, id])).toString("base64url");

  test.each([
    "2024-02-30",
    "2024-02-30T00:00:00Z",
    "1",
    "+275760-09-13T00:00:00.000Z",
    "-271821-04-20T00:00:00.000Z",
    "2026-13-01T00:00:00Z",
    "2026-01-01T24:00:01Z",
    "Tue, 31 Feb 2026 10:00:00 GMT",
    "2026-01-01T00:00:00+25:00",
  ])(
    "a cursor holding a date Postgres would refuse (%s) is 400 invalid_query, not 503",
    async (date) => {
      const user = await app.newUser();
      const res = await get("jobs", `/api/jobs?cursor=${cursorOf(date)}`, user);
      expect(res.status).toBe(400);
      expect((await res.json()).error.code).toBe("invalid_query");
    },
  );

  test("fuzzed cursors: always 200 or 400 invalid_query, and no error-level log line carries the cursor", async () => {
    const user = await app.newUser("pro");
    await pastJob(user);
    const date = fc.oneof(
      fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
      fc.string({ maxLength: 40 }),
      fc.stringMatching(
        /^[+-]?\d{1,6}(-\d{1,2}(-\d{1,2}(T\d{1,2}:\d{1,2}(:\d{1,2}(\.\d{1,9})?)?)?)?)?(Z|[+-]\d{2}(:?\d{2})?)?$/,
      ),
      fc.integer().map(String),
    );
    await fc.assert(
      fc.asyncProperty(date, fc.oneof(fc.uuid(), fc.string()), async (createdAt, id) => {
        app.logs.length = 0;
        const cursor = cursorOf(createdAt, id);
        const res = await get("jobs", `/api/jobs?limit=3&cursor=${cursor}`, user);
        const body = await res.json();
        expect([200, 400], JSON.stringify({ createdAt, body })).toContain(res.status);
        if (res.status === 400) expect(body.error.code).toBe("invalid_query");
        // The user's text never reaches an error-level line (an on-call page); nothing is an error.
        expect(app.logs.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
      }),
      { numRuns: 300 },
    );
  });

  test("401 without a valid token", async () => {
    const res = await get("jobs", "/api/jobs");
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("unauthorized");
  });
});

describe("GET /api/jobs/:id", () => {
  test("200 {job} with Cache-Control: no-store; the id may come as Vercel's ?id= too", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    for (const path of [
      `/api/jobs/${id}`,
      `/api/jobs/${id}?id=${id}`,
      `/api/jobs/${id.toUpperCase()}`,
    ]) {
      const res = await get("job", path, user);
      expect(res.status).toBe(200);
      expect(res.headers.get("cache-control")).toBe("no-store");
      const body = await res.json();
      expect(Object.keys(body)).toEqual(["job"]);
      expect(Object.keys(body.job).sort()).toEqual(JOB_KEYS);
      expect(body.job).toMatchObject({ id, status: "queued", phase: "queued" });
    }
  });

  test("404 not_found for another user's job, exactly like a missing one", async () => {
    const owner = await app.newUser();
    const stranger = await app.newUser();
    const id = await app.enqueueOk(owner);
    const theirs = await get("job", `/api/jobs/${id}`, stranger);
    const missing = await get("job", `/api/jobs/${randomUUID()}`, stranger);
    expect(theirs.status).toBe(404);
    expect(missing.status).toBe(404);
    expect(await theirs.json()).toEqual(await missing.json());
    expect(Object.fromEntries(theirs.headers)).toEqual(Object.fromEntries(missing.headers));
  });

  test.each(["not-a-uuid", "123", "00000000-0000-0000-0000-00000000000g", "%27%20or%201%3D1"])(
    "404 not_found for a malformed id (%s)",
    async (id) => {
      const user = await app.newUser();
      const res = await get("job", `/api/jobs/${id}`, user);
      expect(res.status).toBe(404);
      expect((await res.json()).error.code).toBe("not_found");
    },
  );

  test("401 without a valid token, even for an existing job", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    const res = await get("job", `/api/jobs/${id}`);
    expect(res.status).toBe(401);
  });
});

describe("DELETE /api/jobs/:id", () => {
  test("200: canceled, quotaRefunded true, the unit is back in the same call", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    expect(await app.unitsUsed(user.id)).toBe(1);
    const res = await del(`/api/jobs/${id}`, user);
    expect(res.status).toBe(200);
    const body = await res.json();
    expect(body.quotaRefunded).toBe(true);
    expect(body.job).toMatchObject({
      id,
      status: "canceled",
      phase: "canceled",
      quotaRefunded: true,
    });
    expect(body.job.finishedAt).not.toBeNull();
    const row = await app.jobRow(id);
    expect(row.status).toBe("canceled");
    expect(row.refunded_at).not.toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(0);
    const usage = await (await get("usage", "/api/usage", user)).json();
    expect(usage).toMatchObject({ used: 0, active: 0 });
  });

  test("a free user's running cancel: the first refunds, the next is canceled with the unit spent, and GET said so first", async () => {
    const user = await app.newUser();
    const start = (id: string) =>
      app.admin.query("select public.start_job($1, 90)", [id]).then(() => undefined);

    const first = await app.enqueueOk(user);
    await start(first);
    const before = await (await get("job", `/api/jobs/${first}`, user)).json();
    expect(before.job).toMatchObject({ status: "running", cancelRefunds: true });
    const r1 = await (await del(`/api/jobs/${first}`, user)).json();
    expect(r1).toMatchObject({
      quotaRefunded: true,
      job: { status: "canceled", quotaRefunded: true, refundWithheld: null, cancelRefunds: false },
    });
    expect(await (await get("usage", "/api/usage", user)).json()).toMatchObject({
      used: 0,
      runningCancelRefunds: { used: 1, limit: 1 },
    });

    const second = await app.enqueueOk(user);
    const queued = await (await get("jobs", "/api/jobs", user)).json();
    expect(queued.jobs[0]).toMatchObject({ id: second, status: "queued", cancelRefunds: true });
    await start(second);
    const listed = await (await get("jobs", "/api/jobs", user)).json();
    expect(listed.jobs[0]).toMatchObject({ id: second, status: "running", cancelRefunds: false });
    const res = await del(`/api/jobs/${second}`, user);
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      quotaRefunded: false,
      job: {
        status: "canceled",
        quotaRefunded: false,
        refundWithheld: "running_cancel_limit",
      },
    });
    expect(await app.unitsUsed(user.id)).toBe(1);
    const events = (await app.events(second)).filter((e) => e.event === "canceled");
    expect(events.map((e) => e.detail)).toEqual([
      { refunded: false, reason: "running_cancel_limit", captured: 1, released: 0 },
    ]);
    // The unit stays spent: no new job today.
    const again = await app.call("jobs", "/api/jobs", {
      method: "POST",
      headers: { ...user.headers, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "once more" }),
    });
    expect(again.status).toBe(429);
  });

  test("409 already_finished with the job when it already ended; no second refund", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    expect((await del(`/api/jobs/${id}`, user)).status).toBe(200);
    const again = await del(`/api/jobs/${id}`, user);
    expect(again.status).toBe(409);
    const body = await again.json();
    expect(body.error.code).toBe("already_finished");
    expect(body.job).toMatchObject({ id, status: "canceled" });
    expect(await app.unitsUsed(user.id)).toBe(0);
    const cancels = (await app.events(id)).filter((e) => e.event === "canceled");
    expect(cancels).toHaveLength(1);
  });

  test("409 already_finished for a succeeded job, which keeps its unit", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    expect((await app.deliver(app.qstash.latestFor(id))).status).toBe(200);
    const res = await del(`/api/jobs/${id}`, user);
    expect(res.status).toBe(409);
    const body = await res.json();
    expect(body.job).toMatchObject({ id, status: "succeeded", quotaRefunded: false });
    expect(await app.unitsUsed(user.id)).toBe(1);
  });

  test("404 for another user's job (which stays queued), a missing one and a malformed id", async () => {
    const owner = await app.newUser();
    const stranger = await app.newUser();
    const id = await app.enqueueOk(owner);
    const theirs = await del(`/api/jobs/${id}`, stranger);
    const missing = await del(`/api/jobs/${randomUUID()}`, stranger);
    const malformed = await del("/api/jobs/nope", stranger);
    for (const res of [theirs, missing, malformed]) expect(res.status).toBe(404);
    expect(await theirs.json()).toEqual(await missing.json());
    expect((await app.jobRow(id)).status).toBe("queued");
    expect(await app.unitsUsed(owner.id)).toBe(1);
  });

  test("401 without a valid token; the job stays as it was", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    const res = await del(`/api/jobs/${id}`);
    expect(res.status).toBe(401);
    expect((await app.jobRow(id)).status).toBe("queued");
  });
});

describe("GET /api/usage", () => {
  test("200 Usage: plan, used, limit, period and reset, active jobs", async () => {
    const free = await app.newUser();
    const res = await get("usage", "/api/usage", free);
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const usage = await res.json();
    expect(Object.keys(usage).sort()).toEqual(
      [...USAGE_KEYS, "catalog", "held", "runningCancelRefunds"].sort(),
    );
    const dayStart = new Date();
    dayStart.setUTCHours(0, 0, 0, 0);
    expect(usage).toEqual({
      plan: "free",
      meter: "jobs",
      held: 0,
      used: 0,
      limit: 1,
      periodStart: dayStart.toISOString(),
      resetsAt: new Date(dayStart.getTime() + 86_400_000).toISOString(),
      active: 0,
      maxActive: 1,
      runningCancelRefunds: { used: 0, limit: 1 },
      kinds: [{ kind: "document", units: 1 }],
      // every kind's declaration, whatever the plan offers (the page lists them all)
      catalog: JSON.parse(JSON.stringify(await declarations())),
    });

    const pro = await app.newUser("pro");
    await app.enqueueOk(pro);
    const proUsage = await (await get("usage", "/api/usage", pro)).json();
    const monthStart = new Date();
    monthStart.setUTCDate(1);
    monthStart.setUTCHours(0, 0, 0, 0);
    expect(proUsage).toMatchObject({
      plan: "pro",
      used: 1,
      active: 1,
      maxActive: 3,
      periodStart: monthStart.toISOString(),
    });
  });

  test("401 without a valid token", async () => {
    const res = await get("usage", "/api/usage");
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("unauthorized");
  });

  test("503 (not a made-up zero) when the database is down", async () => {
    const user = await app.newUser();
    const down = app.handlersFor((await app.databaseDown()).deps);
    const res = await get("usage", "/api/usage", user, down);
    expect(res.status).toBe(503);
    expect((await res.json()).error.code).toBe("unavailable");
  });
});
