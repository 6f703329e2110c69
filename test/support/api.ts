/**
 * The in-process API harness: every `api/` handler called with a `new Request(...)`, no HTTP
 * server for the app. Behind the handlers run the real local parts, one set per test file:
 * this file's own PostgreSQL database (`useFreshDatabase`), the PostgREST stand-in on it, a
 * real redis-server behind the Upstash REST stand-in, and the fake OpenAI model.
 *
 * QStash and the alert webhook are boundaries we do not own: msw stands at them, answering the
 * way they answer, and records what the app sent. A test "delivers" a recorded message by
 * signing it exactly as QStash does and calling `api/worker.ts` (or `api/dlq.ts` with the
 * failure-callback body), so the whole loop runs without a queue.
 *
 * The Supabase project is one created today: `sb_secret_…` / `sb_publishable_…` keys, user
 * tokens signed ES256 by the Auth stand-in (dev/auth/, its JWKS served on the REST stand-in's
 * origin), and the Marketplace-synced legacy `SUPABASE_JWT_SECRET` still set (HS256 tokens
 * minted with `JWT_SECRET` and `app.issuer` verify too, as during a rotation).
 *
 * @example
 * const app = useApi();
 * test("...", async () => {
 *   const user = await app.newUser();
 *   const res = await app.enqueue(user, "a haiku");
 *   const [message] = app.qstash.forJob((await res.json()).job.id);
 *   expect((await app.deliver(message)).status).toBe(200);
 * });
 */
