/** `POST /api/dlq`: QStash's failure callback after the last retry of a delivery failed. */
import { type Deps, getDeps } from "../lib/deps.ts";
import { handleDeliveryFailure } from "../lib/failure-callback.ts";
import { handle, json } from "../lib/http.ts";
import { decodeFailureCallback, verifyDelivery } from "../lib/queue.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async POST(req) {
      const d = deps();
      const { body } = await verifyDelivery(req, d.config, "/api/dlq");
      const r = await handleDeliveryFailure(d, decodeFailureCallback(body));
      return json(200, r);
    },
  });
}

export default { fetch: createHandler(getDeps) };
