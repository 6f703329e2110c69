/**
 * A schedule runner for reliability tests: the app's own lib/ functions (enqueueJob, runJob,
 * handleDeliveryFailure, sweepStaleJobs, jobs.cancel) against the REAL database (rpc straight
 * to Postgres through pg-rpc.ts: the HTTP layer is not what is under test here), the real
 * Upstash Redis stand-in in front of a real redis-server, the fake OpenAI model through the
 * real `openai` SDK, and a queue that behaves like QStash (at-least-once, deduplication ids,
 * notBefore, retries, then the failure callback) but lets a schedule pick which message is
 * delivered next, deliver it twice or early, or give up on it while its worker still runs.
 *
 * Every port goes through `Faults`, so each invocation can carry a fault at any boundary call;
 * every transition gets the schedule's clock as `p_now`, and `deps.now()` reads the same clock.
 *
 * A command marked `edge` goes through the HTTP edge instead: the `api/` handler in-process over
 * the same faulted ports, with a real `Request` (a Bearer token the app verifies, a body signed
 * exactly as QStash signs it, the real failure-callback payload), and the sim's bookkeeping
 * reads the HTTP status, as QStash would. A 500 from any route, or a status the route does not
 * document for that command, is recorded and fails the run's check.
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import { createHandler as sweepHandler } from "../../api/cron/sweep.ts";
import { createHandler as dlqHandler } from "../../api/dlq.ts";
import { createHandler as jobHandler } from "../../api/jobs/[id].ts";
import { createHandler as jobsHandler } from "../../api/jobs/index.ts";
import { createHandler as workerHandler } from "../../api/worker.ts";
import { mintUserToken } from "../../dev/token.ts";
import { createAlerter } from "../../lib/alerts.ts";
import { createAuth } from "../../lib/auth.ts";
import { type Config, loadConfig, supabaseKeys } from "../../lib/config.ts";
import type { Rpc } from "../../lib/db.ts";
import type { Deps } from "../../lib/deps.ts";
import { enqueueJob } from "../../lib/enqueue.ts";
import { handleDeliveryFailure } from "../../lib/failure-callback.ts";
import { createJobs } from "../../lib/jobs.ts";
import { createModel, type GenerateOptions, ModelOutputError } from "../../lib/model.ts";
import { createProviderGate } from "../../lib/provider-gate.ts";
import type { PublishInput } from "../../lib/queue.ts";
import { createRateLimiter } from "../../lib/rate-limit.ts";
import { createRedis } from "../../lib/redis.ts";
import { sweepStaleJobs } from "../../lib/sweeper.ts";
import { documentRequest, parseJobRequest } from "../../lib/validate.ts";
import { runJob, type WorkerDeps, type WorkerResult } from "../../lib/worker/index.ts";
import { signAsQStash } from "./api.ts";
import { type Fault, Faults, type Outcome } from "./faults.ts";
import { pgRpc, withClock } from "./pg-rpc.ts";

/** The schema of a simulated extraction: strict, small, one field the fake fills from the text. */
export const SIM_SCHEMA = {
  type: "object",
  properties: { title: { type: "string" } },
  required: ["title"],
  additionalProperties: false,
};

export type ModelOutcome =
  | "ok"
  | "rate_limit"
  | "insufficient_quota"
  | "server_error"
  | "timeout"
  | "bad_request"
  | "refusal"
  | "unreachable"
  /** An extraction's answer that breaks its schema (the fake's `[fake:json_invalid]`). */
  | "json_invalid"
  /**
   * The model streams some text, then holds its answer until the worker's first progress write
   * (`rpc:record_progress`) has been made and has settled: the worker is mid-stream at that
   * write, so a fault there is a fault mid-stream. See {@link holdFirstProgress}.
   */
  | "stream";

/** The text a "stream" model has streamed when the worker's first progress write goes out. */
export const MID_STREAM_TEXT = "a partial answer, streamed before the first progress write";
/** Longest a "stream" model waits for the progress write (a lib/ that stopped writing fails the trace). */
const MID_STREAM_BOUND_MS = 5000;

/** Shared by a "stream" model and the progress write of the same invocation (its scope's data). */
interface MidStream {
  /** The first record_progress has been made (its arguments carry the text streamed so far). */
  progressCalled: Latch;
  /** The model's answer is in hand. */
  answered: Latch;
  /** The first record_progress has settled (returned or thrown) for the worker. */
  progressSettled: Latch;
}

interface Latch {
  done: boolean;
  promise: Promise<void>;
  open(): void;
}

function latch(): Latch {
  let open!: () => void;
  const l: Latch = {
    done: false,
    promise: new Promise<void>((resolve) => {
      open = resolve;
    }),
    open: () => {
      l.done = true;
      open();
    },
  };
  return l;
}

