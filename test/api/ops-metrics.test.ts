/**
 * GET /api/ops/metrics in-process: anonymous 401, a signed-in user who is not an operator 403
 * with no data (a role in user_metadata, which users write themselves, grants nothing), an
 * operator 200 with the window's series, a bad window 400. (test/api/ops.test.ts is the sweep
 * and health routes.)
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { createHandler } from "../../api/ops/metrics.ts";
import { useApi } from "../support/api.ts";

const app = useApi();
const metrics = (query: string, headers: Record<string, string> = {}) =>
  createHandler(() => app.deps)(
    new Request(`https://app.test/api/ops/metrics${query}`, { headers }),
  );
const bearer = async (
  appMetadata?: Record<string, unknown>,
  userMetadata?: Record<string, unknown>,
) => ({
  authorization: `Bearer ${await app.auth.mint({ userId: randomUUID(), ...(appMetadata ? { appMetadata } : {}), ...(userMetadata ? { userMetadata } : {}) })}`,
});

describe("GET /api/ops/metrics", () => {
  test("anonymous: 401 unauthorized", async () => {
    const res = await metrics("?window=hour");
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("unauthorized");
  });

  test.each([
    ["no role", undefined, undefined],
    ["another role in app_metadata", { role: "support" }, undefined],
    [
      "the operator role in user_metadata (the user's own to write)",
      undefined,
      { role: "operator" },
    ],
  ])("a signed-in user with %s: 403 forbidden, no data", async (_what, appMeta, userMeta) => {
    const res = await metrics("?window=hour", await bearer(appMeta, userMeta));
    expect(res.status).toBe(403);
    const body = await res.json();
    expect(Object.keys(body)).toEqual(["error"]);
    expect(body.error.code).toBe("forbidden");
  });

  test.each([["?window=month"], ["?window="], ["?window=hour&window=x"]])(
    "an operator with %s: 400 invalid_query",
    async (query) => {
      const res = await metrics(query, await bearer({ role: "operator" }));
      // ?window=hour&window=x reads the first value: hour is fine
      if (query.startsWith("?window=hour")) expect(res.status).toBe(200);
      else {
        expect(res.status).toBe(400);
        expect((await res.json()).error.code).toBe("invalid_query");
      }
    },
  );

  test("an operator (roles array): 200 with the hour's minute buckets and a job the test ran", async () => {
    const user = await app.newUser("pro");
    const jobId = await app.enqueueOk(user);
    const [message] = app.qstash.forJob(jobId);
    expect((await app.deliver(message as never)).status).toBe(200);
    expect((await app.jobRow(jobId)).status).toBe("succeeded");

    const res = await metrics("?window=hour", await bearer({ roles: ["viewer", "operator"] }));
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const m = await res.json();
    expect(m.window).toBe("hour");
    expect(m.bucketSeconds).toBe(60);
    expect(m.buckets.length).toBeGreaterThanOrEqual(60);
    expect(m.buckets.length).toBeLessThanOrEqual(61);
    for (const values of Object.values(m.series) as number[][])
      expect(values.length).toBe(m.buckets.length);
    const sum = (k: string) => (m.series[k] as number[]).reduce((a, b) => a + b, 0);
    expect(sum("enqueued")).toBe(1);
    expect(sum("succeeded")).toBe(1);
    expect(sum("providerTokens")).toBeGreaterThan(0);
    expect(m.latency.queueLatency.jobs.reduce((a: number, b: number) => a + b, 0)).toBe(1);
    expect(m.now.driftRows).toBe(0);
    // Nothing is active once the job ended: the tile reads from this UTC month.
    const month = new Date(m.now.at);
    expect(m.now.driftSince).toBe(
      new Date(Date.UTC(month.getUTCFullYear(), month.getUTCMonth(), 1)).toISOString(),
    );
    expect(m.now.stuck).toEqual({
      running_lease_expired: 0,
      active_past_max_age: 0,
      queued_never_delivered: 0,
    });
  });
});
