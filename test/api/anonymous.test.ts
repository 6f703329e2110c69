/**
 * Anonymous sign-ins (Supabase Auth's `signInAnonymously`: a real user with role
 * authenticated, `is_anonymous` in auth.users and in the token) get no plan unless a plan row
 * says anonymous users may have it: otherwise anyone could script free plans.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { mintUserToken } from "../../dev/token.ts";
import { JWT_SECRET, useApi } from "../support/api.ts";

const app = useApi();

async function anonymousUser() {
  const id = randomUUID();
  await app.admin.query("insert into auth.users (id, is_anonymous) values ($1, true)", [id]);
  const token = await mintUserToken({ secret: JWT_SECRET, userId: id, issuer: app.issuer });
  return { id, token, headers: { authorization: `Bearer ${token}` } };
}

describe("anonymous sign-ins", () => {
  test("have no plan: POST /api/jobs is 403 no_plan, nothing reserved, and GET /api/usage says plan none, limit 0", async () => {
    const user = await anonymousUser();
    const res = await app.enqueue(user, "a free document, please");
    expect(res.status).toBe(403);
    expect((await res.json()).error.code).toBe("no_plan");
    expect(await app.unitsUsed(user.id)).toBe(0);
    const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
    expect(usage).toMatchObject({ plan: "none", limit: 0, used: 0 });
  });

  test("get the plan a plan row marks for anonymous users; an explicit user_plans row still wins", async () => {
    await app.admin.query(
      "insert into public.plans (id, name, period, units_per_period, max_active_jobs, for_anonymous_users) values ('trial', 'Trial', 'day', 1, 1, true)",
    );
    try {
      const user = await anonymousUser();
      expect((await app.enqueue(user, "one trial document")).status).toBe(202);
      const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
      expect(usage).toMatchObject({ plan: "trial", limit: 1, used: 1 });

      const upgraded = await anonymousUser();
      await app.admin.query("insert into public.user_plans (user_id, plan_id) values ($1, 'pro')", [
        upgraded.id,
      ]);
      const proUsage = await (
        await app.call("usage", "/api/usage", { headers: upgraded.headers })
      ).json();
      expect(proUsage).toMatchObject({ plan: "pro", limit: 100 });
    } finally {
      // The other tests expect anonymous users to have no plan.
      await app.admin.query(
        "update public.plans set for_anonymous_users = false where id = 'trial'",
      );
    }
  });

  test("a signed-in user with an email (not anonymous) and no plan row is still on free", async () => {
    // newUser made its auth.users row: said explicitly not anonymous.
    const user = await app.newUser("free");
    await app.admin.query("update auth.users set is_anonymous = false where id = $1", [user.id]);
    const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
    expect(usage).toMatchObject({ plan: "free", limit: 1 });
  });
});
