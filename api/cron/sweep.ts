/**
 * `GET /api/cron/sweep`: Vercel cron (or a QStash schedule) ends stale jobs with refunds, then
 * erases the text of jobs past their retention (lib/retention.ts) and keeps job_events' monthly
 * partitions (lib/history.ts).
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { maintainHistory } from "../../lib/history.ts";
import { handle, json, requireCronSecret } from "../../lib/http.ts";
import { log } from "../../lib/log.ts";
import { type RetentionReport, runRetention } from "../../lib/retention.ts";
import { sweepStaleJobs } from "../../lib/sweeper.ts";
import { startTrace, traceRequest } from "../../lib/trace.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      return traceRequest(d.config, "GET /api/cron/sweep", async () => {
        requireCronSecret(req, d.config.cronSecret);
        // A tick is a trace of its own; each job it republishes gets a span in the job's trace.
        startTrace();
        const report = await sweepStaleJobs(d);
        // The sweep's work is committed whatever retention does: a failure here is logged and
        // reported as null, and the next tick erases what this one could not.
        let retention: RetentionReport | null = null;
        try {
          retention = await runRetention(d);
        } catch (error) {
          log.error("retention_failed", { error });
        }
        return json(200, {
          ...report,
          retention,
          history: await maintainHistory(d),
        });
      });
    },
  });
}

export default { fetch: createHandler(getDeps) };
