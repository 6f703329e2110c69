/**
 * `GET /api/jobs/:id` reads a job (polled by the page); `DELETE` cancels it, with a refund for a
 * queued job and for a running one within the plan's bound (docs/DESIGN.md#cancel).
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { HttpError } from "../../lib/errors.ts";
import { handle, json } from "../../lib/http.ts";
import { log } from "../../lib/log.ts";
import { userPseudonym } from "../../lib/log-pseudonym.ts";
import { annotate, joinJob, traced, traceRequest } from "../../lib/trace.ts";
import { jobIdFrom } from "../../lib/validate.ts";
import { toJob } from "../../lib/view.ts";

const notFound = () => new HttpError(404, "not_found", "No such job.");

/** Who asks (401 for no one), and the job id the URL names (404 for none). */
async function callerAndJob(d: Deps, req: Request) {
  const { userId } = await d.auth.userFromRequest(req);
  const id = jobIdFrom(new URL(req.url));
  if (!id) throw notFound();
  return { userId, id };
}

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const { userId, id } = await callerAndJob(d, req);
      const r = await d.jobs.get(id, userId);
      if (r.outcome === "not_found") throw notFound();
      return json(200, { job: await toJob(r.job, d.now()) }, { "cache-control": "no-store" });
    },
    async DELETE(req) {
      const d = deps();
      return traceRequest(d.config, "DELETE /api/jobs/:id", () => cancel(d, req));
    },
  });
}

async function cancel(d: Deps, req: Request): Promise<Response> {
  const { userId, id } = await traced("auth", {}, () => callerAndJob(d, req));
  const r = await traced("db cancel_job", { "db.system.name": "postgresql" }, () =>
    d.jobs.cancel(id, userId),
  );
  // A job's cancel is a span of its trace; a job that is not the caller's stays out of it.
  if (r.outcome !== "not_found") {
    joinJob(id);
    annotate({ "job.outcome": r.outcome, "job.status": r.job.status });
  }
  switch (r.outcome) {
    case "not_found":
      throw notFound();
    case "already_finished":
      throw new HttpError(
        409,
        "already_finished",
        `The job already ended (${r.job.status}).`,
        {},
        {
          job: await toJob(r.job, d.now()),
        },
      );
    case "canceled":
      log.info("job_canceled", {
        jobId: id,
        user: await userPseudonym(d.jobs, userId),
        refunded: r.refunded,
      });
      annotate({ "job.refunded": r.refunded });
      return json(200, { job: await toJob(r.job, d.now()), quotaRefunded: r.refunded });
  }
}

export default { fetch: createHandler(getDeps) };