/** `p`, or undefined after `ms` (the timer cleared either way, so nothing outlives a run). */
async function within<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The database port, outside the fault layer: in an invocation whose model outcome is "stream",
 * the first `record_progress` is held in flight (after it reached the database, or failed, or
 * was lost: whatever the fault layer made of it) until the model has its answer. Why: the
 * worker writes progress on a real `setInterval` and skips a tick while a write is in flight,
 * so holding the first write until the answer is in means no second write can start, however
 * slow the fake model or the machine; and the answer is handed back only after that write has
 * settled, in the same run of microtasks that settles it, so the worker's `clearInterval` comes
 * before any timer can fire. Exactly one progress write per such delivery, always: the trace
 * stays exact. (A killed write never settles; the model stops on the scope's `killed`.)
 */
function holdFirstProgress(faults: Faults, inner: Rpc): Rpc {
  return async (fn, args) => {
    const s = faults.scope().data.midStream as MidStream | undefined;
    if (fn !== "record_progress" || !s || s.progressCalled.done) return inner(fn, args);
    s.progressCalled.open();
    try {
      return await inner(fn, args);
    } finally {
      await within(s.answered.promise, MID_STREAM_BOUND_MS);
      s.progressSettled.open();
    }
  };
}

/** `edge: true`: the command goes through its HTTP route instead of calling lib/ directly. */
type Edge = { edge?: boolean | undefined };
export type Cmd =
  | ({
      t: "enqueue";
      user: number;
      key: number | null;
      /** An extraction (of the prompt, by {@link SIM_SCHEMA}) instead of a document. */
      kind?: "extract" | undefined;
      fault?: Fault | undefined;
    } & Edge)
  | ({
      t: "deliver";
      msg: number;
      model: ModelOutcome;
      /** QStash delivers it again later (at-least-once): the message stays. */
      duplicate: boolean;
      /** Delivered before its notBefore (a QStash clock ahead of the database's). */
      early: boolean;
      fault?: Fault | undefined;
    } & Edge)
  /** QStash gives up on a delivery (maybe while its worker still runs): the failure callback. */
  | ({ t: "callback"; msg: number; fault?: Fault | undefined } & Edge)
  | ({ t: "cancel"; user: number; job: number; fault?: Fault | undefined } & Edge)
  | ({ t: "sweep"; fault?: Fault | undefined } & Edge)
  | { t: "clock"; seconds: number };

/** Commands of one round run at the same time. */
export type Round = Cmd[];
export interface Schedule {
  /**
   * `tight`: a plan of the schedules' own (3 units a day, 2 active, no refunded running
   * cancel), so that a running cancel whose refund is withheld happens often enough to check.
   */
  users: Array<"free" | "pro" | "tight" | "team">;
  rounds: Round[];
}

interface Message {
  id: string;
  kind: "deliver" | "callback";
  jobId: string;
  /** The job's publish_seq the message was published with (its body's `seq`). */
  seq: number;
  notBefore: number | null;
  retried: number;
  lastStatus: number | null;
}

/** QStash as the app sees it: publish with dedup ids, and messages a schedule delivers. */
export class SimQueue {
  pending: Message[] = [];
  published = 0;
  private readonly dedup = new Map<string, string>();
  private n = 0;

  constructor(private readonly clock: () => Date) {}

  async publishJob(input: PublishInput): Promise<{ messageId: string; deduplicated: boolean }> {
    const earlier = this.dedup.get(input.dedupId);
    if (earlier) return { messageId: earlier, deduplicated: true };
    const id = `msg_${++this.n}`;
    this.dedup.set(input.dedupId, id);
    this.published++;
    this.pending.push({
      id,
      kind: "deliver",
      jobId: input.jobId,
      seq: input.seq,
      notBefore: input.notBefore ? input.notBefore.getTime() : null,
      retried: 0,
      lastStatus: null,
    });
    return { messageId: id, deduplicated: false };
  }

  isDue(m: Message): boolean {
    return m.notBefore === null || m.notBefore <= this.clock().getTime();
  }

  remove(m: Message): void {
    this.pending = this.pending.filter((x) => x !== m);
  }
}

export interface SimParts {
  /** Service-role pool on the test database. */
  service: pg.Pool;
  admin: pg.Pool;
  /** The harness's environment (useApi's `env`): Redis stand-in, fake model, webhook URL. */
  env: Record<string, string>;
  /** A closed port's URL, for a model that cannot be reached at all. */
  deadModelUrl: string;
  /**
   * Where the schedule's clock starts (default: now). Runs sharing a database should each start
   * after the last one ended, so one run's sweeps never see another's jobs as younger.
   */
  startAt?: Date;
  /**
   * The model client's timeout for every outcome but "timeout" (which always uses 100 ms, so it
   * costs little). @default 10000: a starved machine's slow fake model must not be read as a
   * timeout (that would change the path the run takes).
   */
  modelTimeoutMs?: number;
}

export interface SimStats {
  invocations: number;
  /** Invocations that went through the HTTP edge (an `api/` handler). */
  viaEdge: number;
  killed: number;
  threw: number;
  faultsFired: number;
  modelCalls: number;
  byCommand: Record<string, number>;
}

/** Stats before any invocation (a Sim's own, and the totals a schedule run adds up). */
export function emptySimStats(): SimStats {
  return {
    invocations: 0,
    viaEdge: 0,
    killed: 0,
    threw: 0,
    faultsFired: 0,
    modelCalls: 0,
    byCommand: {},
  };
}

const SETTINGS_ENV = {
  QSTASH_RETRIES: "1",
  PROVIDER_QUOTA_MAX_HITS: "3",
  JOB_MAX_AGE_SECONDS: "10800",
  WORKER_MAX_DURATION_SECONDS: "60",
  JOB_LEASE_SECONDS: "90",
  PROVIDER_BACKOFF_SECONDS: "60",
  SWEEP_BATCH_SIZE: "4",
  SWEEP_UNDELIVERED_AFTER_SECONDS: "900",
  SWEEP_LEASE_GRACE_SECONDS: "300",
  RATE_LIMIT_REQUESTS: "1000",
};

/** One schedule on a fresh set of users. Build with {@link createSim}. */
export class Sim {
  clock: Date;
  readonly queue: SimQueue;
  readonly faults = new Faults();
  readonly config: Config;
  readonly deps: Deps;
  /** Replaceable, so a flow can run the worker with other settings (test/support/flows.ts). */
  workerDeps: WorkerDeps;
  /** The routes over the same faulted ports, for commands marked `edge`. */
  readonly routes: {
    jobs: (req: Request) => Promise<Response>;
    job: (req: Request) => Promise<Response>;
    worker: (req: Request) => Promise<Response>;
    dlq: (req: Request) => Promise<Response>;
    sweep: (req: Request) => Promise<Response>;
  };
  readonly users: string[] = [];
  readonly jobs: string[][] = [];
  /** Model calls that reached the fake model, by prompt. */
  readonly modelCalls = new Map<string, number>();
  readonly stats: SimStats = emptySimStats();
  /** The boundary calls of the last invocation, in order. */
  lastTrace: string[] = [];
  /** How the last invocation ended. */
  lastOutcome: Outcome<unknown> | undefined;
  /** What happened, one line per invocation (printed with a counterexample). */
  readonly journal: string[] = [];
  /** Answers of the HTTP edge that no client mistake or dependency failure explains. */
  readonly edgeProblems: string[] = [];
  private readonly tokens = new Map<string, string>();
  private readonly runId = randomUUID().slice(0, 8);

  constructor(private readonly parts: SimParts) {
    this.clock = new Date(
      Math.max(Math.ceil(Date.now() / 1000) * 1000, parts.startAt?.getTime() ?? 0),
    );
    const now = () => this.clock;
    this.queue = new SimQueue(now);
    this.config = loadConfig({ ...parts.env, ...SETTINGS_ENV });
    const f = this.faults;
    const rpc = holdFirstProgress(f, f.rpc(withClock(pgRpc(parts.service), now)));
    const redis = f.redis(
      createRedis({
        url: this.config.upstashRedisRestUrl,
        token: this.config.upstashRedisRestToken,
      }),
    );
    this.deps = {
      config: this.config,
      jobs: createJobs(rpc),
      rpc,
      queue: f.queue(this.queue),
      auth: createAuth({
        jwtSecret: this.config.supabaseJwtSecret,
        supabaseUrl: this.config.supabaseUrl,
      }),
      rateLimiter: createRateLimiter(redis, {
        requests: this.config.rateLimitRequests,
        windowSeconds: this.config.rateLimitWindowSeconds,
        idKey: supabaseKeys(this.config).server,
      }),
      exportLimiter: createRateLimiter(redis, {
        requests: this.config.exportRateLimitPerHour,
        windowSeconds: 3600,
        prefix: "quota-jobs:ratelimit:export",
        idKey: supabaseKeys(this.config).server,
      }),
      gate: createProviderGate(redis),
      alerts: createAlerter({
        redis,
        webhookUrl: this.config.alertWebhookUrl,
        throttleSeconds: this.config.alertThrottleSeconds,
        fetch: f.fetch("webhook"),
      }),
      redis,
      now,
    };
    // Only the "timeout" outcome may time out: a 100 ms limit on every call let a starved
    // machine turn an answer or a refusal into a timeout, and the flow took another path.
    const real = createModel({
      apiKey: this.config.openaiApiKey,
      baseURL: this.config.openaiBaseUrl,
      model: this.config.openaiModel,
      timeoutMs: parts.modelTimeoutMs ?? 10_000,
    });
    const hasty = createModel({
      apiKey: this.config.openaiApiKey,
      baseURL: this.config.openaiBaseUrl,
      model: this.config.openaiModel,
      timeoutMs: 100,
    });
    const dead = createModel({
      apiKey: this.config.openaiApiKey,
      baseURL: parts.deadModelUrl,
      model: this.config.openaiModel,
      timeoutMs: parts.modelTimeoutMs ?? 100,
    });
    const scripted = {
      generate: async (prompt: string, o: GenerateOptions) => {
        this.modelCalls.set(prompt, (this.modelCalls.get(prompt) ?? 0) + 1);
        this.stats.modelCalls++;
        const outcome = (f.scope().data.model as ModelOutcome | undefined) ?? "ok";
        switch (outcome) {
          case "ok":
            return real.generate(prompt, o);
          case "rate_limit":
            return real.generate(`${prompt} [fake:rate_limit_exceeded:20]`, o);
          case "insufficient_quota":
            return real.generate(`${prompt} [fake:insufficient_quota]`, o);
          case "server_error":
            return real.generate(`${prompt} [fake:server_error]`, o);
          case "timeout":
            return hasty.generate(`${prompt} [fake:slow:3000]`, o);
          case "bad_request":
            return real.generate(`${prompt} [fake:bad_request]`, o);
          case "refusal":
            // A 200 whose message is a refusal: what createModel throws for it.
            await real.generate(prompt, o);
            throw new ModelOutputError("the model refused the request");
          case "unreachable":
            return dead.generate(prompt, o);
          case "json_invalid":
            return real.generate(`${prompt} [fake:json_invalid]`, o);
          case "stream": {
            const scope = f.scope();
            const s = scope.data.midStream as MidStream;
            o.onText?.(MID_STREAM_TEXT);
            await within(s.progressCalled.promise, MID_STREAM_BOUND_MS);
            const result = await real.generate(prompt, o);
            s.answered.open();
            const killed = await within(
              Promise.race([
                s.progressSettled.promise.then(() => false),
                (scope.killed ?? new Promise<never>(() => {})).then(() => true),
              ]),
              MID_STREAM_BOUND_MS,
            );
            // A dead function's stream goes nowhere: end it, so the worker's timer is cleared.
            if (killed) throw new Error("the function died mid-stream");
            return result;
          }
        }
      },
    };
    this.workerDeps = {
      ...this.deps,
      model: f.model(scripted),
    };
    this.routes = {
      jobs: jobsHandler(() => this.deps),
      job: jobHandler(() => this.deps),
      worker: workerHandler(() => this.workerDeps),
      dlq: dlqHandler(() => this.deps),
      sweep: sweepHandler(() => this.deps),
    };
  }

  private url(path: string): string {
    return `${this.config.appUrl}${path}`;
  }

  private async token(userId: string): Promise<string> {
    let token = this.tokens.get(userId);
    if (!token) {
      const secret = this.config.supabaseJwtSecret;
      if (!secret) throw new Error("the simulator's edge needs SUPABASE_JWT_SECRET");
      token = await mintUserToken({
        secret,
        userId,
        issuer: `${this.config.supabaseUrl}/auth/v1`,
      });
      this.tokens.set(userId, token);
    }
    return token;
  }

  /** The status a route answered, checked against what it may answer for this command. */
  private async edge(what: string, allowed: number[], res: Response): Promise<Response> {
    this.stats.viaEdge++;
    if (!allowed.includes(res.status)) {
      this.edgeProblems.push(`${what} answered ${res.status}: ${await res.clone().text()}`);
    }
    return res;
  }

  async addUsers(plans: Array<"free" | "pro" | "tight" | "team">): Promise<void> {
    for (const plan of plans) {
      const id = randomUUID();
      if (plan === "tight")
        await this.parts.admin.query(
          `insert into public.plans (id, name, period, units_per_period, max_active_jobs, max_paid_refunds)
           values ('tight', 'Tight', 'day', 3, 2, 0) on conflict (id) do nothing`,
        );
      // Every user has an account: enqueue refuses a user Supabase Auth does not know.
      await this.parts.admin.query("insert into auth.users (id) values ($1)", [id]);
      if (plan !== "free") {
        await this.parts.admin.query(
          "insert into public.user_plans (user_id, plan_id) values ($1, $2)",
          [id, plan],
        );
      }
      this.users.push(id);
      this.jobs.push([]);
    }
  }

  /** Runs a schedule round by round, then lets the system settle. */
  async run(schedule: Schedule): Promise<void> {
    await this.addUsers(schedule.users);
    for (const round of schedule.rounds) await this.round(round);
    await this.settle();
  }

  async round(round: Round): Promise<void> {
    for (const c of round) if (c.t === "clock") this.tick(c.seconds);
    const running = round.filter((c) => c.t !== "clock").map((c) => this.command(c));
    await Promise.all(running);
  }

  tick(seconds: number): void {
    this.clock = new Date(this.clock.getTime() + seconds * 1000);
    this.journal.push(`clock +${seconds}s`);
  }

  private async invoke<T>(
    what: string,
    fn: () => Promise<T>,
    fault: Fault | undefined,
    data: Record<string, unknown> = {},
  ): Promise<Outcome<T>> {
    this.stats.invocations++;
    const kind = what.split(" ")[0] ?? what;
    this.stats.byCommand[kind] = (this.stats.byCommand[kind] ?? 0) + 1;
    const r = await this.faults.run(fn, fault ? [fault] : [], data);
    this.lastTrace = r.scope.trace;
    this.lastOutcome = r;
    this.stats.faultsFired += r.scope.fired.length;
    if (r.kind === "killed") this.stats.killed++;
    if (r.kind === "threw") this.stats.threw++;
    const how =
      r.kind === "returned"
        ? JSON.stringify(r.value).slice(0, 120)
        : r.kind === "killed"
          ? `KILLED at ${r.at}`
          : `THREW ${(r.error as Error)?.name}: ${(r.error as Error)?.message?.slice(0, 80)}`;
    this.journal.push(
      `${what}${r.scope.fired.length ? ` [${r.scope.fired.join(", ")}]` : ""} -> ${how}`,
    );
    return r;
  }

  private prompt(user: number, key: number | null): string {
    return key === null ? `p ${this.runId} ${randomUUID()}` : `p ${this.runId} u${user} k${key}`;
  }

  async command(c: Cmd): Promise<void> {
    switch (c.t) {
      case "clock":
        this.tick(c.seconds);
        return;
      case "enqueue": {
        const u = c.user % this.users.length;
        const userId = this.users[u] as string;
        const prompt = this.prompt(u, c.key);
        const key = c.key === null ? null : `key-${c.key}`;
        if (c.edge) {
          const token = await this.token(userId);
          const r = await this.invoke(
            `POST /api/jobs u${u} key=${c.key}`,
            async () => {
              const res = await this.routes.jobs(
                new Request(this.url("/api/jobs"), {
                  method: "POST",
                  headers: {
                    authorization: `Bearer ${token}`,
                    "content-type": "application/json",
                    ...(key === null ? {} : { "idempotency-key": key }),
                  },
                  body: JSON.stringify({ prompt }),
                }),
              );
              await this.edge("POST /api/jobs", [200, 202, 409, 422, 429, 503], res);
              return { status: res.status, body: (await res.json()) as { job?: { id: string } } };
            },
            c.fault,
          );
          const id = r.kind === "returned" ? r.value.body.job?.id : undefined;
          const jobs = this.jobs[u] as string[];
          if (id && !jobs.includes(id)) jobs.push(id);
          return;
        }
        const r = await this.invoke(
          `enqueue u${u} key=${c.key}`,
          async () =>
            enqueueJob(this.deps, {
              userId,
              ...(c.kind === "extract"
                ? await parseJobRequest({
                    kind: "extract",
                    input: { text: prompt, schema: SIM_SCHEMA },
                  })
                : documentRequest(prompt)),
              idempotencyKey: key,
            }),
          c.fault,
        );
        if (r.kind === "returned" && "job" in r.value) {
          const jobs = this.jobs[u] as string[];
          if (!jobs.includes(r.value.job.id)) jobs.push(r.value.job.id);
        }
        if (r.kind === "returned" && r.value.outcome === "unavailable") {
          const jobs = this.jobs[u] as string[];
          if (!jobs.includes(r.value.jobId)) jobs.push(r.value.jobId);
        }
        return;
      }
      case "cancel": {
        const u = c.user % this.users.length;
        const jobs = this.jobs[u] as string[];
        if (jobs.length === 0) return;
        const jobId = jobs[c.job % jobs.length] as string;
        const userId = this.users[u] as string;
        if (c.edge) {
          const token = await this.token(userId);
          await this.invoke(
            `DELETE /api/jobs/${jobId.slice(0, 8)} u${u}`,
            async () => {
              const res = await this.routes.job(
                new Request(this.url(`/api/jobs/${jobId}`), {
                  method: "DELETE",
                  headers: { authorization: `Bearer ${token}` },
                }),
              );
              await this.edge("DELETE /api/jobs/:id", [200, 409, 503], res);
              return res.status;
            },
            c.fault,
          );
          return;
        }
        await this.invoke(
          `cancel u${u} ${jobId.slice(0, 8)}`,
          () => this.deps.jobs.cancel(jobId, userId),
          c.fault,
        );
        return;
      }
      case "sweep":
        if (c.edge) {
          await this.invoke(
            "GET /api/cron/sweep",
            async () => {
              const res = await this.routes.sweep(
                new Request(this.url("/api/cron/sweep"), {
                  headers: { authorization: `Bearer ${this.config.cronSecret}` },
                }),
              );
              await this.edge("GET /api/cron/sweep", [200, 503], res);
              return res.status;
            },
            c.fault,
          );
          return;
        }
        await this.invoke("sweep", () => sweepStaleJobs(this.deps), c.fault);
        return;
      case "callback": {
        const m = this.pick(c.msg, true, (x) => x.kind === "deliver");
        if (!m) return;
        await this.invoke(
          `callback ${m.id} ${m.jobId.slice(0, 8)}${c.edge ? " via POST /api/dlq" : ""}`,
          (): Promise<unknown> =>
            c.edge ? this.postCallback(m) : handleDeliveryFailure(this.deps, callbackFor(m)),
          c.fault,
        );
        return;
      }
      case "deliver": {
        const m = this.pick(c.msg, c.early);
        if (!m) return;
        await this.deliver(m, c.model, c.duplicate, c.fault, c.edge === true);
        return;
      }
    }
  }

  private pick(i: number, early: boolean, also: (m: Message) => boolean = () => true) {
    const candidates = this.queue.pending.filter((m) => also(m) && (early || this.queue.isDue(m)));
    return candidates.length === 0 ? undefined : candidates[i % candidates.length];
  }

  /** One delivery of a message, with QStash's bookkeeping: 2xx consumes it, else a retry. */
  async deliver(
    m: Message,
    model: ModelOutcome,
    duplicate: boolean,
    fault: Fault | undefined,
    edge = false,
  ): Promise<void> {
    if (m.kind === "callback") {
      const r = await this.invoke(
        `dlq ${m.id} ${m.jobId.slice(0, 8)}${edge ? " via POST /api/dlq" : ""}`,
        (): Promise<unknown> =>
          edge ? this.postCallback(m) : handleDeliveryFailure(this.deps, callbackFor(m)),
        fault,
      );
      if (duplicate) return;
      const ok = r.kind === "returned" && (!edge || r.value === 200);
      if (ok) this.queue.remove(m);
      else if (++m.retried > 3) this.queue.remove(m); // the callback's own retries ran out
      return;
    }
    const r = await this.invoke(
      `deliver ${m.id} ${m.jobId.slice(0, 8)} model=${model}${duplicate ? " dup" : ""}${edge ? " via POST /api/worker" : ""}`,
      () =>
        edge
          ? this.postDelivery(m)
          : runJob(this.workerDeps, m.jobId, { deliveryId: `${m.id}-${m.retried}` }),
      fault,
      model === "stream"
        ? {
            model,
            midStream: { progressCalled: latch(), answered: latch(), progressSettled: latch() },
          }
        : { model },
    );
    if (duplicate) return;
    const status =
      r.kind === "returned" ? (r.value.retry ? 503 : 200) : r.kind === "threw" ? 503 : null;
    if (status === 200) {
      this.queue.remove(m);
      return;
    }
    m.lastStatus = status;
    if (++m.retried > this.config.qstashRetries) {
      this.queue.remove(m);
      this.queue.pending.push({ ...m, kind: "callback", id: `${m.id}-dlq` });
    }
  }

  /** POST /api/worker as QStash delivers: the published body, signed for the exact URL. */
  private async postDelivery(m: Message): Promise<WorkerResult> {
    const url = this.url("/api/worker");
    const body = JSON.stringify({ jobId: m.jobId, seq: m.seq });
    const res = await this.routes.worker(
      new Request(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "upstash-signature": await signAsQStash(url, body),
          "upstash-message-id": m.id,
          "upstash-retried": String(m.retried),
        },
        body,
      }),
    );
    await this.edge("POST /api/worker", [200, 503], res);
    const answer = (await res.json()) as { outcome?: unknown; error?: { code?: unknown } };
    // QStash's reading of the answer: anything but a 2xx is delivered again.
    return { retry: res.status !== 200, outcome: String(answer.outcome ?? answer.error?.code) };
  }

  /** POST /api/dlq with QStash's failure-callback payload, signed for the callback URL. */
  private async postCallback(m: Message): Promise<number> {
    const url = this.url("/api/dlq");
    const cb = callbackFor(m);
    const body = JSON.stringify({
      status: cb.status ?? 503,
      header: { "Content-Type": ["application/json"] },
      body: Buffer.from('{"outcome":"released"}').toString("base64"),
      retried: cb.retried,
      maxRetries: cb.maxRetries,
      dlqId: cb.dlqId,
      sourceMessageId: cb.sourceMessageId,
      url: this.url("/api/worker"),
      method: "POST",
      sourceHeader: { "Content-Type": ["application/json"] },
      sourceBody: Buffer.from(JSON.stringify({ jobId: m.jobId, seq: m.seq })).toString("base64"),
    });
    const res = await this.routes.dlq(
      new Request(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "upstash-signature": await signAsQStash(url, body),
          "upstash-message-id": `${m.id}-cb`,
          "upstash-retried": "0",
        },
        body,
      }),
    );
    await this.edge("POST /api/dlq", [200, 503], res);
    return res.status;
  }

  /**
   * Lets the system settle: deliver whatever is left (the model now answers), then move the
   * clock past the max age and sweep until nothing is left, then deliver what the sweep
   * published. Faults are off from here on.
   */
  async settle(): Promise<void> {
    this.journal.push("-- settle --");
    for (let i = 0; i < 100 && this.queue.pending.length > 0; i++) {
      const due = this.queue.pending.filter((m) => this.queue.isDue(m));
      if (due.length === 0) {
        const next = Math.min(...this.queue.pending.map((m) => m.notBefore ?? 0));
        this.clock = new Date(Math.max(next, this.clock.getTime()));
        continue;
      }
      for (const m of due) await this.deliver(m, "ok", false, undefined);
    }
    for (let pass = 0; pass < 3; pass++) {
      this.tick(this.config.jobMaxAgeSeconds + this.config.sweepLeaseGraceSeconds + 3600);
      for (let i = 0; i < 50; i++) {
        const r = await this.invoke("sweep (settle)", () => sweepStaleJobs(this.deps), undefined);
        if (r.kind !== "returned" || !r.value.more) break;
      }
      for (const m of [...this.queue.pending]) await this.deliver(m, "ok", false, undefined);
    }
  }

  /** The invariants (docs/DESIGN.md#invariants), checked on the database for this schedule's users. */
  async check(): Promise<void> {
    // Only this run's prompts: a failed run may leave jobs another run's sweep republishes.
    const mine = new Map([...this.modelCalls].filter(([p]) => p.startsWith(`p ${this.runId} `)));
    if (this.edgeProblems.length > 0) throw new InvariantError(this.edgeProblems.join("\n"));
    await checkInvariants(this.parts.admin, this.users, mine);
  }
}

