/**
 * The whole system on one machine, on loopback, no Docker, no accounts (docs/DESIGN.md#local-stack): a real
 * PostgreSQL with the migrations, the PostgREST RPC stand-in, the QStash dev stand-in, a real
 * redis-server behind the Upstash REST stand-in, the fake OpenAI model, an alert webhook
 * receiver, and the app: what Vercel's builder made of `api/` and `public/` (`.vercel/output`),
 * built first when the sources changed. `npm run dev` (dev/cli.ts) and the
 * end-to-end tests (test/support/stack.ts) both start it through `startStack`.
 *
 * A real service's variables in `env` (OPENAI_API_KEY, QSTASH_TOKEN, UPSTASH_REDIS_REST_URL,
 * ALERT_WEBHOOK_URL) replace its stand-in: pointing the app at the real thing is a change of
 * environment, not of code. Supabase stays local (the stack owns its database).
 */
import { rm } from "node:fs/promises";
import pg from "pg";
import {
  type AccessTokenInput,
  type ProjectFile,
  type ProjectShape,
  prepareProject,
  projectFilePath,
  shapeFrom,
  signAccessToken,
} from "./auth/index.ts";
import { ensureBuild } from "./build.ts";
import { type DevSession, signInDevUser } from "./dev-users.ts";
import type { FailKind, FailOptions, FakeStats } from "./openai/index.ts";
import type { ReceivedSpan } from "./otlp-receiver.ts";
import type { StackPart } from "./ports.ts";
import type { QStashStandIn } from "./qstash/index.ts";
import type { RealtimeStandIn } from "./realtime/index.ts";
import { type AppProcess, startAppProcess } from "./stack/app-process.ts";
import {
  assignPorts,
  checkPrograms,
  prepareDataDir,
  type StandIns,
  whichStandIns,
} from "./stack/preflight.ts";
import { appEnv, type Services, startServices } from "./stack/services.ts";
import { type Sweep, sweepEvery, sweeper } from "./stack/sweeper.ts";
import { Teardown } from "./stack/teardown.ts";

export { DEFAULT_PORTS, type StackPart } from "./ports.ts";
export { StackStartError } from "./stack/preflight.ts";
export { LOCAL_VALUES } from "./stack/services.ts";

export interface StackOptions {
  /** Default: the design's ports. 0 = any free port (tests). */
  ports?: Partial<Record<StackPart, number>>;
  /** Default `<repo>/.data` (git-ignored, kept between runs); tests: a temp dir. */
  dataDir?: string;
  /** Start from an empty database. */
  reset?: boolean;
  /** QStash retry/backoff scale (notBefore stays real time: the app compares it with its clock). @default 1 */
  timeScale?: number;
  /**
   * The local Supabase project's shape: `new` (ES256 user tokens, `sb_` keys: a project created
   * today) or `legacy` (HS256 and the JWT keys). @default `DEV_SUPABASE_SHAPE`, else "new"
   */
  shape?: ProjectShape;
  /** App env overrides: tunables, or a real service's variables. */
  env?: Record<string, string>;
  /**
   * Start the OTLP/HTTP trace receiver (dev/otlp-receiver.ts) and point the app's
   * OTEL_EXPORTER_OTLP_ENDPOINT at it, unless `env` names a collector. @default false
   */
  traces?: boolean;
  /** Call GET /api/cron/sweep this often, as Vercel cron would (dev only). @default off */
  sweepEverySeconds?: number;
  log?: (line: string) => void;
}

