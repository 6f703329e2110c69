/**
 * POST /api/jobs with an `organization_id` (docs/DESIGN.md#organizations), in-process: a bad id
 * is a 400 with its code (never a 5xx), an organization that is not the caller's a 403, a used-up
 * pool or a reached cap a 429 with Retry-After to the period's end, each holding nothing; a
 * member's job holds on the pool, not on their own quota, and stays theirs alone (404 to
 * another member).
 */
import { describe, expect, test } from "vitest";
import { type TestUser, useApi } from "../support/api.ts";
import { join, newOrganization, orgPlan } from "../support/organizations.ts";

const app = useApi();

const post = (user: TestUser, body: unknown) =>
  app.call("jobs", "/api/jobs", {
    method: "POST",
    headers: { ...user.headers, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

const held = async (org: string) =>
  (
    await app.admin.query(
      `select coalesce((select units_used from public.organization_usage
         where organization_id = $1), 0) as pool,
         (select count(*)::int from public.generation_jobs where organization_id = $1) as jobs`,
      [org],
    )
  ).rows[0];

/** A team of `units` a day and two members; the second capped at `cap`. */
async function team(units: number, cap: number | null = null) {
  const plan = await orgPlan(app.admin, `api_team_${units}`, { units, maxActive: 5 });
  const org = await newOrganization(app.admin, plan);
  const [a, b] = [await app.newUser(), await app.newUser()];
  await join(app.admin, org, a.id, "owner");
  await join(app.admin, org, b.id, "member", cap);
  return { org, a, b };
}

describe("POST /api/jobs for an organization", () => {
  test.each([
    ["not a uuid", "not-a-uuid"],
    ["a number", 42],
    ["an object", { id: "x" }],
    ["a uuid with a stray character", "00000000-0000-0000-0000-00000000000g"],
  ])("400 invalid_organization_id for %s, nothing held", async (_name, id) => {
    const user = await app.newUser();
    for (const body of [
      { prompt: "hello", organization_id: id },
      { kind: "document", input: { prompt: "hello" }, organization_id: id },
    ]) {
      const res = await post(user, body);
      expect(res.status).toBe(400);
      expect((await res.json()).error.code).toBe("invalid_organization_id");
    }
    expect(await app.unitsUsed(user.id)).toBe(0);
  });

  test("403 not_a_member for an organization that is not the caller's, or none at all", async () => {
    const { org } = await team(5);
    const stranger = await app.newUser();
    for (const id of [org, "6f1c2b9e-0000-4000-8000-000000000000"]) {
      const res = await post(stranger, { prompt: "hello", organization_id: id });
      expect(res.status).toBe(403);
      const body = await res.json();
      expect(body.error).toEqual({
        code: "not_a_member",
        message: "You are not a member of this organization.",
      });
    }
    expect(await held(org)).toEqual({ pool: 0, jobs: 0 });
    expect(await app.unitsUsed(stranger.id)).toBe(0);
  });

  test("202 holds on the pool and the member's row, not the member's own quota; another member's job is a 404", async () => {
    const { org, a, b } = await team(5);
    const res = await post(a, { prompt: "team work", organization_id: org.toUpperCase() });
    expect(res.status).toBe(202);
    const body = await res.json();
    expect(body.usage).toMatchObject({
      used: 1,
      limit: 5,
      organizationId: org,
      memberUsed: 1,
      memberCap: null,
    });
    expect(await held(org)).toEqual({ pool: 1, jobs: 1 });
    expect(await app.unitsUsed(a.id)).toBe(0);
    const other = await app.call("job", `/api/jobs/${body.job.id}`, { headers: b.headers });
    expect(other.status).toBe(404);
    const own = await app.call("job", `/api/jobs/${body.job.id}`, { headers: a.headers });
    expect(own.status).toBe(200);
  });

  test("429 pool_exhausted with Retry-After to the period's end, in words, nothing held", async () => {
    const { org, a, b } = await team(1);
    expect((await post(a, { prompt: "first", organization_id: org })).status).toBe(202);
    const res = await post(b, { prompt: "second", organization_id: org });
    expect(res.status).toBe(429);
    const body = await res.json();
    expect(body.error.code).toBe("pool_exhausted");
    expect(body.error.message).toMatch(/^Your team's pool is used up until \d{1,2} [A-Z][a-z]{2}:/);
    expect(body.usage).toMatchObject({ used: 1, limit: 1, organizationId: org, memberUsed: 0 });
    const retry = Number(res.headers.get("retry-after"));
    const untilMidnight = (new Date(body.usage.resetsAt).getTime() - Date.now()) / 1000;
    expect(retry).toBeGreaterThan(0);
    expect(Math.abs(retry - untilMidnight)).toBeLessThan(5);
    expect(await held(org)).toEqual({ pool: 1, jobs: 1 });
  });

  test("429 member_cap_reached with Retry-After, the cap in words, nothing held", async () => {
    const { org, b } = await team(10, 1);
    expect((await post(b, { prompt: "first", organization_id: org })).status).toBe(202);
    const res = await post(b, { prompt: "second", organization_id: org });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThan(0);
    const body = await res.json();
    expect(body.error.code).toBe("member_cap_reached");
    expect(body.error.message).toMatch(
      /^You have reached the cap your admin set \(1 unit a period; you have used 1 unit and this job needs 1 unit\) until \d{1,2} [A-Z][a-z]{2}\.$/,
    );
    expect(body.usage).toMatchObject({ memberUsed: 1, memberCap: 1 });
    expect(await held(org)).toEqual({ pool: 1, jobs: 1 });
  });
});
