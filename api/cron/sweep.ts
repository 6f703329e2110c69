/**
 * `GET /api/cron/sweep`: Vercel cron (or a QStash schedule) ends stale jobs with refunds, then
 * erases the text of jobs past their retention (lib/retention.ts) and keeps job_events' monthly
 * partitions (lib/history.ts).
 */
import { cronRoute } from "../../lib/cron.ts";
import { type Deps, getDeps } from "../../lib/deps.ts";
import { maintainHistory } from "../../lib/history.ts";
import { log } from "../../lib/log.ts";
import { type RetentionReport, runRetention } from "../../lib/retention.ts";
import { sweepStaleJobs } from "../../lib/sweeper.ts";

export function createHandler(deps: () => Deps) {
  return cronRoute("/api/cron/sweep", deps, async (d) => {
    // Each job the sweep republishes gets a span in the job's trace.
    const report = await sweepStaleJobs(d);
    // The sweep's work is committed whatever retention does: a failure here is logged and
    // reported as null, and the next tick erases what this one could not.
    let retention: RetentionReport | null = null;
    try {
      retention = await runRetention(d);
    } catch (error) {
      log.error("retention_failed", { error });
    }
    return { ...report, retention, history: await maintainHistory(d) };
  });
}

export default { fetch: createHandler(getDeps) };
