// @ts-check
/**
 * A typed client of the HTTP API (docs/DESIGN.md#http-api; the document is /openapi.json), one
 * ES module with no imports at run time so it can be served to the page as it is and published
 * as a package. Every refusal is an `ApiError` whose `code` is one the API sends, or `network`
 * when no answer arrived (the request may or may not have been processed).
 *
 * `watch` follows one job until it is final. It polls GET /api/jobs/<id> at the page's pace
 * (`watchDelay`) and accepts a push `source` (e.g. a Realtime channel): a push wakes it early
 * with the state it carries, and while the source vouches for its pushes (`quiet`) it does not
 * poll at all, reading only when the source says a push was missed. The page follows its jobs
 * with it (public/job-list.js).
 */

/** @typedef {import("../lib/view.ts").Job} Job */
/** @typedef {import("../lib/view.ts").Usage} Usage */

/**
 * The error codes the API answers with (HttpError in api/ and lib/, and lib/http.ts's own),
 * less those only QStash's deliveries meet; and `network`. test/unit/public-client.test.ts
 * holds this list to the sources.
 */
export const API_ERROR_CODES = /** @type {const} */ ([
  "already_finished",
  "already_member",
  "forbidden",
  "idempotency_key_reused",
  "internal",
  "invalid_cap",
  "invalid_idempotency_key",
  "invalid_input",
  "invalid_invitation",
  "invalid_json",
  "invalid_organization_id",
  "invalid_prompt",
  "invalid_query",
  "invitation_expired",
  "invitation_not_found",
  "invitation_used",
  "kind_not_in_plan",
  "last_owner",
  "mail_failed",
  "mail_rate_limited",
  "member_cap_reached",
  "method_not_allowed",
  "model_retired",
  "network",
  "no_plan",
  "no_such_member",
  "not_a_member",
  "not_found",
  "payload_too_large",
  "pool_exhausted",
  "quota_exceeded",
  "rate_limited",
  "too_many_active_jobs",
  "unauthorized",
  "unavailable",
  "unknown_kind",
  "unsupported_media_type",
  "user_not_found",
  "wrong_recipient",
]);

/** @typedef {(typeof API_ERROR_CODES)[number]} ApiErrorCode */

/**
 * What came with a refusal. `retryAfterSeconds` is the Retry-After header's wait; `usage` and
 * `job` are the body's fields beside `error` (a quota refusal's usage, an ended job's view).
 * @typedef {{
 *   code: ApiErrorCode,
 *   message?: string,
 *   status?: number,
 *   retryAfterSeconds?: number | null,
 *   usage?: Usage | null,
 *   details?: { path: string, message: string }[],
 *   job?: Job | null,
 * }} Problem
 */

export class ApiError extends Error {
  /** @param {Problem} problem */
  constructor(problem) {
    super(problem.message ?? problem.code);
    this.name = "ApiError";
    /** @type {ApiErrorCode} */
    this.code = problem.code;
    this.problem = problem;
  }
}

/** @param {unknown} code @returns {ApiErrorCode} */
function knownCode(code) {
  const codes = /** @type {readonly string[]} */ (API_ERROR_CODES);
  return typeof code === "string" && codes.includes(code)
    ? /** @type {ApiErrorCode} */ (code)
    : "internal";
}

/** @param {string | null} value  a Retry-After header: seconds or an HTTP date */
function seconds(value) {
  if (value === null) return null;
  const n = Number(value);
  if (Number.isFinite(n)) return Math.max(0, n);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, (at - Date.now()) / 1000);
}

/**
 * The polling pace: the first wait by what the job does, then ×1.5 each look that finds nothing
 * new, to 10 s.
 * - `fast` while it is queued or starting (running with no output yet): the next change is the
 *   one the person waits for (the worker's claim, the first token), so the first look is after
 *   250 ms;
 * - `streaming` while its output grows: the worker writes its progress about once a second
 *   (PROGRESS_INTERVAL_MS), so looking faster than that would find nothing new;
 * - `slow` otherwise (waiting for the AI provider: nothing moves before its time).
 * A job that does not move costs a few requests a minute whatever its pace; a change starts
 * over at its pace's first wait.
 */
export const WATCH_FIRST_MS = { fast: 250, streaming: 1000, slow: 1500 };
export const WATCH_MAX_MS = 10_000;
export const WATCH_GROWTH = 1.5;

/**
 * The wait before look number `attempt` (0-based) since the last change, for `job` as last seen:
 * fast while queued or running with no output yet, streaming while output grows, else slow.
 * @param {number} attempt
 * @param {Pick<Job, "phase" | "partialOutput"> | undefined} job
 */
export function watchDelay(attempt, job) {
  const pace =
    job?.phase === "queued" || (job?.phase === "running" && !job.partialOutput)
      ? "fast"
      : job?.phase === "running"
        ? "streaming"
        : "slow";
  const first = WATCH_FIRST_MS[pace];
  return Math.min(WATCH_MAX_MS, Math.round(first * WATCH_GROWTH ** Math.max(0, attempt)));
}

