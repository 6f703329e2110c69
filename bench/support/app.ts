/**
 * The app in the bench process, wired to the bench stack exactly as a deployment is wired to
 * the real services (config from env → lib/deps.ts), with every api/ handler callable
 * in-process and every outgoing request counted by the service it goes to.
 */
import { randomUUID } from "node:crypto";
import { signDelivery } from "../../dev/qstash/signing.ts";
import { LOCAL_JWT_SECRET, mintUserToken } from "../../dev/token.ts";
import { loadConfig } from "../../lib/config.ts";
import { createDeps, type Deps } from "../../lib/deps.ts";
import { setLogSink } from "../../lib/log.ts";
import type { WorkerDeps } from "../../lib/worker/index.ts";
import { createWorkerDeps } from "../../lib/worker-deps.ts";
import type { BenchStack } from "./stack.ts";

/**
 * Where a request goes. Supabase serves PostgREST and Realtime on one origin: `db` is PostgREST
 * (`/rest/v1/`, what the database answers), `realtime` is Realtime's REST broadcast
 * (`/realtime/v1/`: the worker's pushes of the answer and the view to the page, hints the database
 * never sees).
 */
export type Service = "db" | "realtime" | "qstash" | "redis" | "model" | "other";
export type Counts = Record<Service, number>;
type Handler = (req: Request) => Promise<Response>;

const zero = (): Counts => ({ db: 0, realtime: 0, qstash: 0, redis: 0, model: 0, other: 0 });

export interface BenchApp {
  deps: Deps;
  workerDeps: WorkerDeps;
  handlers: {
    jobs: Handler;
    job: Handler;
    usage: Handler;
    worker: Handler;
    dlq: Handler;
    sweep: Handler;
  };
  /** Requests the bench process has sent so far, by service. */
  sent(): Counts;
  token(userId: string): Promise<string>;
  request(path: string, init?: RequestInit & { token?: string }): Request;
  /** A delivery as the QStash stand-in would sign it. */
  signed(route: "/api/worker" | "/api/dlq", body: unknown): Promise<Request>;
}

let installed: Counts | undefined;

/**
 * Counts every fetch by the service it goes to: its origin, and on Supabase's origin its path
 * (installed once, before any client is built).
 */
function countFetch(env: Record<string, string>): Counts {
  if (installed) return installed;
  const counts = zero();
  const origins: [string, Service][] = [
    [new URL(env.SUPABASE_URL as string).origin, "db"],
    [new URL(env.QSTASH_URL as string).origin, "qstash"],
    [new URL(env.UPSTASH_REDIS_REST_URL as string).origin, "redis"],
    [new URL(env.OPENAI_BASE_URL as string).origin, "model"],
  ];
  const original = globalThis.fetch;
  globalThis.fetch = (input, init) => {
    const url = new URL(input instanceof Request ? input.url : String(input));
    const found = origins.find(([o]) => o === url.origin)?.[1] ?? "other";
    const service = found === "db" && url.pathname.startsWith("/realtime/") ? "realtime" : found;
    counts[service]++;
    return original(input, init);
  };
  installed = counts;
  return counts;
}

export async function createBenchApp(stack: BenchStack): Promise<BenchApp> {
  const counts = countFetch(stack.env);
  setLogSink(() => {}); // lines are still built (their CPU counts), just not written
  const config = loadConfig(stack.env);
  const deps = createDeps(config);
  const workerDeps = createWorkerDeps(deps);
  const h = async (path: string, d: () => unknown): Promise<Handler> =>
    ((await import(path)) as { createHandler(d: () => unknown): Handler }).createHandler(d);
  const handlers = {
    jobs: await h("../../api/jobs/index.ts", () => deps),
    job: await h("../../api/jobs/[id].ts", () => deps),
    usage: await h("../../api/usage.ts", () => deps),
    worker: await h("../../api/worker.ts", () => workerDeps),
    dlq: await h("../../api/dlq.ts", () => deps),
    sweep: await h("../../api/cron/sweep.ts", () => deps),
  };
  const appUrl = config.appUrl;
  return {
    deps,
    workerDeps,
    handlers,
    sent: () => ({ ...counts }),
    token: (userId) =>
      mintUserToken({ secret: LOCAL_JWT_SECRET, userId, issuer: `${config.supabaseUrl}/auth/v1` }),
    request(path, init = {}) {
      const { token, ...rest } = init;
      const headers = new Headers(rest.headers);
      if (token) headers.set("authorization", `Bearer ${token}`);
      if (rest.body) headers.set("content-type", "application/json");
      return new Request(`${appUrl}${path}`, { ...rest, headers });
    },
    async signed(route, body) {
      const raw = new TextEncoder().encode(JSON.stringify(body));
      const url = `${appUrl}${route}`;
      return new Request(url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "upstash-signature": await signDelivery(config.qstashCurrentSigningKey, url, raw),
          "upstash-message-id": `msg_${randomUUID()}`,
          "upstash-retried": "0",
        },
        body: raw,
      });
    },
  };
}

export function diff(after: Counts, before: Counts): Counts {
  const d = zero();
  for (const k of Object.keys(d) as Service[]) d[k] = after[k] - before[k];
  return d;
}
