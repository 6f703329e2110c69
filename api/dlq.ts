/** `POST /api/dlq`: QStash's failure callback after the last retry of a delivery failed. */
import { type Deps, getDeps } from "../lib/deps.ts";
import { handleDeliveryFailure } from "../lib/failure-callback.ts";
import { handle, json } from "../lib/http.ts";
import { decodeFailureCallback, verifyDelivery } from "../lib/queue.ts";
import { annotate, joinJob, traced, traceRequest } from "../lib/trace.ts";

export function createHandler(deps: () => Deps) {
  return handle({
    async POST(req) {
      const d = deps();
      return traceRequest(d.config, "POST /api/dlq", async () => {
        const { body } = await traced("qstash verify", {}, () =>
          verifyDelivery(req, d.config, "/api/dlq"),
        );
        const callback = decodeFailureCallback(body);
        // The failed message's publish, forwarded to the callback by QStash
        // (Upstash-Failure-Callback-Forward-traceparent).
        joinJob(callback.jobId, req.headers.get("traceparent"));
        annotate({
          "qstash.last_status": callback.status,
          "qstash.retried": callback.retried,
          "job.publish_seq": callback.seq,
        });
        const r = await handleDeliveryFailure(d, callback);
        annotate({ "job.outcome": r.outcome });
        return json(200, r);
      });
    },
  });
}

export default { fetch: createHandler(getDeps) };
