/**
 * Organizations for the tests: a plan of a test's own, an organization on it, its members
 * (docs/DESIGN.md#organizations), and the counters an assertion reads.
 */
import type pg from "pg";
import { type Json, newUser, rpc } from "./db.ts";

export interface PlanOptions {
  units: number;
  maxActive?: number;
  maxPaidRefunds?: number | null;
  period?: "day" | "month";
  meter?: "jobs" | "tokens";
}

/** A plan `id` (created once; a later call with the same id keeps the first). */
export async function orgPlan(admin: pg.Pool, id: string, o: PlanOptions): Promise<string> {
  await admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
       max_paid_refunds, meter)
     values ($1, $1, $2, $3, $4, $5, $6) on conflict (id) do nothing`,
    [id, o.period ?? "day", o.units, o.maxActive ?? 5, o.maxPaidRefunds ?? null, o.meter ?? "jobs"],
  );
  return id;
}

/** An organization on `plan`; its id. */
export async function newOrganization(
  admin: pg.Pool,
  plan: string,
  name = "Team",
): Promise<string> {
  const { rows } = await admin.query(
    "insert into public.organizations (name, plan) values ($2, $1) returning id",
    [plan, name],
  );
  return rows[0].id;
}

/** `user` joins `org` as `role`, capped at `cap` (null: no cap). */
export async function join(
  admin: pg.Pool,
  org: string,
  user: string,
  role: "owner" | "admin" | "member" = "member",
  cap: number | null = null,
): Promise<void> {
  await admin.query(
    "insert into public.organization_members (organization_id, user_id, role, cap) values ($1, $2, $3, $4)",
    [org, user, role, cap],
  );
}

/** `n` new users (on free, their own plan), each a member of `org` capped at `cap`. */
export async function members(
  admin: pg.Pool,
  org: string,
  n: number,
  cap: number | null = null,
): Promise<string[]> {
  const users = await Promise.all(Array.from({ length: n }, () => newUser(admin)));
  for (const u of users) await join(admin, org, u, "member", cap);
  return users;
}

/** enqueue_job for `user` in `org`: the whole answer. */
export const enqueueIn = (
  svc: pg.Pool,
  user: string,
  org: string,
  extra: Record<string, unknown> = {},
): Promise<Json> =>
  rpc(svc, "enqueue_job", {
    p_user_id: user,
    p_prompt: `org job ${Math.random()}`,
    p_organization_id: org,
    ...extra,
  });

/** The pool's row (zeros when none) for `org`. */
export async function pool(
  admin: pg.Pool,
  org: string,
): Promise<{ units_used: number; paid_refunds: number; erased_units: number }> {
  const { rows } = await admin.query(
    `select units_used, paid_refunds, erased_units::int from public.organization_usage
     where organization_id = $1`,
    [org],
  );
  return rows[0] ?? { units_used: 0, paid_refunds: 0, erased_units: 0 };
}

/** Each member's units_used in `org`, by user id. */
export async function memberUsage(admin: pg.Pool, org: string): Promise<Record<string, number>> {
  const { rows } = await admin.query(
    "select user_id, units_used from public.organization_member_usage where organization_id = $1",
    [org],
  );
  return Object.fromEntries(rows.map((r) => [r.user_id, r.units_used]));
}
