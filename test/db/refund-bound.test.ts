/**
 * The bound of refunds after provider spend (running cancels, failures and queued cancels after
 * a consumed attempt) is one SQL rule, private.refund_bound (20261202110000_refund_bound.sql):
 * held here to the simulator's own statement of it (test/support/sim.ts's refundBoundOf, the
 * spec), and every caller (a cancel's refund, what a job says a cancel would do, the usage
 * report) is held to it on a plan whose bound is neither the default nor the free plan's.
 */
import { readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import { addSeconds, at, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { refundBoundOf } from "../support/sim.ts";

const db = dbFixture({ fresh: true, service: 4, noDrift: "file" });
const { svc, admin } = db;
const T0 = at("2026-12-02T10:00:00Z");

const PLANS = [
  { id: "rb_default", meter: "jobs", units_per_period: 5, max_paid_refunds: null },
  { id: "rb_none", meter: "jobs", units_per_period: 5, max_paid_refunds: 0 },
  { id: "rb_two", meter: "jobs", units_per_period: 10, max_paid_refunds: 2 },
  { id: "rb_above", meter: "jobs", units_per_period: 3, max_paid_refunds: 7 },
  { id: "rb_tokens", meter: "tokens", units_per_period: 9000, max_paid_refunds: null },
  { id: "rb_tokens2", meter: "tokens", units_per_period: 9000, max_paid_refunds: 2 },
] as const;

describe("one rule for the bound of refunds after spend", () => {
  test("private.refund_bound gives what the simulator's spec says, for every shape of plan (and the seeded plans)", async () => {
    for (const p of PLANS)
      await admin.query(
        `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
           max_paid_refunds, meter)
         values ($1, $1, 'day', $2, 10, $3, $4) on conflict (id) do nothing`,
        [p.id, p.units_per_period, p.max_paid_refunds, p.meter],
      );
    const { rows } = await admin.query(
      `select p.id, p.meter, p.units_per_period, p.max_paid_refunds,
         private.refund_bound(p) as bound
       from public.plans p order by p.id`,
    );
    expect(rows.length).toBeGreaterThanOrEqual(PLANS.length + 1);
    for (const r of rows)
      expect({ id: r.id, bound: r.bound }).toEqual({ id: r.id, bound: refundBoundOf(r) });
  });

  test("a cancel, what a job says a cancel would do, and the usage report all follow it (a plan bound at 2 of 10)", async () => {
    const bound = (
      await admin.query(
        "select private.refund_bound(p) as b from public.plans p where id = 'rb_two'",
      )
    ).rows[0].b;
    expect(bound).toBe(2);
    const user = await db.user("rb_two");
    const seen: Array<{ says: boolean; refunded: boolean; withheld: string | null }> = [];
    for (let i = 0; i < bound + 2; i++) {
      const now = addSeconds(T0, i * 10);
      const e = await rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: `p ${i}`, p_now: now });
      expect(e.outcome).toBe("enqueued");
      expect((await rpc(svc, "start_job", { p_job_id: e.job.id, p_now: now })).outcome).toBe(
        "started",
      );
      const says = (await rpc(svc, "get_job", { p_job_id: e.job.id, p_user_id: user })).job
        .cancel_refunds;
      const c = await rpc(svc, "cancel_job", {
        p_job_id: e.job.id,
        p_user_id: user,
        p_now: addSeconds(now, 1),
      });
      const row = await admin.query(
        "select refund_withheld from public.generation_jobs where id = $1",
        [e.job.id],
      );
      seen.push({ says, refunded: c.refunded, withheld: row.rows[0].refund_withheld });
    }
    const want = Array.from({ length: bound + 2 }, (_, i) =>
      i < bound
        ? { says: true, refunded: true, withheld: null }
        : { says: false, refunded: false, withheld: "running_cancel_limit" },
    );
    expect(seen).toEqual(want);
    const usage = (await rpc(svc, "get_usage", { p_user_id: user, p_now: addSeconds(T0, 60) }))
      .usage;
    expect(usage).toMatchObject({
      paid_refunds: bound,
      max_paid_refunds: bound,
    });
  });

  test("a token plan reports no bound, whatever its column says", async () => {
    const user = await db.user("rb_tokens2");
    const usage = (await rpc(svc, "get_usage", { p_user_id: user, p_now: T0 })).usage;
    expect(usage).toMatchObject({
      paid_refunds: null,
      max_paid_refunds: null,
    });
  });

  test("no other SQL function, and not ops/reconcile.ts, restates the bound", () => {
    const read = (p: string) => readFileSync(new URL(`../../${p}`, import.meta.url), "utf8");
    const restated = /coalesce\(\s*\w+\.max_paid_refunds/;
    const functions = read("supabase/schema.sql")
      .split(/\nCREATE OR REPLACE FUNCTION /)
      .slice(1);
    const restating = functions
      .filter((f) => restated.test(f))
      .map((f) => f.slice(0, f.indexOf("(")));
    expect(restating).toEqual(["private.refund_bound"]);
    expect(read("ops/reconcile.ts")).not.toMatch(/max_paid_refunds|units_per_period/);
  });
});
