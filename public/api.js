// @ts-check
/**
 * The HTTP API as the page uses it (docs/DESIGN.md#http-api). Every refusal becomes an `ApiError` carrying a
 * `Problem` (code, message, Retry-After, usage) for `errorSentence`; a request that got no
 * answer at all is `code: "network"`.
 */

/** @typedef {import("./status.js").Job} Job */
/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("./status.js").Problem} Problem */

export class ApiError extends Error {
  /** @param {Problem & { job?: Job | null }} problem */
  constructor(problem) {
    super(problem.message ?? problem.code);
    this.name = "ApiError";
    this.problem = problem;
  }
}

/**
 * @typedef {object} ApiOptions
 * @property {() => Promise<string | null>} token  the current access token (refreshed if due)
 * @property {() => Promise<string | null>} [refresh]  a new token after a 401, or null
 * @property {typeof fetch} [fetch]
 * @property {string} [base]  @default "" (same origin)
 */

/** @param {string | null} value */
function seconds(value) {
  if (value === null) return null;
  const n = Number(value);
  if (Number.isFinite(n)) return Math.max(0, n);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

/** @param {ApiOptions} options */
export function createApi(options) {
  const fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const base = options.base ?? "";

  /**
   * @param {string} method
   * @param {string} path
   * @param {{ body?: unknown, headers?: Record<string, string> }} [init]
   * @returns {Promise<{ status: number, body: any }>}
   */
  async function request(method, path, init = {}) {
    /** @param {string | null} token */
    const send = (token) => {
      /** @type {Record<string, string>} */
      const headers = { accept: "application/json", ...init.headers };
      if (token) headers.authorization = `Bearer ${token}`;
      if (init.body !== undefined) headers["content-type"] = "application/json";
      return fetchImpl(base + path, {
        method,
        headers,
        body: init.body === undefined ? undefined : JSON.stringify(init.body),
        cache: "no-store",
      });
    };
    let res;
    try {
      res = await send(await options.token());
      if (res.status === 401 && options.refresh) {
        const fresh = await options.refresh();
        if (fresh) res = await send(fresh);
      }
    } catch {
      throw new ApiError({ code: "network" });
    }
    /** @type {any} */
    let body = null;
    try {
      body = await res.json();
    } catch {
      body = null;
    }
    if (res.ok && body !== null) return { status: res.status, body };
    const error = body?.error;
    const details = error?.details ?? body?.details;
    throw new ApiError({
      code: typeof error?.code === "string" ? error.code : res.ok ? "internal" : "unavailable",
      message: typeof error?.message === "string" ? error.message : undefined,
      details: Array.isArray(details) ? details : undefined,
      status: res.status,
      retryAfterSeconds: seconds(res.headers.get("retry-after")),
      usage: body?.usage ?? null,
      job: body?.job ?? null,
    });
  }

  return {
    /**
     * Start a job: a document from a prompt (the string), or any kind with its input.
     * `replayed` is true when the server recognised the key and returned the job it already
     * had (nothing reserved again).
     * @param {string | { kind: string, input: Record<string, unknown> }} job
     * @param {string} idempotencyKey
     * @returns {Promise<{ job: Job, usage: Usage, replayed: boolean }>}
     */
    async submit(job, idempotencyKey) {
      const r = await request("POST", "/api/jobs", {
        body: typeof job === "string" ? { prompt: job } : job,
        headers: { "idempotency-key": idempotencyKey },
      });
      return { job: r.body.job, usage: r.body.usage, replayed: r.status === 200 };
    },
    /**
     * @param {string | null} [cursor]
     * @returns {Promise<{ jobs: Job[], nextCursor: string | null }>}
     */
    async listJobs(cursor = null) {
      const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : "";
      return (await request("GET", `/api/jobs?limit=20${q}`)).body;
    },
    /**
     * @param {string} id
     * @returns {Promise<Job>}
     */
    async getJob(id) {
      return (await request("GET", `/api/jobs/${encodeURIComponent(id)}`)).body.job;
    },
    /**
     * Cancel; a job that already ended comes back as it is (409 `already_finished`). Whether
     * this cancel refunded is the returned job's `quotaRefunded`.
     * @param {string} id
     * @returns {Promise<Job>}
     */
    async cancelJob(id) {
      try {
        return (await request("DELETE", `/api/jobs/${encodeURIComponent(id)}`)).body.job;
      } catch (e) {
        if (e instanceof ApiError && e.problem.code === "already_finished" && e.problem.job) {
          return e.problem.job;
        }
        throw e;
      }
    },
    /** @returns {Promise<Usage>} */
    async usage() {
      return (await request("GET", "/api/usage")).body;
    },
  };
}

/** @typedef {ReturnType<typeof createApi>} Api */