const FINAL = ["succeeded", "failed", "canceled"];

/** @param {Pick<Job, "status">} job */
export const isFinal = (job) => FINAL.includes(job.status);

/**
 * A job's state as `watch` paces its looks by: a new status or phase, output that grew, the
 * model starting to think or to write, a resume time set. Counters alone (tokens) do not start
 * the fast pace again; they are yielded all the same (any change of the job is).
 * @param {Job} job
 */
function stateKey(job) {
  return JSON.stringify([
    job.status,
    job.phase,
    job.partialOutput?.length ?? 0,
    job.thinking,
    job.resumeAt,
    job.output === null,
  ]);
}

/**
 * A push source for `watch` (e.g. a Realtime channel). `subscribe` hears of job `jobId` until
 * the returned function is called: `onState(job, seq?)` with a state it heard (taken as it comes;
 * a `seq` not above the last one is dropped), `onStale()` when the job may have moved and only a
 * read can tell (a missed message, a rejoin, a tab that woke). While `quiet()` is true the source
 * vouches that pushes arrive, and `watch` does not poll: it reads only when told it is stale, so
 * a source must call `onStale` whenever it stops being quiet.
 * @typedef {{
 *   subscribe(jobId: string, onState: (job: Job, seq?: number) => void, onStale?: () => void): () => void,
 *   quiet?(): boolean,
 * }} WatchSource
 */

/**
 * @typedef {object} ClientOptions
 * @property {() => Promise<string | null>} token  the current access token (refreshed if due)
 * @property {() => Promise<string | null>} [refresh]  a new token after a 401, or null
 * @property {typeof fetch} [fetch]
 * @property {string} [base]  @default "" (same origin)
 */

/**
 * @typedef {object} WatchOptions
 * @property {AbortSignal} [signal]  ends the iteration (no error) when aborted
 * @property {WatchSource} [source]  pushes that wake the poller early (polling stays the fallback)
 * @property {Job} [from]  the job as the caller shows it already: not yielded again, and the
 *   first look waits as a poll after it would (else the first look is at once)
 * @property {(attempt: number, job: Job | undefined) => number} [delay]  @default watchDelay
 */

/** @param {ClientOptions} options */
export function createClient(options) {
  const fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const base = options.base ?? "";

  /**
   * One call: JSON in and out, the bearer token (once more with a refreshed one after a 401),
   * and any refusal as an `ApiError`.
   * @param {string} method
   * @param {string} path
   * @param {{ body?: unknown, headers?: Record<string, string>, signal?: AbortSignal }} [init]
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
        ...(init.signal ? { signal: init.signal } : {}),
      });
    };
    let res;
    try {
      res = await send(await options.token());
      if (res.status === 401 && options.refresh) {
        const fresh = await options.refresh();
        if (fresh) res = await send(fresh);
      }
    } catch (e) {
      if (init.signal?.aborted) throw e;
      throw new ApiError({ code: "network" });
    }
    return answer(res);
  }

  /** @param {Response} res */
  async function answer(res) {
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
      code: error?.code !== undefined ? knownCode(error.code) : res.ok ? "internal" : "unavailable",
      message: typeof error?.message === "string" ? error.message : undefined,
      details: Array.isArray(details) ? details : undefined,
      status: res.status,
      retryAfterSeconds: seconds(res.headers.get("retry-after")),
      usage: body?.usage ?? null,
      job: body?.job ?? null,
    });
  }

  const client = {
    request,
    /**
     * Start a job of `kind` with its input (a document's is `{prompt}`). The same
     * `idempotencyKey` again returns the job it made (`replayed`, nothing reserved again).
     * `organizationId`: the job holds on that organization's pool (its plan, the member's cap);
     * absent or null, on the caller's own plan.
     * @param {string} kind
     * @param {Record<string, unknown>} input
     * @param {{ idempotencyKey: string, organizationId?: string | null }} options
     * @returns {Promise<{ job: Job, usage: Usage, replayed: boolean }>}
     */
    async enqueue(kind, input, { idempotencyKey, organizationId }) {
      const r = await request("POST", "/api/jobs", {
        body: organizationId ? { kind, input, organization_id: organizationId } : { kind, input },
        headers: { "idempotency-key": idempotencyKey },
      });
      return { job: r.body.job, usage: r.body.usage, replayed: r.status === 200 };
    },
    /**
     * @param {string} id
     * @param {{ signal?: AbortSignal }} [options]
     * @returns {Promise<Job>}
     */
    async get(id, options = {}) {
      const path = `/api/jobs/${encodeURIComponent(id)}`;
      return (await request("GET", path, options)).body.job;
    },
    /**
     * One page of the caller's jobs, newest first; `nextCursor` asks for the next (null: none).
     * @param {{ limit?: number, cursor?: string | null }} [options]
     * @returns {Promise<{ jobs: Job[], nextCursor: string | null }>}
     */
    async list({ limit, cursor } = {}) {
      const q = new URLSearchParams();
      if (limit !== undefined) q.set("limit", String(limit));
      if (cursor) q.set("cursor", cursor);
      const query = q.size ? `?${q}` : "";
      return (await request("GET", `/api/jobs${query}`)).body;
    },
    /**
     * Cancel; an ended job refuses with `already_finished` (its view is `problem.job`).
     * `quotaRefunded`: whether this cancel gave the hold back.
     * @param {string} id
     * @returns {Promise<{ job: Job, quotaRefunded: boolean }>}
     */
    async cancel(id) {
      return (await request("DELETE", `/api/jobs/${encodeURIComponent(id)}`)).body;
    },
    /** @returns {Promise<Usage>} */
    async usage() {
      return (await request("GET", "/api/usage")).body;
    },
    /**
     * Each change of job `jobId` (the first look's too, unless `from` is what the caller shows)
     * until it is final, that one included.
     * A refusal other than a wait (`rate_limited`, `unavailable`, `network`: waited out, the
     * Retry-After respected) ends it with the error.
     * @param {string} jobId
     * @param {WatchOptions} [options]
     * @returns {AsyncGenerator<Job, void, undefined>}
     */
    watch(jobId, options = {}) {
      return watchJob(client, jobId, options);
    },
  };
  return client;
}

