/**
 * `POST /api/worker`: QStash delivers `{"jobId", "seq"}` here. Verified on the raw body first.
 * Only the job id is read: every message of a job is a wake-up and start_job's guards decide
 * (a superseded message finds the job not_ready, running or final like any other, and one that
 * finds it ready may run it: it is what runs a job whose newer message was lost). The `seq` is
 * for the failure callback (lib/failure-callback.ts), the one caller that acts on a message
 * having failed rather than on the job's state.
 */
import { handle, json } from "../lib/http.ts";
import { decodeDelivery } from "../lib/message.ts";
import { verifyDelivery } from "../lib/queue.ts";
import { annotate, joinJob, traced, traceRequest } from "../lib/trace.ts";
import { runJob, type WorkerDeps } from "../lib/worker/index.ts";
import { getWorkerDeps } from "../lib/worker-deps.ts";

export function createHandler(deps: () => WorkerDeps) {
  return handle({
    async POST(req) {
      const d = deps();
      return traceRequest(d.config, "POST /api/worker", async () => {
        const { body, deliveryId } = await traced("qstash verify", {}, () =>
          verifyDelivery(req, d.config, "/api/worker"),
        );
        const jobId = decodeDelivery(body);
        // Signed by QStash: this delivery continues the trace of the publish that sent it.
        joinJob(jobId, req.headers.get("traceparent"));
        annotate({ "qstash.retried": Number(req.headers.get("upstash-retried")) || 0 });
        const r = await runJob(d, jobId, { deliveryId });
        annotate({ "job.outcome": r.outcome });
        // Only the edge speaks HTTP: a retry is QStash's 503 (it redelivers), anything else 200.
        return json(
          r.retry ? 503 : 200,
          { outcome: r.outcome },
          r.retry ? { "retry-after": "10" } : {},
        );
      });
    },
  });
}

export default { fetch: createHandler(getWorkerDeps) };
