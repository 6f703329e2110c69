/**
 * GET /api/usage's `runningCancelRefunds` across the rename of the database's counter
 * (refunded_running_cancels → paid_refunds): the field keeps its name and its values whichever
 * names the database reports, so a client sees no change. test/api/read-cancel.test.ts holds the
 * whole response against the real database.
 */
import { describe, expect, test } from "vitest";
import type { UsageRow } from "../../lib/jobs.ts";
import { toUsage } from "../../lib/view.ts";

const row = (over: Partial<UsageRow>): UsageRow => ({
  plan: "free",
  meter: "jobs",
  used: 1,
  limit: 1,
  period_start: "2026-12-03T00:00:00Z",
  resets_at: "2026-12-04T00:00:00Z",
  active: 0,
  max_active: 1,
  ...over,
});

describe("toUsage: runningCancelRefunds", () => {
  test("from the database's paid_refunds and max_paid_refunds", () => {
    expect(toUsage(row({ paid_refunds: 1, max_paid_refunds: 2 })).runningCancelRefunds).toEqual({
      used: 1,
      limit: 2,
    });
  });

  test("from a database before the rename, which says refunded_running_cancels", () => {
    const old = row({ refunded_running_cancels: 0, max_refunded_running_cancels: 20 });
    expect(toUsage(old).runningCancelRefunds).toEqual({ used: 0, limit: 20 });
  });

  test("left out on a token plan, which has no such bound (null under either name)", () => {
    const tokens = toUsage(row({ meter: "tokens", paid_refunds: null, max_paid_refunds: null }));
    expect(tokens).not.toHaveProperty("runningCancelRefunds");
  });
});
