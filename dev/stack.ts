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
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { chmod, mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import { createInterface } from "node:readline";
import pg from "pg";
import { type AlertReceiver, startAlertReceiver } from "./alert-receiver.ts";
import { ensureBuild } from "./build.ts";
import { type DevSession, signInDevUser } from "./dev-users.ts";
import { root } from "./migrate.ts";
import {
  type FailKind,
  type FailOptions,
  type FakeOpenAI,
  type FakeStats,
  startFakeOpenAI,
} from "./openai-fake.ts";
import { DEFAULT_PORTS, pickPort, portIsFree, type StackPart } from "./ports.ts";
import { type RunningPostgres, startPostgres } from "./postgres.ts";
import {
  mintAnonKey,
  mintServiceRoleKey,
  type RunningPostgrest,
  startPostgrest,
} from "./postgrest.ts";
import { DEV_SIGNING_KEYS, DEV_TOKEN, type QStashStandIn, startQStash } from "./qstash/index.ts";
import { type RunningRedisServer, startRedisServer } from "./redis-server.ts";
import { LOCAL_JWT_SECRET } from "./token.ts";
import { type RunningUpstashRedis, startUpstashRedis } from "./upstash-redis.ts";

export { DEFAULT_PORTS, type StackPart } from "./ports.ts";

export interface StackOptions {
  /** Default: the design's ports. 0 = any free port (tests). */
  ports?: Partial<Record<StackPart, number>>;
  /** Default `<repo>/.data` (git-ignored, kept between runs); tests: a temp dir. */
  dataDir?: string;
  /** Start from an empty database. */
  reset?: boolean;
  /** QStash retry/backoff scale (notBefore stays real time: the app compares it with its clock). @default 1 */
  timeScale?: number;
  /** App env overrides: tunables, or a real service's variables. */
  env?: Record<string, string>;
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
    postgres: string;
  };
  /** The app's full environment. */
  env: Record<string, string>;
  model: {
    failNext(kind: FailKind, count?: number, opts?: FailOptions): void;
    calls(): number;
    /** Calls, billed completion tokens and the answered requests (dev/openai-fake.ts). */
    stats(): FakeStats;
    /** The pause before each streamed token's chunk. */
    setChunkMs(ms: number): void;
    reset(): void;
  };
  qstash: QStashStandIn;
  alerts: { received(): unknown[]; clear(): void };
  signIn(opts?: {
    userId?: string;
    plan?: "free" | "pro" | "team";
  }): Promise<{ userId: string; accessToken: string }>;
  /** Admin pool on the stack's database. */
  sql: pg.Pool;
  /** Which parts are stand-ins (false: the real service from `env`). */
  standIns: { openai: boolean; qstash: boolean; redis: boolean; alerts: boolean };
  /** Migrations applied by this start, and those the kept database already had. */
  migrations: { applied: string[]; skipped: string[] };
  /** Whether this start had to run Vercel's builder, and how long that took. */
  build: { outcome: "fresh" | "built"; ms: number };
  /** Milliseconds from the call to everything answering, the build included. */
  startupMs: number;
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

/** A start-up problem the user can fix; its message is one line. */
export class StackStartError extends Error {
  override readonly name = "StackStartError";
}

const PART_NAMES: Record<StackPart, string> = {
  app: "the app",
  postgres: "PostgreSQL",
  supabase: "the Supabase REST stand-in",
  qstash: "the QStash stand-in",
  redisRest: "the Upstash Redis REST stand-in",
  redisServer: "redis-server",
  openai: "the fake OpenAI model",
  alerts: "the alert receiver",
};

/** Local-only values; none of them is a secret anywhere but here. */
export const LOCAL_VALUES = {
  redisToken: "local-dev-upstash-redis-token",
  openaiKey: "sk-local-fake-model-key",
  cronSecret: "local-dev-cron-secret-0123456789",
};

/** Variables that name a real service; when set, that service's stand-in is not started. */
const REAL = {
  openai: "OPENAI_API_KEY",
  qstash: "QSTASH_TOKEN",
  redis: "UPSTASH_REDIS_REST_URL",
  alerts: "ALERT_WEBHOOK_URL",
} as const;

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const t0 = Date.now();
  const log = options.log ?? (() => {});
  const userEnv = options.env ?? {};
  const standIns = {
    openai: !userEnv[REAL.openai],
    qstash: !userEnv[REAL.qstash],
    redis: !userEnv[REAL.redis],
    alerts: !userEnv[REAL.alerts],
  };
  const wanted: StackPart[] = [
    "app",
    "postgres",
    "supabase",
    ...(standIns.qstash ? (["qstash"] as const) : []),
    ...(standIns.redis ? (["redisRest", "redisServer"] as const) : []),
    ...(standIns.openai ? (["openai"] as const) : []),
    ...(standIns.alerts ? (["alerts"] as const) : []),
  ];

  // Programs and ports first, so a problem is one line before anything started.
  if (standIns.redis) {
    const probe = spawnSync("redis-server", ["--version"], { stdio: "ignore" });
    if (probe.error) {
      throw new StackStartError(
        'redis-server is not installed: run "apt-get install -y redis-server" (Debian/Ubuntu), or set UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN to use a real Upstash database',
      );
    }
  }
  // The app is the build's output: make it if the sources changed since the last build.
  const buildStarted = Date.now();
  const build = { outcome: ensureBuild(log), ms: Date.now() - buildStarted };
  const ports = {} as Record<StackPart, number>;
  for (const part of wanted) {
    const asked = options.ports?.[part] ?? DEFAULT_PORTS[part];
    ports[part] = asked === 0 ? await pickPort(new Set(Object.values(ports))) : asked;
  }
  for (const part of wanted) {
    if (options.ports?.[part] === 0) continue;
    if (!(await portIsFree(ports[part]))) {
      throw new StackStartError(
        `port ${ports[part]} (${PART_NAMES[part]}) is already in use on 127.0.0.1: is another "npm run dev" running? Stop it or free the port.`,
      );
    }
  }

  const dataDir = options.dataDir ?? join(root, ".data");
  await mkdir(dataDir, { recursive: true });
  // Postgres runs as its own OS user when we are root: it must be able to enter the folder
  // (mkdtemp makes 0700 folders).
  await chmod(dataDir, 0o755);
  const cleanups: (() => Promise<unknown>)[] = [];
  const cleanUp = async () => {
    for (const fn of cleanups.splice(0).reverse()) await fn().catch(() => undefined);
  };

  try {
    const jwtSecret = userEnv.SUPABASE_JWT_SECRET ?? LOCAL_JWT_SECRET;
    const [postgres, redisServer, openai, alerts, firstQStash, serviceRoleKey, anonKey] =
      await Promise.all([
        track(
          startPostgres({
            dataDir: join(dataDir, "postgres"),
            port: ports.postgres,
            reset: options.reset ?? false,
            persistent: true,
          }),
          (p: RunningPostgres) => p.stop(),
        ),
        standIns.redis
          ? track(startRedisServer({ port: ports.redisServer }), (r: RunningRedisServer) =>
              r.stop(),
            )
          : undefined,
        standIns.openai
          ? track(startFakeOpenAI({ port: ports.openai }), (o: FakeOpenAI) => o.close())
          : undefined,
        standIns.alerts
          ? track(startAlertReceiver({ port: ports.alerts, log }), (a: AlertReceiver) => a.close())
          : undefined,
        standIns.qstash ? launchQStash() : undefined,
        mintServiceRoleKey(jwtSecret),
        mintAnonKey(jwtSecret),
      ]);

    function launchQStash(): Promise<QStashStandIn> {
      return startQStash({
        port: ports.qstash,
        timeScale: options.timeScale ?? 1,
        scaleNotBefore: false,
        log,
      });
    }
    let qstash = firstQStash;
    let qstashRunning = qstash !== undefined;
    cleanups.push(async () => {
      if (qstash && qstashRunning) await qstash.close();
    });

    function track<T>(started: Promise<T>, stop: (value: T) => Promise<unknown>): Promise<T> {
      return started.then((value) => {
        cleanups.push(() => stop(value));
        return value;
      });
    }

    const [postgrest, redisRest] = await Promise.all([
      track(
        startPostgrest({
          port: ports.supabase,
          databaseUrl: postgres.url,
          jwtSecret,
          serviceRoleKey,
          anonKey,
        }),
        (p: RunningPostgrest) => p.close(),
      ),
      redisServer
        ? track(
            startUpstashRedis({
              port: ports.redisRest,
              redisUrl: redisServer.url,
              token: LOCAL_VALUES.redisToken,
            }),
            (r: RunningUpstashRedis) => r.close(),
          )
        : undefined,
    ]);

    const appUrl = `http://127.0.0.1:${ports.app}`;
    const env: Record<string, string> = {
      SUPABASE_URL: postgrest.url,
      SUPABASE_SERVICE_ROLE_KEY: serviceRoleKey,
      SUPABASE_JWT_SECRET: jwtSecret,
      SUPABASE_ANON_KEY: anonKey,
      ...(qstash
        ? {
            QSTASH_URL: qstash.url,
            QSTASH_TOKEN: DEV_TOKEN,
            QSTASH_CURRENT_SIGNING_KEY: DEV_SIGNING_KEYS.current,
            QSTASH_NEXT_SIGNING_KEY: DEV_SIGNING_KEYS.next,
          }
        : {}),
      ...(redisRest
        ? {
            UPSTASH_REDIS_REST_URL: redisRest.url,
            UPSTASH_REDIS_REST_TOKEN: LOCAL_VALUES.redisToken,
          }
        : {}),
      ...(openai ? { OPENAI_API_KEY: LOCAL_VALUES.openaiKey, OPENAI_BASE_URL: openai.url } : {}),
      OPENAI_MODEL: "gpt-4o-mini",
      APP_URL: appUrl,
      CRON_SECRET: LOCAL_VALUES.cronSecret,
      ...(alerts ? { ALERT_WEBHOOK_URL: alerts.url } : {}),
      ...userEnv,
    };

    const sql = new pg.Pool({ connectionString: postgres.url, max: 4 });
    sql.on("error", () => {});
    cleanups.push(() => sql.end());

    // The app: the built artifact, in a process of its own with the app's environment.
    let child: ChildProcess | undefined;
    const startChild = async () => {
      child = await spawnApp(ports.app, env, postgres.url, log);
    };
    const stopChild = async (signal: NodeJS.Signals) => {
      const c = child;
      child = undefined;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => c.once("exit", () => resolve()));
      c.kill(signal);
      const timer = setTimeout(() => c.kill("SIGKILL"), 5_000);
      await gone;
      clearTimeout(timer);
    };
    await startChild();
    cleanups.push(() => stopChild("SIGTERM"));

    const sweep = async () => {
      const res = await fetch(`${appUrl}/api/cron/sweep`, {
        headers: { authorization: `Bearer ${env.CRON_SECRET}` },
      });
      const text = await res.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // keep the text
      }
      return { status: res.status, body };
    };
    if (options.sweepEverySeconds && options.sweepEverySeconds > 0) {
      const timer = setInterval(() => {
        sweep().then(
          (r) => {
            const b = r.body as { failed?: Record<string, number>; republished?: number };
            const acted = Object.keys(b?.failed ?? {}).length > 0 || (b?.republished ?? 0) > 0;
            if (r.status !== 200 || acted) log(`[sweeper] ${r.status} ${JSON.stringify(r.body)}`);
          },
          (error: unknown) => log(`[sweeper] failed: ${(error as Error).message}`),
        );
      }, options.sweepEverySeconds * 1000);
      timer.unref();
      cleanups.push(async () => clearInterval(timer));
    }

    const notStandIn = (what: string) => () => {
      throw new Error(`${what} is the real service here (set by env), not the stand-in`);
    };
    let stopped: Promise<void> | undefined;
    const stack: Stack = {
      urls: {
        app: appUrl,
        supabase: postgrest.url,
        qstash: qstash?.url ?? env.QSTASH_URL ?? "https://qstash.upstash.io",
        redisRest: redisRest?.url ?? env.UPSTASH_REDIS_REST_URL ?? "",
        openai: openai?.url ?? env.OPENAI_BASE_URL ?? "https://api.openai.com/v1",
        alerts: alerts?.url ?? env.ALERT_WEBHOOK_URL ?? "",
        postgres: postgres.url,
      },
      env,
      standIns,
      migrations: postgres.migrations,
      build,
      startupMs: 0,
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
      qstash: {
        get url() {
          return qstash?.url ?? env.QSTASH_URL ?? "";
        },
        stats: () => (qstash ? qstash.stats() : notStandIn("QStash")()),
        waitIdle: (timeoutMs?: number) =>
          qstash ? qstash.waitIdle(timeoutMs) : Promise.reject(new Error("QStash is real here")),
        close: async () => {
          await stack.stopQStash();
        },
      },
      alerts: alerts
        ? { received: alerts.received, clear: alerts.clear }
        : { received: () => [], clear: () => {} },
      async signIn(opts = {}) {
        const session: DevSession = await signInDevUser(sql, {
          ...(opts.userId ? { userId: opts.userId } : {}),
          plan: opts.plan ?? "free",
          jwtSecret,
        });
        return { userId: session.userId, accessToken: session.accessToken };
      },
      sql,
      async stopQStash() {
        if (!qstash) throw new Error("QStash is the real service here");
        if (!qstashRunning) return;
        qstashRunning = false;
        await qstash.close();
      },
      async startQStash() {
        if (!standIns.qstash) throw new Error("QStash is the real service here");
        if (qstashRunning) return;
        qstash = await launchQStash();
        qstashRunning = true;
      },
      sweep,
      killApp: () => stopChild("SIGKILL"),
      async restartApp() {
        await stopChild("SIGTERM");
        await startChild();
      },
      stop() {
        stopped ??= cleanUp();
        return stopped;
      },
    };
    stack.startupMs = Date.now() - t0;
    return stack;
  } catch (error) {
    await cleanUp();
    throw error;
  }
}

