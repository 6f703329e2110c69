/** `GET /api/usage`: the caller's plan, units used and limit, when it resets, active jobs. */
import { type Deps, getDeps } from "../lib/deps.ts";
import { handle, json } from "../lib/http.ts";
import { toUsage } from "../lib/view.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      const r = await d.jobs.usage(userId);
      return json(200, toUsage(r.usage));
    },
  });
}

export default { fetch: createHandler(getDeps) };
