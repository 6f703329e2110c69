/**
 * What the stack checks and decides before anything starts, so a problem is one line: which
 * parts are stand-ins, that their programs are installed, their ports, the data folder.
 */
import { spawnSync } from "node:child_process";
import { chmod, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { DEFAULT_PORTS, pickPort, portIsFree, type StackPart } from "../ports.ts";
import { root } from "../postgres/migrate.ts";

/** A start-up problem the user can fix; its message is one line. */
export class StackStartError extends Error {
  override readonly name = "StackStartError";
}

export type StandIns = {
  openai: boolean;
  qstash: boolean;
  redis: boolean;
  alerts: boolean;
  /** The trace receiver: asked for, and no collector named by OTEL_EXPORTER_OTLP_*. */
  traces: boolean;
};
export type Ports = Record<StackPart, number>;

const PART_NAMES: Record<StackPart, string> = {
  app: "the app",
  postgres: "PostgreSQL",
  supabase: "the Supabase REST stand-in",
  qstash: "the QStash stand-in",
  redisRest: "the Upstash Redis REST stand-in",
  redisServer: "redis-server",
  openai: "the fake OpenAI model",
  alerts: "the alert receiver",
  traces: "the trace receiver",
  mail: "the local mailbox",
};

/** Variables that name a real service; when set, that service's stand-in is not started. */
const REAL = {
  openai: "OPENAI_API_KEY",
  qstash: "QSTASH_TOKEN",
  redis: "UPSTASH_REDIS_REST_URL",
  alerts: "ALERT_WEBHOOK_URL",
} as const;

export function whichStandIns(userEnv: Record<string, string>, traces = false): StandIns {
  return {
    traces:
      traces && !userEnv.OTEL_EXPORTER_OTLP_ENDPOINT && !userEnv.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    openai: !userEnv[REAL.openai],
    qstash: !userEnv[REAL.qstash],
    redis: !userEnv[REAL.redis],
    alerts: !userEnv[REAL.alerts],
  };
}

export function checkPrograms(standIns: StandIns): void {
  if (!standIns.redis) return;
  const probe = spawnSync("redis-server", ["--version"], { stdio: "ignore" });
  if (probe.error) {
    throw new StackStartError(
      'redis-server is not installed: run "apt-get install -y redis-server" (Debian/Ubuntu), or set UPSTASH_REDIS_REST_URL and UPSTASH_REDIS_REST_TOKEN to use a real Upstash database',
    );
  }
}

/** The ports of the parts that will run: asked, the design's default, or any free one for 0. */
export async function assignPorts(
  standIns: StandIns,
  asked: Partial<Record<StackPart, number>> = {},
): Promise<Ports> {
  const wanted: StackPart[] = [
    "app",
    "postgres",
    "supabase",
    "mail",
    ...(standIns.qstash ? (["qstash"] as const) : []),
    ...(standIns.redis ? (["redisRest", "redisServer"] as const) : []),
    ...(standIns.openai ? (["openai"] as const) : []),
    ...(standIns.alerts ? (["alerts"] as const) : []),
    ...(standIns.traces ? (["traces"] as const) : []),
  ];
  const ports = {} as Ports;
  for (const part of wanted) {
    const port = asked[part] ?? DEFAULT_PORTS[part];
    ports[part] = port === 0 ? await pickPort(new Set(Object.values(ports))) : port;
  }
  for (const part of wanted) {
    if (asked[part] === 0) continue;
    if (!(await portIsFree(ports[part]))) {
      throw new StackStartError(
        `port ${ports[part]} (${PART_NAMES[part]}) is already in use on 127.0.0.1: is another "npm run dev" running? Stop it or free the port.`,
      );
    }
  }
  return ports;
}

/** The data folder, made if missing. */
export async function prepareDataDir(dataDir = join(root, ".data")): Promise<string> {
  await mkdir(dataDir, { recursive: true });
  // Postgres runs as its own OS user when we are root: it must be able to enter the folder
  // (mkdtemp makes 0700 folders).
  await chmod(dataDir, 0o755);
  return dataDir;
}