/** @typedef {ReturnType<typeof createClient>} Client */

const WAITABLE = ["rate_limited", "unavailable", "network"];

/**
 * @param {Pick<Client, "get">} client
 * @param {string} jobId
 * @param {WatchOptions} options
 * @returns {AsyncGenerator<Job, void, undefined>}
 */
async function* watchJob(client, jobId, { signal, source, delay = watchDelay, from }) {
  const wake = createWake(signal);
  /** @type {Job | undefined} */
  let pushed;
  let stale = !from;
  let lastSeq = -Infinity;
  const unsubscribe = source?.subscribe(
    jobId,
    (job, seq) => {
      if (seq !== undefined && seq <= lastSeq) return;
      if (seq !== undefined) lastSeq = seq;
      pushed = job;
      wake.now();
    },
    () => {
      stale = true;
      wake.now();
    },
  );
  /** @type {Job | undefined} */
  let last = from;
  let shown = from ? JSON.stringify(from) : "";
  let attempt = 0;
  try {
    if (from && isFinal(from)) return;
    if (from) await pause(0);
    while (!signal?.aborted) {
      /** @type {Job | undefined} */
      let job = pushed;
      pushed = undefined;
      let waitMs = 0;
      if (!job && (stale || !source?.quiet?.())) {
        stale = false;
        try {
          job = await client.get(jobId, signal ? { signal } : {});
        } catch (e) {
          if (signal?.aborted) return;
          if (!(e instanceof ApiError) || !WAITABLE.includes(e.code)) throw e;
          waitMs = (e.problem.retryAfterSeconds ?? 0) * 1000;
        }
      }
      const moved = job !== undefined && (!last || stateKey(job) !== stateKey(last));
      attempt = moved ? 0 : attempt + 1;
      if (job && JSON.stringify(job) !== shown) {
        last = job;
        shown = JSON.stringify(job);
        yield job;
        if (isFinal(job)) return;
      }
      await pause(waitMs);
    }
  } finally {
    unsubscribe?.();
    wake.close();
  }

  /**
   * Until the next look: none while a push or a read is due; until woken while the source is
   * quiet (and nothing forces a wait); else the poll's wait.
   * @param {number} waitMs  at least this (a Retry-After)
   */
  function pause(waitMs) {
    if ((pushed || stale) && waitMs === 0) {
      wake.settle();
      return Promise.resolve();
    }
    if (source?.quiet?.() && waitMs === 0) return wake.after(Infinity);
    return wake.after(Math.max(waitMs, delay(attempt, last)));
  }
}

/**
 * A sleep that a push (`now`) or the signal ends early.
 * @param {AbortSignal | undefined} signal
 */
function createWake(signal) {
  /** @type {(() => void) | null} */
  let resolve = null;
  /** @type {ReturnType<typeof setTimeout> | undefined} */
  let timer;
  let early = false;
  const done = () => {
    clearTimeout(timer);
    const r = resolve;
    resolve = null;
    r?.();
  };
  signal?.addEventListener("abort", done);
  return {
    now() {
      if (resolve) done();
      else early = true;
    },
    /** @param {number} ms */
    after(ms) {
      if (early || signal?.aborted) {
        early = false;
        return Promise.resolve();
      }
      return new Promise((r) => {
        resolve = () => r(undefined);
        // Infinity: until woken (a timer would overflow and fire at once)
        if (Number.isFinite(ms)) timer = setTimeout(done, ms);
      });
    },
    /** A wake that came while awake is spent (the look it asked for is about to happen). */
    settle() {
      early = false;
    },
    close() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
    },
  };
}
