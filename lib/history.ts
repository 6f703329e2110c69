/**
 * History that does not grow without bound (docs/DESIGN.md#history): `job_events` is partitioned
 * by UTC month, and each sweeper cron run calls `public.maintain_job_events` once. It creates
 * this month's partition and the next two ahead (so an insert never lands in the default), and
 * drops the months wholly older than the cutoff: the earliest of now minus the retention, the
 * start of this month (the current quota period's audit) and the oldest active job's creation.
 * With nothing to do it reads the catalogue and one partial index: a millisecond or two.
 */
import { log } from "./log.ts";
import type { Deps } from "./ports.ts";

export type HistoryResult =
  | {
      outcome: "maintained";
      /** Partitions made this run (private.job_events_YYYY_MM). */
      created: string[];
      /** Partitions dropped this run, oldest first. */
      dropped: string[];
      /** Events before this may have gone; a drop removes only months that end by it. */
      cutoff: string;
      /** Every event at or after this instant is kept (-infinity until a first drop). */
      events_complete_since: string;
    }
  | { outcome: "invalid_arguments" };

export interface MaintainOptions {
  /** Events younger than this are kept whatever else holds. @default config.retentionDays */
  retentionDays?: number;
  /** Months of partitions made ahead of the current one. @default 2 */
  monthsAhead?: number;
  /** Partitions dropped at most in one run, so a backlog is worked off over several. @default 2 */
  maxDrops?: number;
}

/**
 * One maintenance run; the outcome, or `{ outcome: "failed" }` when the database call failed
 * (logged: the sweep has done its work, the next cron run tries again).
 *
 * @example
 * const history = await maintainHistory(deps);
 * // { outcome: "maintained", created: [], dropped: ["job_events_2026_10"], ... }
 */
export async function maintainHistory(
  deps: Pick<Deps, "config" | "now" | "rpc">,
  o: MaintainOptions = {},
): Promise<HistoryResult | { outcome: "failed" }> {
  const rpc = deps.rpc;
  const now = deps.now();
  const days = o.retentionDays ?? deps.config.retentionDays;
  try {
    const r = (await rpc("maintain_job_events", {
      p_before: new Date(now.getTime() - days * 86_400_000).toISOString(),
      p_now: now.toISOString(),
      p_months_ahead: o.monthsAhead ?? 2,
      p_max_drops: o.maxDrops ?? 2,
    })) as HistoryResult;
    if (r.outcome === "maintained" && (r.created.length > 0 || r.dropped.length > 0)) {
      log.info("history_maintained", {
        created: r.created,
        dropped: r.dropped,
        eventsCompleteSince: r.events_complete_since,
      });
    }
    return r;
  } catch (error) {
    log.error("history_maintenance_failed", { error });
    return { outcome: "failed" };
  }
}