export interface Stack {
  urls: {
    app: string;
    supabase: string;
    qstash: string;
    redisRest: string;
    openai: string;
    alerts: string;
    /** The trace receiver's base URL, or the collector `env` named ("" when tracing is off). */
    traces: string;
    postgres: string;
    /** Supabase Auth (GoTrue stand-in) on the project's origin; the page reaches it at the app's `/auth/v1`. */
    auth: string;
    /** Its mailbox: `GET` it in a browser, or `/messages` for JSON. */
    mail: string;
  };
  /** The app's full environment. */
  env: Record<string, string>;
  model: {
    failNext(kind: FailKind, count?: number, opts?: FailOptions): void;
    calls(): number;
    /** Calls, billed completion tokens and the answered requests (dev/openai/index.ts). */
    stats(): FakeStats;
    /** The pause before each streamed token's chunk. */
    setChunkMs(ms: number): void;
    reset(): void;
  };
  qstash: QStashStandIn;
  /** The Realtime stand-in: its counts, and an outage (`down(true)`) until `down(false)`. */
  realtime: Pick<RealtimeStandIn, "stats" | "down">;
  alerts: { received(): unknown[]; clear(): void };
  /** The spans the trace receiver got (none unless the stack was started with `traces`). */
  traces: { spans(): ReceivedSpan[]; clear(): void };
  /** The local project's Auth stand-in: its shape and keys, and user tokens it would issue. */
  auth: { project: ProjectFile; mint(input: AccessTokenInput): Promise<string> };
  signIn(opts?: {
    userId?: string;
    /** A plan of `public.plans` (free by default). */
    plan?: string;
  }): Promise<{ userId: string; accessToken: string }>;
  /** Admin pool on the stack's database. */
  sql: pg.Pool;
  /** Which parts are stand-ins (false: the real service from `env`). */
  standIns: StandIns;
  /** Migrations applied by this start, and those the kept database already had. */
  migrations: { applied: string[]; skipped: string[] };
  /** Whether this start had to run Vercel's builder, and how long that took. */
  build: { outcome: "fresh" | "built"; ms: number };
  /** Milliseconds from the call to everything answering, the build included. */
  startupMs: number;
  /** The database's folder: `dataDir` as given, else `<repo>/.data`. */
  dataDir: string;
  /** Stop / start the QStash stand-in (same port): "QStash is down". */
  stopQStash(): Promise<void>;
  startQStash(): Promise<void>;
  /** Runs the sweeper once, as the cron would: GET /api/cron/sweep with the CRON_SECRET. */
  sweep(): Promise<{ status: number; body: unknown }>;
  /** The app runs in a process of its own (as on Vercel): kill it mid-call, start it again. */
  killApp(): Promise<void>;
  restartApp(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts the stack, in this order: checks (programs, build, ports, data folder), the database
 * and the stand-ins, the app's environment and admin pool, the app process, the dev sweeper.
 * `stop()` (or a failed start) undoes whatever started, in the reverse order.
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const t0 = Date.now();
  const log = options.log ?? (() => {});
  const userEnv = options.env ?? {};
  // Programs and ports first, so a problem is one line before anything started.
  const standIns = whichStandIns(userEnv, options.traces);
  checkPrograms(standIns);
  // The app is the build's output: make it if the sources changed since the last build.
  const buildStarted = Date.now();
  const build = { outcome: ensureBuild(log), ms: Date.now() - buildStarted };
  const ports = await assignPorts(standIns, options.ports);
  const dataDir = await prepareDataDir(options.dataDir);

  const teardown = new Teardown();
  try {
    // The project's auth side (dev/auth/): made before the REST stand-in, which serves it.
    const project = await prepareProject({
      dataDir,
      shape: options.shape ?? shapeFrom(process.env.DEV_SUPABASE_SHAPE),
      issuer: `http://127.0.0.1:${ports.supabase}/auth/v1`,
      ...(userEnv.SUPABASE_JWT_SECRET ? { jwtSecret: userEnv.SUPABASE_JWT_SECRET } : {}),
    });
    const services = await startServices({
      ports,
      standIns,
      dataDir,
      reset: options.reset ?? false,
      timeScale: options.timeScale ?? 1,
      project,
      log,
      teardown,
    });
    const appUrl = `http://127.0.0.1:${ports.app}`;
    const env = appEnv(services, { appUrl, userEnv });
    const sql = new pg.Pool({ connectionString: services.postgres.url, max: 4 });
    sql.on("error", () => {});
    teardown.add(() => sql.end());
    // The app: the built artifact, in a process of its own with the app's environment.
    const app = await startAppProcess(
      ports.app,
      env,
      services.postgres.url,
      log,
      projectFilePath(dataDir),
    );
    teardown.add(() => app.stop("SIGTERM"));
    const sweep = sweeper(appUrl, env.CRON_SECRET);
    if (options.sweepEverySeconds && options.sweepEverySeconds > 0)
      sweepEvery(options.sweepEverySeconds, sweep, log, teardown);

    let stopped: Promise<void> | undefined;
    const stop = () => {
      stopped ??= teardown.run();
      return stopped;
    };
    const stack = stackHandle({ services, standIns, env, appUrl, sql, app, sweep });
    return { ...stack, build, stop, dataDir, startupMs: Date.now() - t0 };
  } catch (error) {
    await teardown.run();
    throw error;
  }
}

/** The running stack as tests and the CLI see it, less what only `startStack` knows. */
function stackHandle(s: {
  services: Services;
  standIns: StandIns;
  env: Record<string, string>;
  appUrl: string;
  sql: pg.Pool;
  app: AppProcess;
  sweep: Sweep;
}): Omit<Stack, "build" | "stop" | "startupMs" | "dataDir"> {
  const { postgres, postgrest, redisRest, openai, alerts, traces, qstash, auth, realtime } =
    s.services;
  const { env } = s;
  const notStandIn = (what: string) => () => {
    throw new Error(`${what} is the real service here (set by env), not the stand-in`);
  };
  const qstashStandIn: QStashStandIn = {
    get url() {
      return qstash.current()?.url ?? env.QSTASH_URL ?? "";
    },
    stats: () => qstash.current()?.stats() ?? notStandIn("QStash")(),
    waitIdle: (timeoutMs?: number) =>
      qstash.current()?.waitIdle(timeoutMs) ?? Promise.reject(new Error("QStash is real here")),
    close: () => qstash.stop(),
  };
  return {
    urls: {
      app: s.appUrl,
      supabase: postgrest.url,
      qstash: qstash.current()?.url ?? env.QSTASH_URL ?? "https://qstash.upstash.io",
      redisRest: redisRest?.url ?? env.UPSTASH_REDIS_REST_URL ?? "",
      openai: openai?.url ?? env.OPENAI_BASE_URL ?? "https://api.openai.com/v1",
      alerts: alerts?.url ?? env.ALERT_WEBHOOK_URL ?? "",
      traces:
        traces?.url ??
        env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ??
        env.OTEL_EXPORTER_OTLP_ENDPOINT ??
        "",
      postgres: postgres.url,
      auth: `${postgrest.url}/auth/v1`,
      mail: auth.mailUrl,
    },
    env,
    realtime: { stats: () => realtime.stats(), down: (on) => realtime.down(on) },
    standIns: s.standIns,
    migrations: postgres.migrations,
    model: openai
      ? {
          failNext: openai.failNext,
          calls: openai.calls,
          stats: openai.stats,
          setChunkMs: openai.setChunkMs,
          reset: openai.reset,
        }
      : {
          failNext: notStandIn("OpenAI"),
          calls: notStandIn("OpenAI"),
          stats: notStandIn("OpenAI"),
          setChunkMs: notStandIn("OpenAI"),
          reset: notStandIn("OpenAI"),
        },
    qstash: qstashStandIn,
    auth: {
      project: s.services.project,
      mint: (input) => signAccessToken(s.services.project, input),
    },
    alerts: alerts
      ? { received: alerts.received, clear: alerts.clear }
      : { received: () => [], clear: () => {} },
    traces: traces
      ? { spans: traces.spans, clear: traces.clear }
      : { spans: () => [], clear: () => {} },
    async signIn(opts = {}) {
      const session: DevSession = await signInDevUser(s.sql, {
        ...(opts.userId ? { userId: opts.userId } : {}),
        plan: opts.plan ?? "free",
        project: s.services.project,
      });
      return { userId: session.userId, accessToken: session.accessToken };
    },
    sql: s.sql,
    stopQStash: () => qstash.stop(),
    startQStash: () => qstash.start(),
    sweep: s.sweep,
    killApp: () => s.app.stop("SIGKILL"),
    async restartApp() {
      await s.app.stop("SIGTERM");
      await s.app.start();
    },
  };
}

/** Removes a stack's data folder (tests: after `stop()`). */
export function removeDataDir(dataDir: string): Promise<void> {
  return rm(dataDir, { recursive: true, force: true });
}
