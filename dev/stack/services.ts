/**
 * The database and the stand-ins, started in two waves: first what needs nothing else
 * (PostgreSQL with the migrations, redis-server, the fake OpenAI, the alert receiver, QStash),
 * then what stands in front of those (PostgREST on the database, Upstash REST on redis-server).
 * A part whose real service is named in `env` is not started (preflight.ts, `whichStandIns`).
 */
import { join } from "node:path";
import { type AlertReceiver, startAlertReceiver } from "../alert-receiver.ts";
import { type StackAuth, startStackAuth } from "../auth/gotrue-stack.ts";
import { createAuthStandIn, type ProjectFile } from "../auth/index.ts";
import { type FakeOpenAI, startFakeOpenAI } from "../openai/index.ts";
import { type OtlpReceiver, startOtlpReceiver } from "../otlp-receiver.ts";
import { type RunningPostgres, startPostgres } from "../postgres/index.ts";
import { type RunningPostgrest, startPostgrest } from "../postgrest/index.ts";
import { DEV_SIGNING_KEYS, DEV_TOKEN, type QStashStandIn, startQStash } from "../qstash/index.ts";
import { type RealtimeStandIn, startRealtime } from "../realtime/index.ts";
import { type RunningUpstashRedis, startUpstashRedis } from "../upstash-redis/index.ts";
import { type RunningRedisServer, startRedisServer } from "../upstash-redis/redis-server.ts";
import type { Ports, StandIns } from "./preflight.ts";
import type { Teardown } from "./teardown.ts";

/** Local-only values; none of them is a secret anywhere but here. */
export const LOCAL_VALUES = {
  redisToken: "local-dev-upstash-redis-token",
  openaiKey: "sk-local-fake-model-key",
  cronSecret: "local-dev-cron-secret-0123456789",
  safetyIdentifierKey: "local-dev-safety-identifier-key-0123456789",
};

