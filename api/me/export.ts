/**
 * `GET /api/me/export`: everything stored about the caller (docs/DESIGN.md#retention-and-erasure):
 * their plan row, their usage counters, every job with its input, output and events; streamed,
 * a page of jobs at a time.
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { exportUser } from "../../lib/erasure.ts";
import { HttpError } from "../../lib/errors.ts";
import { handle } from "../../lib/http.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      // Before the database is asked: an export reads the caller's whole history, so a loop of
      // them is load on everyone's database for free.
      const limit = await d.exportLimiter.check(userId);
      if (!limit.ok)
        throw new HttpError(
          429,
          "rate_limited",
          `Too many exports. Try again in ${limit.retryAfterSeconds} s.`,
          { "retry-after": String(limit.retryAfterSeconds) },
        );
      const body = await exportUser(d, userId);
      return new Response(body, {
        status: 200,
        headers: {
          "content-type": "application/json; charset=utf-8",
          "content-disposition": 'attachment; filename="quota-jobs-export.json"',
          "cache-control": "no-store",
        },
      });
    },
  });
}

export default { fetch: createHandler(getDeps) };
