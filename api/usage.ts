/**
 * `GET /api/usage`: the caller's plan, units used and limit, when it resets, active jobs, the
 * kinds the plan offers and every kind's declaration (the page's choices and forms).
 */
import { type Deps, getDeps } from "../lib/deps.ts";
import { handle, json } from "../lib/http.ts";
import { toUsageWithCatalog } from "../lib/view.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      const r = await d.jobs.usage(userId);
      return json(200, await toUsageWithCatalog(r.usage));
    },
  });
}

export default { fetch: createHandler(getDeps) };