import { randomBytes, randomUUID } from "node:crypto";
import { Redis as IORedis } from "ioredis";
import { HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import type pg from "pg";
import { afterAll, afterEach, beforeAll, beforeEach, expect } from "vitest";
import { createHandler as cronSweepHandler } from "../../api/cron/sweep.ts";
import { createHandler as dlqHandler } from "../../api/dlq.ts";
import { createHandler as healthHandler } from "../../api/health.ts";
import { createHandler as jobHandler } from "../../api/jobs/[id].ts";
import { createHandler as jobsHandler } from "../../api/jobs/index.ts";
import { createHandler as usageHandler } from "../../api/usage.ts";
import { createHandler as workerHandler } from "../../api/worker.ts";
import { type AuthStandIn, createAuthStandIn, makeProject } from "../../dev/auth/index.ts";
import { type FakeOpenAI, startFakeOpenAI } from "../../dev/openai/index.ts";
import { type RunningPostgrest, startPostgrest } from "../../dev/postgrest/index.ts";
import { DEV_SIGNING_KEYS, DEV_TOKEN } from "../../dev/qstash/constants.ts";
import { signDelivery } from "../../dev/qstash/signing.ts";
import { type RunningUpstashRedis, startUpstashRedis } from "../../dev/upstash-redis/index.ts";
import { type RunningRedisServer, startRedisServer } from "../../dev/upstash-redis/redis-server.ts";
import { loadConfig } from "../../lib/config.ts";
import { createDeps, type Deps } from "../../lib/deps.ts";
import type { Handler } from "../../lib/http.ts";
import { setLogSink } from "../../lib/log.ts";
import type { WorkerDeps } from "../../lib/worker/index.ts";
import { createWorkerDeps } from "../../lib/worker-deps.ts";
import { adminPool, databaseUrl, expectNoDrift, newUser, useFreshDatabase } from "./db.ts";
import { freePort } from "./ports.ts";

export const APP_URL = "https://app.test";
export const QSTASH_URL = "https://qstash.test";
export const WEBHOOK_URL = "https://hooks.test/services/T000/B000/alerts";
export const JWT_SECRET = "api-tests-jwt-secret-with-more-than-32-characters";
export const CRON_SECRET = "api-tests-cron-secret-0123456789";
export const OPENAI_API_KEY = "sk-api-tests-0123456789abcdef";
const REDIS_TOKEN = "api-tests-redis-token";

/** Every route, as Vercel maps the files. */
export type Route = "jobs" | "job" | "usage" | "worker" | "dlq" | "sweep" | "health";
export type Handlers = Record<Route, Handler>;

/** A signed-in user: their id, a valid access token and the header that carries it. */
export interface TestUser {
  id: string;
  token: string;
  headers: { authorization: string };
}

/** One message the app published to QStash, as QStash received it. */
export interface PublishedMessage {
  messageId: string;
  /** The exact destination URL (the path after /v2/publish/ plus its query string). */
  destination: string;
  /** The raw body, byte for byte what QStash would deliver. */
  body: string;
  /** The publish request's headers, lowercased (`upstash-retries`, ...). */
  headers: Record<string, string>;
  /** QStash saw this deduplication id before and dropped the copy (answered 202). */
  deduplicated: boolean;
}

export type QStashFailure = "500" | "429" | "network";

/** QStash's publish endpoint, as msw answers it. */
export class QStashRecorder {
  readonly messages: PublishedMessage[] = [];
  private failure: QStashFailure | null = null;
  private readonly dedup = new Map<string, string>();

  /** Every later publish fails this way until `reset()` (or `failWith(null)`). */
  failWith(failure: QStashFailure | null): void {
    this.failure = failure;
  }

  /** Messages QStash accepted (deduplicated copies excluded) whose body names this job. */
  forJob(jobId: string): PublishedMessage[] {
    return this.messages.filter((m) => !m.deduplicated && m.body.includes(jobId));
  }

  /** The newest accepted message for a job; fails the test if there is none. */
  latestFor(jobId: string): PublishedMessage {
    const m = this.forJob(jobId).at(-1);
    if (!m) throw new Error(`nothing was published for job ${jobId}`);
    return m;
  }

  reset(): void {
    this.messages.length = 0;
    this.failure = null;
    this.dedup.clear();
  }

  /** @internal the msw resolver */
  async answer(request: Request): Promise<Response> {
    if (request.headers.get("authorization") !== `Bearer ${DEV_TOKEN}`) {
      return HttpResponse.json({ error: "Unauthorized" }, { status: 401 });
    }
    switch (this.failure) {
      case "500":
        return HttpResponse.json({ error: "internal server error" }, { status: 500 });
      case "429":
        return HttpResponse.json(
          { error: "daily message limit exceeded" },
          {
            status: 429,
            headers: {
              "RateLimit-Limit": "1000",
              "RateLimit-Remaining": "0",
              "RateLimit-Reset": String(Math.ceil(Date.now() / 1000) + 3600),
            },
          },
        );
      case "network":
        return HttpResponse.error();
      case null:
        break;
    }
    const url = new URL(request.url);
    const destination = url.pathname.replace(/^\/v2\/publish\//, "") + url.search;
    const headers: Record<string, string> = {};
    request.headers.forEach((value, name) => {
      headers[name.toLowerCase()] = value;
    });
    const body = await request.text();
    const dedupId = headers["upstash-deduplication-id"];
    const earlier = dedupId === undefined ? undefined : this.dedup.get(dedupId);
    if (earlier !== undefined) {
      this.messages.push({ messageId: earlier, destination, body, headers, deduplicated: true });
      return HttpResponse.json(
        { messageId: earlier, url: destination, deduplicated: true },
        { status: 202 },
      );
    }
    const messageId = `msg_${randomBytes(20).toString("hex")}`;
    if (dedupId !== undefined) this.dedup.set(dedupId, messageId);
    this.messages.push({ messageId, destination, body, headers, deduplicated: false });
    return HttpResponse.json({ messageId, url: destination });
  }
}

/** The on-call webhook (Slack-compatible), as msw answers it. */
export class WebhookRecorder {
  readonly payloads: Array<{ text: string; blocks: unknown[] }> = [];
  private status = 200;

  /** Answer every later alert with this status (e.g. 500) until `reset()`. */
  answerWith(status: number): void {
    this.status = status;
  }

  ofKind(kind: string): Array<{ text: string; blocks: unknown[] }> {
    return this.payloads.filter((p) => p.text.startsWith(`[${kind}]`));
  }

  reset(): void {
    this.payloads.length = 0;
    this.status = 200;
  }

  /** @internal the msw resolver */
  async answer(request: Request): Promise<Response> {
    if (this.status !== 200) return new HttpResponse("internal_error", { status: this.status });
    this.payloads.push((await request.json()) as { text: string; blocks: unknown[] });
    return new HttpResponse("ok", { status: 200, headers: { "content-type": "text/plain" } });
  }
}

/** Options of {@link useApi}. */
export interface ApiOptions {
  /** Extra environment for this file's config (tunables such as `MODEL_TIMEOUT_MS`). */
  env?: Record<string, string>;
}

/** What a test file gets: the handlers, the local parts behind them and helpers. */
export interface Api {
  env: Record<string, string>;
  /** `iss` of this project's user tokens: `${SUPABASE_URL}/auth/v1`. */
  issuer: string;
  /** The project's Auth stand-in (signs ES256 user tokens). */
  auth: AuthStandIn;
  deps: Deps;
  workerDeps: WorkerDeps;
  /** The handlers wired to `deps` / `workerDeps`. */
  handlers: Handlers;
  /** Superuser pool on this file's database, for setup and assertions. */
  admin: pg.Pool;
  model: FakeOpenAI;
  qstash: QStashRecorder;
  webhook: WebhookRecorder;
  /** A direct connection to the redis-server behind the Upstash stand-in. */
  redis: IORedis;
  /** The app's log lines of the current test (JSON strings). */
  logs: string[];

  /** A user on `plan` (a seeded plan, or one the test made). */
  newUser(plan?: string): Promise<TestUser>;
  /** Call one route in-process; `path` may carry a query string. */
  call(route: Route, path: string, init?: RequestInit, handlers?: Handlers): Promise<Response>;
  /** `POST /api/jobs` with a JSON `{prompt}` body, through `handlers` (the app's own if none). */
  enqueue(
    user: TestUser,
    prompt: string,
    headers?: Record<string, string>,
    handlers?: Handlers,
  ): Promise<Response>;
  /** `DELETE /api/jobs/:id` as `user`: cancel the job. */
  cancel(user: TestUser, jobId: string): Promise<Response>;
  /** Enqueue and return the new job's id (asserts the 202). */
  enqueueOk(user: TestUser, prompt?: string): Promise<string>;
  /** Deliver a published message to `api/worker.ts` as QStash would (signed, same body). */
  deliver(
    message: PublishedMessage,
    opts?: { retried?: number; handlers?: Handlers },
  ): Promise<Response>;
  /** QStash's failure callback for a message (to its Upstash-Failure-Callback URL). */
  failureCallback(
    message: PublishedMessage,
    opts?: { status?: number; retried?: number; dlqId?: string; handlers?: Handlers },
  ): Promise<Response>;
  /** Handlers over other dependencies (e.g. a database that is down). */
  handlersFor(deps: Deps, workerDeps?: WorkerDeps): Handlers;
  /** Fresh dependencies from this file's config with some variables changed. */
  makeDeps(env: Record<string, string>): { deps: Deps; workerDeps: WorkerDeps };
  /** Dependencies whose database (the PostgREST stand-in) is gone: supabase-js status 0. */
  databaseDown(): Promise<{ deps: Deps; workerDeps: WorkerDeps }>;
  /** Dependencies whose Redis (the Upstash REST endpoint) does not answer. */
  redisDown(): Promise<{ deps: Deps; workerDeps: WorkerDeps }>;
  /** The job row, straight from Postgres. */
  jobRow(jobId: string): Promise<JobDbRow>;
  /** Units the user has reserved in all periods, straight from Postgres. */
  unitsUsed(userId: string): Promise<number>;
  /** The job's event log, oldest first. */
  events(
    jobId: string,
  ): Promise<
    Array<{ event: string; from_status: string | null; to_status: string; detail: unknown }>
  >;
}

export interface JobDbRow {
  id: string;
  user_id: string;
  status: string;
  output: string | null;
  failure_reason: string | null;
  last_error: string | null;
  attempts: number;
  provider_quota_hits: number;
  publish_seq: number;
  republish_count: number;
  resume_at: Date | null;
  lease_expires_at: Date | null;
  created_at: Date;
  queued_at: Date;
  refunded_at: Date | null;
  finished_at: Date | null;
}

/**
 * Sets up the harness for this test file (call at the top level). After each test: no drift in
 * the whole database, and the fake model, QStash recorder, webhook and Redis start clean.
 */
export function useApi(options: ApiOptions = {}): Api {
  useFreshDatabase();

  const qstash = new QStashRecorder();
  const webhook = new WebhookRecorder();
  const msw = setupServer(
    http.post(`${QSTASH_URL}/v2/publish/*`, ({ request }) => qstash.answer(request)),
    http.post(WEBHOOK_URL, ({ request }) => webhook.answer(request)),
  );
  let rest: RunningPostgrest;
  let redisServer: RunningRedisServer;
  let upstash: RunningUpstashRedis;
  let restoreSink: ReturnType<typeof setLogSink> | undefined;

  const api = {
    qstash,
    webhook,
    logs: [] as string[],
  } as Partial<Api> as Api;

  beforeAll(async () => {
    msw.listen({ onUnhandledRequest: "bypass" });
    restoreSink = setLogSink((line) => {
      api.logs.push(line);
      if (process.env.API_TEST_LOGS) process.stderr.write(`${line}\n`);
    });
    const [restPort, redisPort, upstashPort, modelPort] = await Promise.all([
      freePort(),
      freePort(),
      freePort(),
      freePort(),
    ]);
    api.issuer = `http://127.0.0.1:${restPort}/auth/v1`;
    const project = await makeProject({ shape: "new", issuer: api.issuer, jwtSecret: JWT_SECRET });
    api.auth = createAuthStandIn(project);
    rest = await startPostgrest({
      port: restPort,
      databaseUrl: databaseUrl(),
      jwtSecret: JWT_SECRET,
      serviceRoleKey: project.secretKey,
      anonKey: project.publishableKey,
      auth: api.auth,
    });
    redisServer = await startRedisServer({ port: redisPort });
    upstash = await startUpstashRedis({
      port: upstashPort,
      redisUrl: redisServer.url,
      token: REDIS_TOKEN,
    });
    api.model = await startFakeOpenAI({ port: modelPort });
    api.redis = new IORedis(redisServer.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
    await api.redis.connect();
    api.admin = adminPool();
    // The sweeper touches every job in a database: make sure this file has its own copy.
    const { rows } = await api.admin.query<{ db: string }>("select current_database() as db");
    expect(rows[0]?.db).toMatch(/^t_/);

    api.env = {
      SUPABASE_URL: rest.url,
      SUPABASE_SECRET_KEY: project.secretKey,
      SUPABASE_PUBLISHABLE_KEY: project.publishableKey,
      SUPABASE_JWT_SECRET: JWT_SECRET,
      QSTASH_URL,
      QSTASH_TOKEN: DEV_TOKEN,
      QSTASH_CURRENT_SIGNING_KEY: DEV_SIGNING_KEYS.current,
      QSTASH_NEXT_SIGNING_KEY: DEV_SIGNING_KEYS.next,
      UPSTASH_REDIS_REST_URL: upstash.url,
      UPSTASH_REDIS_REST_TOKEN: REDIS_TOKEN,
      OPENAI_API_KEY,
      OPENAI_BASE_URL: api.model.url,
      APP_URL,
      CRON_SECRET,
      ALERT_WEBHOOK_URL: WEBHOOK_URL,
      // Short enough that a timeout test takes seconds, long enough for a normal answer.
      MODEL_TIMEOUT_MS: "2000",
      ...options.env,
    };
    const built = api.makeDeps({});
    api.deps = built.deps;
    api.workerDeps = built.workerDeps;
    api.handlers = api.handlersFor(api.deps, api.workerDeps);
  });

  beforeEach(() => {
    api.logs.length = 0;
  });

  afterEach(async () => {
    // No drift (docs/DESIGN.md#invariant-1-no-drift) after every test, over the whole database this file owns.
    await expectNoDrift(api.admin);
    api.model.reset();
    qstash.reset();
    webhook.reset();
    await api.redis.flushall();
  });

  afterAll(async () => {
    msw.close();
    if (restoreSink) setLogSink(restoreSink);
    await api.redis?.quit().catch(() => undefined);
    await api.model?.close();
    await upstash?.close();
    await redisServer?.stop();
    await rest?.close();
  });

  api.handlersFor = (deps, workerDeps) => ({
    jobs: jobsHandler(() => deps),
    job: jobHandler(() => deps),
    usage: usageHandler(() => deps),
    worker: workerHandler(() => {
      if (!workerDeps) throw new Error("handlersFor: no worker deps given");
      return workerDeps;
    }),
    dlq: dlqHandler(() => deps),
    sweep: cronSweepHandler(() => deps),
    health: healthHandler(() => deps),
  });

  api.makeDeps = (env) => {
    const deps = createDeps(loadConfig({ ...api.env, ...env }));
    return { deps, workerDeps: createWorkerDeps(deps) };
  };

  api.databaseDown = async () => {
    // A PostgREST that was there and is gone: connection refused, supabase-js status 0.
    const gone = await startPostgrest({
      port: await freePort(),
      databaseUrl: databaseUrl(),
      jwtSecret: JWT_SECRET,
      serviceRoleKey: api.env.SUPABASE_SECRET_KEY ?? "",
    });
    await gone.close();
    return api.makeDeps({ SUPABASE_URL: gone.url });
  };

  api.redisDown = async () => {
    const port = await freePort();
    return api.makeDeps({ UPSTASH_REDIS_REST_URL: `http://127.0.0.1:${port}` });
  };

  api.newUser = async (plan = "free") => {
    const id = await newUser(api.admin, plan);
    const token = await api.auth.mint({ userId: id });
    return { id, token, headers: { authorization: `Bearer ${token}` } };
  };

  api.call = (route, path, init = {}, handlers = api.handlers) =>
    handlers[route](new Request(`${APP_URL}${path}`, init));

  api.enqueue = (user, prompt, headers = {}, handlers) =>
    api.call(
      "jobs",
      "/api/jobs",
      {
        method: "POST",
        headers: { ...user.headers, "content-type": "application/json", ...headers },
        body: JSON.stringify({ prompt }),
      },
      handlers,
    );

  api.cancel = (user, jobId) =>
    api.call("job", `/api/jobs/${jobId}`, { method: "DELETE", headers: user.headers });

  api.enqueueOk = async (user, prompt = `a short report ${randomUUID()}`) => {
    const res = await api.enqueue(user, prompt);
    expect(res.status).toBe(202);
    const body = (await res.json()) as { job: { id: string } };
    return body.job.id;
  };

  api.deliver = async (message, opts = {}) => {
    const signature = await signAsQStash(message.destination, message.body);
    return (opts.handlers ?? api.handlers).worker(
      new Request(message.destination, {
        method: message.headers["upstash-method"] ?? "POST",
        headers: {
          "content-type": message.headers["content-type"] ?? "application/json",
          "user-agent": "Upstash-QStash",
          "upstash-signature": signature,
          "upstash-message-id": message.messageId,
          "upstash-retried": String(opts.retried ?? 0),
        },
        body: message.body,
      }),
    );
  };

  api.failureCallback = async (message, opts = {}) => {
    const url = message.headers["upstash-failure-callback"];
    if (!url) throw new Error("the message has no Upstash-Failure-Callback");
    const retries = Number(message.headers["upstash-retries"] ?? 3);
    const status = opts.status ?? 503;
    // The real payload shape (QStash's documented failure-callback body).
    const payload = {
      status,
      header: { "Content-Type": ["application/json"], "Retry-After": ["10"] },
      body: Buffer.from(JSON.stringify({ error: { code: "unavailable" } })).toString("base64"),
      retried: opts.retried ?? retries,
      maxRetries: retries,
      dlqId: opts.dlqId ?? `${Date.now()}-0`,
      sourceMessageId: message.messageId,
      url: message.destination,
      method: "POST",
      sourceHeader: { "Content-Type": ["application/json"] },
      sourceBody: Buffer.from(message.body).toString("base64"),
      notBefore: Date.now(),
      createdAt: Date.now(),
      callerIP: "127.0.0.1",
    };
    const body = JSON.stringify(payload);
    return (opts.handlers ?? api.handlers).dlq(
      new Request(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "user-agent": "Upstash-QStash",
          "upstash-signature": await signAsQStash(url, body),
          "upstash-message-id": `msg_${randomBytes(20).toString("hex")}`,
          "upstash-retried": "0",
        },
        body,
      }),
    );
  };

  api.jobRow = async (jobId) => {
    const { rows } = await api.admin.query<JobDbRow>(
      "select * from public.generation_jobs where id = $1",
      [jobId],
    );
    const row = rows[0];
    if (!row) throw new Error(`no job ${jobId}`);
    return row;
  };

  api.unitsUsed = async (userId) => {
    const { rows } = await api.admin.query<{ n: number }>(
      "select coalesce(sum(units_used), 0)::int as n from public.quota_usage where user_id = $1",
      [userId],
    );
    return rows[0]?.n ?? 0;
  };

  api.events = async (jobId) => {
    const { rows } = await api.admin.query<{
      event: string;
      from_status: string | null;
      to_status: string;
      detail: unknown;
    }>(
      "select event, from_status, to_status, detail from public.job_events where job_id = $1 order by id",
      [jobId],
    );
    return rows;
  };

  return api;
}

/** An Upstash-Signature as QStash makes it: the QStash stand-in's own signer. */
export async function signAsQStash(
  url: string,
  body: string,
  opts: { key?: string; nowMs?: number } = {},
): Promise<string> {
  return await signDelivery(
    opts.key ?? DEV_SIGNING_KEYS.current,
    url,
    new TextEncoder().encode(body),
    opts.nowMs,
  );
}

/** The worker's outcome in its answer to a delivery (`completed`, `aborted`, `failed` …). */
export async function outcomeOf(res: Response): Promise<string> {
  return ((await res.json()) as { outcome: string }).outcome;
}

/** A new free user's job, its message delivered once: the worker's outcome, the model's requests. */
export async function deliveredFreeJob(app: Api, prompt: string) {
  const user = await app.newUser("free");
  const id = await app.enqueueOk(user, prompt);
  const outcome = await outcomeOf(await app.deliver(app.qstash.latestFor(id)));
  return { outcome, requests: app.model.stats().requests };
}

/** Polls `check` until it returns a value other than `undefined`/`false`, or fails at the deadline. */
export async function eventually<T>(
  check: () => Promise<T | undefined | false> | T | undefined | false,
  { timeoutMs = 10_000, what = "condition" }: { timeoutMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline)
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** The job fields the API promises (docs/DESIGN.md#http-api, plus the owner's own prompt for the job card). */
export const JOB_KEYS = [
  "kind",
  "prompt",
  "input",
  "meter",
  "hold",
  "captured",
  "attempts",
  "cancelRefunds",
  "cancelCharges",
  "model",
  "reasons",
  "createdAt",
  "failureReason",
  "finishedAt",
  "id",
  "output",
  "partialOutput",
  "partialTokens",
  "thinking",
  "reasoningTokens",
  "phase",
  "providerQuotaHits",
  "quotaRefunded",
  "refundWithheld",
  "resumeAt",
  "startedAt",
  "status",
].sort();

/** The usage fields every report has; `GET /api/usage` adds `runningCancelRefunds`. */
export const USAGE_KEYS = [
  "active",
  "kinds",
  "meter",
  "limit",
  "maxActive",
  "periodStart",
  "plan",
  "resetsAt",
  "used",
].sort();