function callbackFor(m: Message) {
  return {
    jobId: m.jobId,
    seq: m.seq,
    status: m.lastStatus,
    retried: m.retried,
    maxRetries: 1,
    dlqId: `dlq-${m.id}`,
    sourceMessageId: m.id,
  };
}

/** How often the checked schedules met each kind of running cancel (evidence, not a check). */
/**
 * The simulator's own statement of the bound of refunds after provider spend (running cancels,
 * failures and queued cancels after a consumed attempt) a plan gives per period; null: none (a
 * token plan). Written here independently of the SQL, as the spec: test/db/refund-bound.test.ts
 * holds the one SQL rule, private.refund_bound, to it.
 */
export function refundBoundOf(plan: {
  meter: string;
  units_per_period: number;
  max_paid_refunds: number | null;
}): number | null {
  if (plan.meter !== "jobs") return null;
  return plan.max_paid_refunds ?? plan.units_per_period;
}

export const runningCancelTally = { refunded: 0, withheld: 0 };

export class InvariantError extends Error {
  override readonly name = "InvariantError";
}

/**
 * 1 no drift; 5 every job terminal; 2 each failed or canceled job refunded exactly once (one
 * refund-bearing event, refunded_at set) or, only for a job plan's ending after provider spend
 * (a running cancel; a failure or queued cancel after a consumed attempt; a running attempt
 * someone else ended) when the user's refunds after spend of its period had reached the plan's
 * bound (replayed from the events in order), not at all (refund_withheld set, the event says
 * `refunded: false`), the period's counter of refunds after spend equal to those events, a
 * token plan's ending capturing at least what its released attempts consumed (up to the hold)
 * and the operator's fault nothing, and no succeeded job refunded; 4 limits never
 * exceeded at any moment, replayed from job_events in commit-consistent id order; 7 no more
 * model calls than claims (started + reclaimed events) for any prompt.
 */
