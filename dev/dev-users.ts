/**
 * Local users for the dev stack and tests: an `auth.users` row (what Supabase Auth would have
 * created), the plan (a `user_plans` row for any plan but free), and a signed access token. The
 * plans are the database's (`public.plans`, seeded by supabase/seed.sql): the one list the dev
 * sign-in, `npm run dev:token` and the page's local sign-in offer.
 * Never imported by `api/` or `lib/`.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { type ProjectFile, signAccessToken } from "./auth/index.ts";

/** A plan's id: a row of `public.plans` (supabase/seed.sql seeds them). */
export type DevPlan = string;

/** The plan asked for is no row of `public.plans`; the message names the ones there are. */
export class UnknownPlan extends Error {}

export interface DevSession {
  userId: string;
  accessToken: string;
  plan: DevPlan;
  /** ISO time the token expires. */
  expiresAt: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** A plan as the local sign-in offers it: a row of `public.plans`. */
export interface DevPlanRow {
  id: string;
  name: string;
  period: string;
  units: number;
  meter: string;
}

/** The database's plans, free (the default) first, then job plans before token plans. */
export async function devPlans(db: Pick<pg.Pool, "query">): Promise<DevPlanRow[]> {
  return (
    await db.query<DevPlanRow>(
      `select id, name, period, units_per_period::float8 as units, meter from public.plans
       order by id <> 'free', meter, units_per_period, id`,
    )
  ).rows;
}

/** Checks a sign-in request body; returns a message for a bad one. */
export function parseSignIn(body: unknown): { plan: DevPlan; userId: string } | string {
  const b = (body ?? {}) as { plan?: unknown; userId?: unknown };
  if (typeof body !== "object" || body === null || Array.isArray(body))
    return "body must be a JSON object";
  if (b.plan !== undefined && (typeof b.plan !== "string" || !b.plan))
    return "plan must be a plan's id";
  if (b.userId !== undefined && (typeof b.userId !== "string" || !UUID.test(b.userId)))
    return "userId must be a UUID";
  return {
    plan: (b.plan as DevPlan | undefined) ?? "free",
    userId: ((b.userId as string | undefined) ?? randomUUID()).toLowerCase(),
  };
}

/**
 * Creates (or updates) the user and their plan, then mints a token for them. Throws
 * {@link UnknownPlan} for a plan that is no row of `public.plans`.
 */
export async function signInDevUser(
  db: Pick<pg.Pool, "query">,
  input: {
    userId?: string;
    plan?: DevPlan;
    /** The local project whose Auth signs the token (dev/auth/). */
    project: Pick<ProjectFile, "shape" | "issuer" | "jwtSecret" | "signingKey">;
    expiresInSeconds?: number;
    /** Claims the service role would have set (e.g. `{ role: "operator" }` for /ops). */
    appMetadata?: Record<string, unknown>;
  },
): Promise<DevSession> {
  const userId = input.userId ?? randomUUID();
  const plan = input.plan ?? "free";
  // The database's plans, not a list kept here: a plan seeded later is a plan here too.
  const plans = await devPlans(db);
  if (!plans.some((p) => p.id === plan))
    throw new UnknownPlan(
      `plan must be one of ${plans
        .map((p) => `"${p.id}"`)
        .sort()
        .join(", ")}`,
    );
  await db.query(
    `with u as (insert into auth.users (id, email) values ($1, $2) on conflict (id) do nothing)
     select 1`,
    [userId, `${userId.slice(0, 8)}@example.test`],
  );
  if (plan === "free") {
    await db.query("delete from public.user_plans where user_id = $1", [userId]);
  } else {
    await db.query(
      `insert into public.user_plans (user_id, plan_id) values ($1, $2)
       on conflict (user_id) do update set plan_id = excluded.plan_id, updated_at = now()`,
      [userId, plan],
    );
  }
  const expiresInSeconds = input.expiresInSeconds ?? 8 * 3600;
  const now = new Date();
  const accessToken = await signAccessToken(input.project, {
    userId,
    expiresInSeconds,
    now,
    ...(input.appMetadata ? { appMetadata: input.appMetadata } : {}),
  });
  const expiresAt = new Date(Math.floor(now.getTime() / 1000) * 1000 + expiresInSeconds * 1000);
  return { userId, accessToken, plan, expiresAt: expiresAt.toISOString() };
}
