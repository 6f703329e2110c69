/**
 * The operator page's drift tile (public.ops_now's drift_rows, 20261205000000_ops_drift_bound.sql):
 * quota_drift's rule on the periods that can still change, read through an index instead of
 * every job. Drift is planted by hand (the transition functions never make any) in a closed
 * period, in the open one, and on a counter with no job at all; the tile must count exactly the
 * view's rows from its drift_since on, and widen to an older period while a job of it is active.
 */
import { expect, test } from "vitest";
import { addSeconds, at, type Json, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture({ fresh: true, noDrift: "never" });
const FEB = at("2031-02-05T10:00:00Z");
const FEB_LATE = at("2031-02-20T10:00:00Z");
const MAR = at("2031-03-10T10:00:00Z");
const NOW = addSeconds(MAR, 60);

async function plant(user: string, units: number) {
  await db.admin.query(
    "update public.quota_usage set units_used = units_used + $2 where user_id = $1",
    [user, units],
  );
}

async function viewRowsSince(since: Date): Promise<number> {
  const { rows } = await db.admin.query(
    "select count(*)::int n from public.quota_drift where period_start >= $1",
    [since.toISOString()],
  );
  return rows[0].n;
}

async function tile(): Promise<Json> {
  return rpc(db.svc, "ops_now", { p_now: NOW });
}

test("counts the view's rows in the periods that can still change, and no earlier ones", async () => {
  // Y: a February job, canceled while queued (refunded): its period is closed and final.
  const y = await db.user("pro");
  const yJob = await db.enqueued(y, { now: FEB });
  expect(
    (
      await rpc(db.svc, "cancel_job", {
        p_job_id: yJob.id,
        p_user_id: y,
        p_now: addSeconds(FEB, 60),
      })
    ).outcome,
  ).toBe("canceled");
  await plant(y, 3);
  // X: a March job still queued. W: a March counter that no job explains.
  const x = await db.user("pro");
  await db.enqueued(x, { now: MAR });
  await plant(x, 1);
  const w = await db.user("pro");
  await db.admin.query(
    "insert into public.quota_usage (user_id, period_start, meter, units_used) values ($1, '2031-03-01T00:00:00Z', 'jobs', 2)",
    [w],
  );

  // Every job of February is final: the tile starts at March and sees X and W, not Y.
  const r = await tile();
  expect(new Date(r.drift_since).toISOString()).toBe("2031-03-01T00:00:00.000Z");
  expect(r.drift_rows).toBe(2);
  expect(await viewRowsSince(new Date(r.drift_since))).toBe(2);
  expect(await viewRowsSince(at("2000-01-01T00:00:00Z"))).toBe(3);
});

test("a job of an older period still active widens the tile to that period", async () => {
  // Z: enqueued late in February and never delivered (no sweep has ended it yet). February can
  // still change, so Y's planted drift there is counted now.
  const z = await db.user("pro");
  await db.enqueued(z, { now: FEB_LATE });
  const r = await tile();
  expect(new Date(r.drift_since).toISOString()).toBe("2031-02-01T00:00:00.000Z");
  expect(r.drift_rows).toBe(3);
  expect(await viewRowsSince(new Date(r.drift_since))).toBe(3);
});