export async function checkInvariants(
  admin: pg.Pool,
  users: string[],
  modelCalls: Map<string, number> = new Map(),
): Promise<void> {
  const problems: string[] = [];
  // public.quota_drift's definition, restricted to these users before aggregating (the view
  // aggregates every job in the database, which grows with every run; the whole view is
  // checked after each test by useApi).
  const drift = await admin.query(
    `with reserved as (
       select user_id, period_start, meter, sum(coalesce(captured, hold)) as units_expected
       from public.generation_jobs where user_id = any($1) group by user_id, period_start, meter
     ), used as (select * from public.quota_usage where user_id = any($1))
     select coalesce(u.user_id, r.user_id) as user_id, coalesce(u.meter, r.meter) as meter,
       coalesce(u.units_used, 0) as units_used, coalesce(r.units_expected, 0) as units_expected
     from used u full join reserved r
       on r.user_id = u.user_id and r.period_start = u.period_start and r.meter = u.meter
     where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0)`,
    [users],
  );
  if (drift.rows.length > 0) problems.push(`drift: ${JSON.stringify(drift.rows)}`);

  const jobs = await admin.query<{
    id: string;
    status: string;
    prompt: string;
    refunded_at: Date | null;
    refund_withheld: string | null;
    output: string | null;
    refunds: number;
    claims: number;
    terminal_events: number;
    hold: number;
    captured: number | null;
    captures: number;
  }>(
    `select j.id, j.status, j.prompt, j.refunded_at, j.refund_withheld, j.output, j.hold, j.captured,
       (select count(*)::int from public.job_events e where e.job_id = j.id and e.detail ? 'captured') as captures,
       (select count(*)::int from public.job_events e where e.job_id = j.id and e.to_status in ('failed', 'canceled') and e.from_status is distinct from e.to_status) as refunds,
       (select count(*)::int from public.job_events e where e.job_id = j.id and e.event in ('started', 'reclaimed')) as claims,
       (select count(*)::int from public.job_events e where e.job_id = j.id and e.to_status in ('succeeded', 'failed', 'canceled') and e.from_status is distinct from e.to_status) as terminal_events
     from public.generation_jobs j where j.user_id = any($1)`,
    [users],
  );
  const claimsByPrompt = new Map<string, number>();
  for (const j of jobs.rows) {
    claimsByPrompt.set(j.prompt, (claimsByPrompt.get(j.prompt) ?? 0) + j.claims);
    if (!["succeeded", "failed", "canceled"].includes(j.status))
      problems.push(`job ${j.id} is still ${j.status}`);
    const refundable = j.status === "failed" || j.status === "canceled";
    // Exactly one of the two on a failed/canceled job (the events below prove a withheld one
    // ended after spend, past the bound); running_cancel_limit only on a canceled one.
    const withheld =
      j.refund_withheld === "paid_refund_limit" ||
      (j.status === "canceled" && j.refund_withheld === "running_cancel_limit");
    if (refundable && (j.refunds !== 1 || (j.refunded_at === null) !== withheld))
      problems.push(
        `job ${j.id} ${j.status} with ${j.refunds} ending events, withheld ${withheld}`,
      );
    if (!refundable && j.refund_withheld !== null)
      problems.push(`job ${j.id} ${j.status} with a withheld refund`);
    if (j.status === "succeeded" && (j.refunds !== 0 || j.refunded_at !== null))
      problems.push(`job ${j.id} succeeded and refunded`);
    // docs/DESIGN.md#invariant-2-exactly-once-refund: every hold captured or released exactly
    // once (one ending event says so), never more captured than held.
    const final = ["succeeded", "failed", "canceled"].includes(j.status);
    if (final && (j.captures !== 1 || j.captured === null || j.captured < 0 || j.captured > j.hold))
      problems.push(
        `job ${j.id} ${j.status}: captured ${j.captured} of ${j.hold} in ${j.captures} events`,
      );
    if (!final && (j.captured !== null || j.captures !== 0))
      problems.push(`job ${j.id} ${j.status}: captured ${j.captured} while active`);
    if (j.status === "succeeded" && !j.output)
      problems.push(`job ${j.id} succeeded without output`);
    if (j.terminal_events !== 1 && j.status !== "queued" && j.status !== "running")
      problems.push(`job ${j.id} has ${j.terminal_events} terminal events`);
  }
  for (const [prompt, calls] of modelCalls) {
    const claims = claimsByPrompt.get(prompt.replace(/ \[fake:[^\]]*\]$/, "")) ?? 0;
    if (calls > claims) problems.push(`${calls} model calls for ${claims} claims (${prompt})`);
  }

  const events = await admin.query<{
    id: string;
    job_id: string;
    user_id: string;
    event: string;
    to_status: string;
    period_start: Date;
    units: number;
    max_active: number;
    from_status: string | null;
    refunded: boolean | null;
    max_paid_refunds: number | null;
    plan_meter: string;
    meter: string;
    hold: number | null;
    released: number | null;
    captured: number | null;
    counted: boolean | null;
    usage_tokens: number | null;
    job_hold: number;
    failure_reason: string | null;
  }>(
    `select e.id, e.job_id, e.user_id, e.event, e.to_status, j.period_start, j.meter,
       (e.detail ->> 'hold')::int as hold, (e.detail ->> 'released')::int as released,
       (e.detail ->> 'captured')::int as captured, (e.detail ->> 'counted')::boolean as counted,
       case when e.detail ? 'usage' then coalesce((e.detail -> 'usage' ->> 'prompt_tokens')::int, 0)
         + coalesce((e.detail -> 'usage' ->> 'completion_tokens')::int, 0) end as usage_tokens,
       j.hold as job_hold, j.failure_reason,
       p.units_per_period as units, p.max_active_jobs as max_active, e.from_status,
       (e.detail ->> 'refunded')::boolean as refunded,
       p.max_paid_refunds, p.meter as plan_meter
     from public.job_events e
     join public.generation_jobs j on j.id = e.job_id
     join public.plans p on p.id = j.plan_id
     where e.user_id = any($1) order by e.id`,
    [users],
  );
  const active = new Map<string, number>();
  const reserved = new Map<string, number>();
  const ended = new Set<string>();
  // Each period's refunds after spend so far: its paid_refunds counter, as the events say.
  const paidRefunds = new Map<string, number>();
  // What each job's attempts that did not end it consumed, as far as the events say: a released
  // attempt's usage; a reclaim (the dead attempt's prompt, counted at enqueue, at least).
  const consumed = new Map<string, number>();
  for (const e of events.rows) {
    const period = `${e.user_id} ${e.period_start.toISOString()} ${e.meter}`;
    if (e.event === "released")
      consumed.set(e.job_id, (consumed.get(e.job_id) ?? 0) + (e.usage_tokens ?? 0));
    if (e.event === "reclaimed") consumed.set(e.job_id, (consumed.get(e.job_id) ?? 0) + 1);
    // The usage of an attempt someone else ended: a record appended to the history, not a
    // transition (its status is the job's, before and after).
    if (e.event === "attempt_usage") continue;
    if (ended.has(e.job_id)) problems.push(`event ${e.event} after job ${e.job_id} ended`);
    if (e.event === "enqueued") {
      const a = (active.get(e.user_id) ?? 0) + 1;
      // What enqueue held (1 on a job plan, tokens on a token plan), as its event says.
      const r = (reserved.get(period) ?? 0) + (e.hold ?? 1);
      active.set(e.user_id, a);
      reserved.set(period, r);
      if (a > e.max_active) problems.push(`user ${e.user_id}: ${a} active > ${e.max_active}`);
      if (r > e.units) problems.push(`user ${e.user_id}: ${r} reserved in ${period} > ${e.units}`);
    }
    if (["succeeded", "failed", "canceled"].includes(e.to_status)) {
      ended.add(e.job_id);
      active.set(e.user_id, (active.get(e.user_id) ?? 0) - 1);
      // The ending gave back what it did not capture, as its event says.
      if (e.released === null) problems.push(`job ${e.job_id}: ${e.event} without its release`);
      reserved.set(period, (reserved.get(period) ?? 0) - (e.released ?? 0));
    }
    const ending =
      (e.to_status === "failed" || e.to_status === "canceled") && e.from_status !== e.to_status;
    if (!ending) continue;
    // docs/DESIGN.md#metering-hold-and-capture: the ending attempt's own tokens are its worker's
    // usage, else (someone else ended a running attempt) at least its prompt.
    const before = consumed.get(e.job_id) ?? 0;
    // A give-up is requeue_job's, which only the claim's own worker calls: without usage it
    // consumed nothing (the shared gate was closed: no model call), as end_with_refund reads it.
    const own = e.usage_tokens ?? (e.from_status === "running" && e.event !== "gave_up" ? 1 : 0);
    const operator = e.to_status === "failed" && e.failure_reason === "provider_misconfigured";
    if (e.meter === "tokens") {
      // No bound: the ending pays what was consumed, up to the hold.
      if (operator && e.captured !== 0)
        problems.push(`job ${e.job_id}: the operator's fault captured ${e.captured}`);
      if (!operator && (e.captured ?? 0) < Math.min(e.job_hold, before))
        problems.push(`job ${e.job_id}: captured ${e.captured} of ${before} consumed`);
      if (e.refunded !== true) problems.push(`job ${e.job_id}: a token plan's ending withheld`);
      continue;
    }
    const runningCancel = e.to_status === "canceled" && e.from_status === "running";
    const paid = !operator && (runningCancel || before + own > 0);
    const bound =
      refundBoundOf({
        meter: e.plan_meter,
        units_per_period: e.units,
        max_paid_refunds: e.max_paid_refunds,
      }) ?? Number.POSITIVE_INFINITY;
    if (paid) {
      const used = paidRefunds.get(period) ?? 0;
      if (e.refunded === true) {
        if (runningCancel) runningCancelTally.refunded++;
        if (used >= bound)
          problems.push(`job ${e.job_id}: refunded after spend past the bound (${used})`);
        if (e.counted !== true) problems.push(`job ${e.job_id}: refunded after spend, uncounted`);
        paidRefunds.set(period, used + 1);
      } else {
        if (runningCancel) runningCancelTally.withheld++;
        if (used < bound)
          problems.push(`job ${e.job_id}: refund after spend withheld under the bound (${used})`);
      }
    } else if (e.refunded !== true || e.counted === true) {
      problems.push(
        `job ${e.job_id}: ${e.to_status} from ${e.from_status} with nothing spent, refunded ${e.refunded}, counted ${e.counted}`,
      );
    }
  }
  const counters = await admin.query<{
    user_id: string;
    period_start: Date;
    meter: string;
    n: number;
  }>(
    `select user_id, period_start, meter, paid_refunds as n
     from public.quota_usage where user_id = any($1)`,
    [users],
  );
  for (const c of counters.rows) {
    const counted = paidRefunds.get(`${c.user_id} ${c.period_start.toISOString()} ${c.meter}`) ?? 0;
    if (c.n !== counted)
      problems.push(`user ${c.user_id}: paid_refunds says ${c.n}, counted events ${counted}`);
  }
  if (problems.length > 0) throw new InvariantError(problems.join("\n"));
}
