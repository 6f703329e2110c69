// @ts-check
/**
 * The HTTP API as the page uses it (docs/DESIGN.md#http-api): the page's calls over the typed
 * client (public/client.js), which is kept free of the page's habits (a prompt as a string, a
 * list of 20, an ended job's cancel read as that job) so it can stand alone as a package. Every
 * refusal is the client's `ApiError` carrying a `Problem` for `errorSentence`; a request that
 * got no answer at all is `code: "network"`.
 */
import { ApiError, createClient } from "./client.js";

export { ApiError };

/** @typedef {import("./client.js").Job} Job */
/** @typedef {import("./client.js").Usage} Usage */
/** @typedef {import("./client.js").ClientOptions} ApiOptions */

/** @param {ApiOptions} options */
export function createApi(options) {
  const client = createClient(options);
  return {
    client,
    /**
     * Start a job: a document from a prompt (the string), or any kind with its input.
     * `replayed` is true when the server recognised the key and returned the job it already
     * had (nothing reserved again).
     * @param {string | { kind: string, input: Record<string, unknown> }} job
     * @param {string} idempotencyKey
     * @returns {Promise<{ job: Job, usage: Usage, replayed: boolean }>}
     */
    async submit(job, idempotencyKey) {
      const r = await client.request("POST", "/api/jobs", {
        body: typeof job === "string" ? { prompt: job } : job,
        headers: { "idempotency-key": idempotencyKey },
      });
      return { job: r.body.job, usage: r.body.usage, replayed: r.status === 200 };
    },
    /**
     * @param {string | null} [cursor]
     * @returns {Promise<{ jobs: Job[], nextCursor: string | null }>}
     */
    listJobs: (cursor = null) => client.list({ limit: 20, cursor }),
    /**
     * @param {string} id
     * @returns {Promise<Job>}
     */
    getJob: (id) => client.get(id),
    /**
     * Cancel; a job that already ended comes back as it is (409 `already_finished`). Whether
     * this cancel refunded is the returned job's `quotaRefunded`.
     * @param {string} id
     * @returns {Promise<Job>}
     */
    async cancelJob(id) {
      try {
        return (await client.cancel(id)).job;
      } catch (e) {
        if (e instanceof ApiError && e.code === "already_finished" && e.problem.job) {
          return e.problem.job;
        }
        throw e;
      }
    },
    /** @returns {Promise<Usage>} */
    usage: () => client.usage(),
  };
}

/** @typedef {ReturnType<typeof createApi>} Api */
