/**
 * The local users behind `npm run dev:token` and the page's dev sign-in: every plan
 * supabase/seed.sql seeds can be asked for, none is a hand-kept list, and an unknown plan is
 * refused with the plans there are. On the real, seeded database.
 */
import { readFileSync } from "node:fs";
import { jwtVerify } from "jose";
import { describe, expect, test } from "vitest";
import { parseSignIn, signInDevUser, UnknownPlan } from "../../dev/dev-users.ts";
import { LOCAL_JWT_SECRET } from "../../dev/token.ts";
import { adminPool } from "../support/db.ts";

const admin = adminPool();
const project = {
  shape: "legacy" as const,
  issuer: "http://127.0.0.1:54321/auth/v1",
  jwtSecret: LOCAL_JWT_SECRET,
};

/** The ids the seed's `insert into public.plans` lists, read from the file. */
function seededPlans(): string[] {
  const seed = readFileSync(new URL("../../supabase/seed.sql", import.meta.url), "utf8");
  const insert = /insert into public\.plans \([^)]*\) values([\s\S]*?)on conflict/.exec(seed);
  return [...(insert?.[1] ?? "").matchAll(/^\s*\('([a-z0-9_-]+)'/gm)].map((m) => m[1] ?? "");
}

describe("dev users", () => {
  test("every plan the seed inserts signs a user in on that plan (economy included)", async () => {
    const plans = seededPlans();
    expect(plans).toEqual(expect.arrayContaining(["free", "pro", "team", "economy"]));
    for (const plan of plans) {
      const input = parseSignIn({ plan });
      if (typeof input === "string") throw new Error(input);
      const session = await signInDevUser(admin, { ...input, project });
      expect(session.plan).toBe(plan);
      const { payload } = await jwtVerify(
        session.accessToken,
        new TextEncoder().encode(LOCAL_JWT_SECRET),
      );
      expect(payload.sub).toBe(input.userId);
      const { rows } = await admin.query<{ plan_id: string }>(
        "select plan_id from public.user_plans where user_id = $1",
        [input.userId],
      );
      // free is the plan of a user with no user_plans row
      expect(rows.map((r) => r.plan_id)).toEqual(plan === "free" ? [] : [plan]);
    }
  });

  test("a plan the database does not have is refused with the ones it has; no user is made", async () => {
    const input = parseSignIn({ plan: "enterprise" });
    if (typeof input === "string") throw new Error(input);
    const refused = await signInDevUser(admin, { ...input, project }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(UnknownPlan);
    const { rows } = await admin.query<{ id: string }>("select id from public.plans order by id");
    expect((refused as Error).message).toBe(
      `plan must be one of ${rows.map((r) => `"${r.id}"`).join(", ")}`,
    );
    expect((refused as Error).message).toContain('"economy"');
    const made = await admin.query("select 1 from auth.users where id = $1", [input.userId]);
    expect(made.rowCount).toBe(0);
  });

  test("a plan that is not a string is bad input", () => {
    for (const plan of [3, "", null, ["pro"]])
      expect(parseSignIn({ plan })).toBe("plan must be a plan's id");
  });
});
