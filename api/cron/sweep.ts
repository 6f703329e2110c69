/** `GET /api/cron/sweep`: Vercel cron (or a QStash schedule) ends stale jobs with refunds. */
import { timingSafeEqual } from "node:crypto";
import { type Deps, getDeps } from "../../lib/deps.ts";
import { HttpError } from "../../lib/errors.ts";
import { handle, json } from "../../lib/http.ts";
import { sweepStaleJobs } from "../../lib/sweeper.ts";

function authorized(req: Request, secret: string): boolean {
  const given = Buffer.from(req.headers.get("authorization") ?? "");
  const want = Buffer.from(`Bearer ${secret}`);
  return given.length === want.length && timingSafeEqual(given, want);
}

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      if (!authorized(req, d.config.cronSecret)) {
        throw new HttpError(401, "unauthorized", "Missing or wrong cron secret.", {
          "www-authenticate": "Bearer",
        });
      }
      const report = await sweepStaleJobs(d);
      return json(200, report);
    },
  });
}

export default { fetch: createHandler(getDeps) };