/** The QStash stand-in, which a test may stop and start again on the same port ("QStash is down"). */
export interface QStashSwitch {
  current(): QStashStandIn | undefined;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export interface Services {
  postgres: RunningPostgres;
  postgrest: RunningPostgrest;
  /** Supabase Realtime's Broadcast (dev/realtime/), served by the REST stand-in under /realtime/v1. */
  realtime: RealtimeStandIn;
  redisRest: RunningUpstashRedis | undefined;
  openai: FakeOpenAI | undefined;
  alerts: AlertReceiver | undefined;
  /** The OTLP/HTTP receiver the app's spans go to, when the stack was asked for traces. */
  traces: OtlpReceiver | undefined;
  qstash: QStashSwitch;
  /** The local project (dev/auth/): its shape, keys and signing key. */
  project: ProjectFile;
  /** GoTrue (dev/auth/gotrue.ts) under the project's `/auth/v1`, and its mailbox. */
  auth: StackAuth;
}

export async function startServices(o: {
  ports: Ports;
  standIns: StandIns;
  dataDir: string;
  reset: boolean;
  timeScale: number;
  project: ProjectFile;
  log: (line: string) => void;
  teardown: Teardown;
}): Promise<Services> {
  const { ports, standIns, teardown } = o;
  const launchQStash = () =>
    startQStash({ port: ports.qstash, timeScale: o.timeScale, scaleNotBefore: false, log: o.log });
  const { project } = o;
  const [postgres, redisServer, openai, alerts, traces, firstQStash] = await Promise.all([
    teardown.track(
      startPostgres({
        dataDir: join(o.dataDir, "postgres"),
        port: ports.postgres,
        reset: o.reset,
        persistent: true,
      }),
      (p) => p.stop(),
    ),
    standIns.redis
      ? teardown.track(startRedisServer({ port: ports.redisServer }), (r: RunningRedisServer) =>
          r.stop(),
        )
      : undefined,
    standIns.openai
      ? teardown.track(startFakeOpenAI({ port: ports.openai }), (f) => f.close())
      : undefined,
    standIns.alerts
      ? teardown.track(startAlertReceiver({ port: ports.alerts, log: o.log }), (a) => a.close())
      : undefined,
    standIns.traces
      ? teardown.track(startOtlpReceiver({ port: ports.traces, log: o.log }), (t) => t.close())
      : undefined,
    standIns.qstash ? launchQStash() : undefined,
  ]);
  const qstash = qstashSwitch(firstQStash, standIns.qstash, launchQStash);
  teardown.add(() => qstash.stop().catch(() => undefined));

  // Auth on the project's origin: the JWKS room and GoTrue beside it, its mail on a port of its own
  const standIn = createAuthStandIn(project);
  const auth = await teardown.track(
    startStackAuth({
      project,
      standIn,
      mailPort: ports.mail,
      databaseUrl: postgres.url,
      appUrl: `http://127.0.0.1:${ports.app}`,
    }),
    (a) => a.stop(),
  );
  // Realtime on the project's origin too: the REST stand-in serves its /realtime/v1.
  const realtime = await teardown.track(
    startRealtime({
      databaseUrl: postgres.url,
      jwtSecret: project.jwtSecret,
      serviceRoleKey: project.secretKey,
      anonKey: project.publishableKey,
      jwks: standIn.jwks(),
      log: o.log,
    }),
    (r) => r.close(),
  );
  const [postgrest, redisRest] = await Promise.all([
    teardown.track(
      startPostgrest({
        port: ports.supabase,
        databaseUrl: postgres.url,
        jwtSecret: project.jwtSecret,
        serviceRoleKey: project.secretKey,
        anonKey: project.publishableKey,
        auth: { jwks: standIn.jwks, handle: auth.handle },
        realtime,
      }),
      (p) => p.close(),
    ),
    redisServer
      ? teardown.track(
          startUpstashRedis({
            port: ports.redisRest,
            redisUrl: redisServer.url,
            token: LOCAL_VALUES.redisToken,
          }),
          (r) => r.close(),
        )
      : undefined,
  ]);
  return {
    postgres,
    postgrest,
    realtime,
    redisRest,
    openai,
    alerts,
    traces,
    qstash,
    project,
    auth,
  };
}

function qstashSwitch(
  first: QStashStandIn | undefined,
  isStandIn: boolean,
  launch: () => Promise<QStashStandIn>,
): QStashSwitch {
  let qstash = first;
  let running = qstash !== undefined;
  return {
    current: () => qstash,
    async stop() {
      if (!qstash) throw new Error("QStash is the real service here");
      if (!running) return;
      running = false;
      await qstash.close();
    },
    async start() {
      if (!isStandIn) throw new Error("QStash is the real service here");
      if (running) return;
      qstash = await launch();
      running = true;
    },
  };
}

/** The app's environment: the stand-ins' URLs and keys, then the caller's `env` over them. */
export function appEnv(
  s: Services,
  o: { appUrl: string; userEnv: Record<string, string> },
): Record<string, string> {
  const qstash = s.qstash.current();
  const { project } = s;
  return {
    SUPABASE_URL: s.postgrest.url,
    // A project created today: the new API keys, and ES256 user tokens verified by the JWKS (no
    // SUPABASE_JWT_SECRET). The legacy shape: the JWT keys and the shared secret.
    ...(project.shape === "new"
      ? {
          SUPABASE_SECRET_KEY: project.secretKey,
          SUPABASE_PUBLISHABLE_KEY: project.publishableKey,
        }
      : {
          SUPABASE_SERVICE_ROLE_KEY: project.secretKey,
          SUPABASE_JWT_SECRET: project.jwtSecret,
          SUPABASE_ANON_KEY: project.publishableKey,
        }),
    ...(qstash
      ? {
          QSTASH_URL: qstash.url,
          QSTASH_TOKEN: DEV_TOKEN,
          QSTASH_CURRENT_SIGNING_KEY: DEV_SIGNING_KEYS.current,
          QSTASH_NEXT_SIGNING_KEY: DEV_SIGNING_KEYS.next,
        }
      : {}),
    ...(s.redisRest
      ? {
          UPSTASH_REDIS_REST_URL: s.redisRest.url,
          UPSTASH_REDIS_REST_TOKEN: LOCAL_VALUES.redisToken,
        }
      : {}),
    ...(s.openai
      ? {
          OPENAI_API_KEY: LOCAL_VALUES.openaiKey,
          OPENAI_BASE_URL: s.openai.url,
        }
      : {}),
    // the app's own, whichever model it calls: a real endpoint tried locally gets identifiers too
    OPENAI_SAFETY_IDENTIFIER_KEY: LOCAL_VALUES.safetyIdentifierKey,
    OPENAI_MODEL: "gpt-5.4-mini",
    APP_URL: o.appUrl,
    // dev only: the app server passes the page's /auth/v1 calls to the project's Auth
    DEV_AUTH_URL: s.postgrest.url,
    CRON_SECRET: LOCAL_VALUES.cronSecret,
    ...(s.alerts ? { ALERT_WEBHOOK_URL: s.alerts.url } : {}),
    ...(s.traces ? { OTEL_EXPORTER_OTLP_ENDPOINT: s.traces.url } : {}),
    ...o.userEnv,
  };
}
