/**
 * `GET /api/cron/sweep`: Vercel cron (or a QStash schedule) ends stale jobs with refunds, then
 * keeps job_events' monthly partitions (lib/history.ts).
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { HttpError } from "../../lib/errors.ts";
import { maintainHistory } from "../../lib/history.ts";
import { bearerMatches, handle, json } from "../../lib/http.ts";
import { sweepStaleJobs } from "../../lib/sweeper.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      if (!bearerMatches(req, d.config.cronSecret)) {
        throw new HttpError(401, "unauthorized", "Missing or wrong cron secret.", {
          "www-authenticate": "Bearer",
        });
      }
      const report = await sweepStaleJobs(d);
      return json(200, { ...report, history: await maintainHistory(d) });
    },
  });
}

export default { fetch: createHandler(getDeps) };
