/** Ports for the local stack: a free one for tests, and a clear refusal when one is taken. */
import { createServer } from "node:net";

export type StackPart =
  | "app"
  | "postgres"
  | "supabase"
  | "qstash"
  | "redisRest"
  | "redisServer"
  | "openai"
  | "alerts"
  | "traces"
  | "mail";

/** The design's ports (docs/DESIGN.md#local-stack); redis-server and the alert receiver are ours to pick. */
export const DEFAULT_PORTS: Record<StackPart, number> = {
  app: 3000,
  postgres: 54322,
  supabase: 54321,
  qstash: 8080,
  redisRest: 8079,
  redisServer: 6390,
  openai: 8787,
  alerts: 8790,
  // OTLP/HTTP's registered port: the app's spans (dev/otlp-receiver.ts).
  traces: 4318,
  mail: 54324,
};

/** Every part on a port the OS picks (tests and benchmarks run beside a running `npm run dev`). */
export const ANY_FREE_PORTS: Record<StackPart, number> = {
  app: 0,
  postgres: 0,
  supabase: 0,
  qstash: 0,
  redisRest: 0,
  redisServer: 0,
  openai: 0,
  alerts: 0,
  traces: 0,
  mail: 0,
};

/** A TCP port on loopback that nothing listens on right now. */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on("error", reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === "object") resolve(address.port);
        else reject(new Error("no free port"));
      });
    });
  });
}

/**
 * A free port BELOW Linux's ephemeral range (32768-60999), for a server we start a moment
 * later: a port from `listen(0)` comes from that range, where any outgoing connection made
 * meanwhile (a pool, a fetch) may take it first.
 */
export async function pickPort(taken: ReadonlySet<number> = new Set()): Promise<number> {
  for (let i = 0; i < 200; i++) {
    const port = 15_000 + Math.floor(Math.random() * 17_000);
    if (!taken.has(port) && (await portIsFree(port))) return port;
  }
  return freePort();
}

/** Resolves true when `port` can be listened on at `host` now. */
export function portIsFree(port: number, host = "127.0.0.1"): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen({ port, host, exclusive: true }, () => server.close(() => resolve(true)));
  });
}
