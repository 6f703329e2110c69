/**
 * `GET /api/ops/metrics?window=hour|day|week`: the operator page's charts. A signed-in user whose
 * token's `app_metadata` carries the operator role (lib/auth.ts); anyone else signed in is 403
 * `forbidden` before the database is asked anything.
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { handle, json } from "../../lib/http.ts";
import { parseWindow, readOpsMetrics, requireOperator } from "../../lib/ops.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const user = await d.auth.userFromRequest(req);
      requireOperator(user);
      const window = parseWindow(new URL(req.url));
      return json(200, await readOpsMetrics(d.rpc, d.config, window, d.now()));
    },
  });
}

export default { fetch: createHandler(getDeps) };