/** Removes a stack's data folder (tests: after `stop()`). */
export function removeDataDir(dataDir: string): Promise<void> {
  return rm(dataDir, { recursive: true, force: true });
}

const APP_SERVER = join(root, "dev", "app-server.ts");
/**
 * Node 22 from the `node` devDependency (the runtime the build targets), not whichever node
 * runs this process; plain Node, no tsx, so the functions load as they would on Vercel.
 */
const NODE = join(root, "node_modules", "node", "bin", "node");
/** What a child app process may inherit from ours besides its own environment. */
const INHERITED = ["PATH", "HOME", "TMPDIR", "LANG", "TZ"];

async function spawnApp(
  port: number,
  env: Record<string, string>,
  databaseUrl: string,
  log: (line: string) => void,
): Promise<ChildProcess> {
  const inherited = Object.fromEntries(
    INHERITED.flatMap((k) => (process.env[k] ? [[k, process.env[k]]] : [])),
  );
  const child = spawn(NODE, [APP_SERVER], {
    cwd: root,
    env: { ...inherited, ...env, PORT: String(port), DEV_DATABASE_URL: databaseUrl },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  child.once("exit", () => process.off("exit", killOnExit));
  const { stdout, stderr: errors } = child;
  if (!stdout || !errors) throw new Error("the app process has no output pipes");
  let stderr = "";
  errors.on("data", (c: Buffer) => {
    stderr = (stderr + c.toString("utf8")).slice(-4_000);
  });
  createInterface({ input: errors }).on("line", (line) => log(line));
  const lines = createInterface({ input: stdout });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the app process did not start within 30 s: ${stderr.trim()}`));
    }, 30_000);
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new StackStartError(`the app process exited (code ${code}): ${stderr.trim()}`));
    };
    child.once("exit", onExit);
    lines.on("line", (line) => {
      if (line.startsWith("app-server ready")) {
        clearTimeout(timer);
        child.off("exit", onExit);
        resolve();
      } else {
        log(line);
      }
    });
  });
  return child;
}
