/**
 * `DELETE /api/me`: the caller's erasure (docs/DESIGN.md#retention-and-erasure). Their active
 * jobs are canceled (the cancel's refund rules; a running model stops at its next progress
 * write), then every row about them and their account are deleted. Idempotent: a token that
 * outlives the account erases nothing more and gets the same answer with zeros.
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { eraseUser } from "../../lib/erasure.ts";
import { handle, json } from "../../lib/http.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async DELETE(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      const r = await eraseUser(d, userId);
      return json(200, {
        deleted: true,
        jobs: r.jobs,
        canceledJobs: r.canceled,
        accountDeleted: r.account_deleted,
      });
    },
  });
}

export default { fetch: createHandler(getDeps) };
