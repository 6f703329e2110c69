/**
 * The bench's local stack, in a process of its own so that the bench process's CPU time is the
 * handler's alone: PostgreSQL + the PostgREST, QStash, Upstash Redis and OpenAI stand-ins from
 * dev/, and the api/ handlers served as Web `(Request) => Response` on node:http. Worker and
 * failure-callback deliveries from QStash land in a sink that answers 200 and counts them, so a
 * flow's round trips are not mixed with the next flow's. Prints `READY <json>` on stdout, and
 * shuts everything down on SIGTERM or when stdin closes.
 */
import { serve } from "../../dev/http/serve.ts";
import { startFakeOpenAI } from "../../dev/openai/index.ts";
import { mintServiceRoleKey, startPostgrest } from "../../dev/postgrest/index.ts";
import { DEV_SIGNING_KEYS, DEV_TOKEN, startQStash } from "../../dev/qstash/index.ts";
import { LOCAL_JWT_SECRET } from "../../dev/token.ts";
import { startUpstashRedis } from "../../dev/upstash-redis/index.ts";
import { startRedisServer } from "../../dev/upstash-redis/redis-server.ts";
import { freePort, startBenchDb } from "./pg.ts";

type Handler = (req: Request) => Promise<Response>;

const rateLimit = process.argv[2] ?? "10";

const db = await startBenchDb();
const serviceRoleKey = await mintServiceRoleKey(LOCAL_JWT_SECRET);
const rest = await startPostgrest({
  port: await freePort(),
  databaseUrl: db.url,
  jwtSecret: LOCAL_JWT_SECRET,
  serviceRoleKey,
  poolMax: 20,
});
const redisServer = await startRedisServer({ port: await freePort() });
const redisToken = "bench-redis-token";
const redis = await startUpstashRedis({
  port: await freePort(),
  redisUrl: redisServer.url,
  token: redisToken,
});
const qstash = await startQStash({ port: 0, timeScale: 0.001 });
const openai = await startFakeOpenAI({ port: await freePort() });
const appPort = await freePort();
const appUrl = `http://127.0.0.1:${appPort}`;

const env: Record<string, string> = {
  SUPABASE_URL: rest.url,
  SUPABASE_SERVICE_ROLE_KEY: serviceRoleKey,
  SUPABASE_JWT_SECRET: LOCAL_JWT_SECRET,
  QSTASH_URL: qstash.url,
  QSTASH_TOKEN: DEV_TOKEN,
  QSTASH_CURRENT_SIGNING_KEY: DEV_SIGNING_KEYS.current,
  QSTASH_NEXT_SIGNING_KEY: DEV_SIGNING_KEYS.next,
  UPSTASH_REDIS_REST_URL: redis.url,
  UPSTASH_REDIS_REST_TOKEN: redisToken,
  OPENAI_API_KEY: "sk-bench-local",
  OPENAI_BASE_URL: openai.url,
  OPENAI_MODEL: "gpt-5.4-mini",
  APP_URL: appUrl,
  CRON_SECRET: "bench-cron-secret-0123456789",
  RATE_LIMIT_REQUESTS: rateLimit,
};
Object.assign(process.env, env);
const { setLogSink } = await import("../../lib/log.ts");
setLogSink(() => {});

const load = async (path: string): Promise<Handler> =>
  ((await import(path)) as { default: { fetch: Handler } }).default.fetch;
const routes: [RegExp, Handler][] = [
  [/^\/api\/jobs$/, await load("../../api/jobs/index.ts")],
  [/^\/api\/jobs\/[^/]+$/, await load("../../api/jobs/[id].ts")],
  [/^\/api\/usage$/, await load("../../api/usage.ts")],
  [/^\/api\/health$/, await load("../../api/health.ts")],
  [/^\/api\/cron\/sweep$/, await load("../../api/cron/sweep.ts")],
];
const sink = { worker: 0, dlq: 0 };

/** A plain Request at the app's origin, its body read, as a function would be handed it. */
async function toRequest(request: Request): Promise<Request> {
  const { pathname, search } = new URL(request.url);
  const hasBody = request.method !== "GET" && request.method !== "HEAD";
  return new Request(`${appUrl}${pathname}${search}`, {
    method: request.method,
    headers: request.headers,
    body: hasBody ? await request.arrayBuffer() : null,
  });
}

const json = (body: string) =>
  new Response(body, { headers: { "content-type": "application/json" } });

async function route(request: Request): Promise<Response> {
  const path = new URL(request.url).pathname;
  if (path === "/__bench/stats") {
    return json(
      JSON.stringify({
        rpcCalls: rest.stats().rpcCalls,
        qstash: qstash.stats(),
        modelCalls: openai.calls(),
        sink,
      }),
    );
  }
  if (path === "/api/worker" || path === "/api/dlq") {
    await request.arrayBuffer(); // drain
    sink[path === "/api/worker" ? "worker" : "dlq"]++;
    return json('{"outcome":"bench_sink"}');
  }
  const handler = routes.find(([re]) => re.test(path))?.[1];
  if (!handler) return new Response(null, { status: 404 });
  return handler(await toRequest(request));
}

const app = await serve(route, {
  port: appPort,
  keepAliveTimeout: 30_000,
  onError: (error) => new Response(String(error), { status: 500 }),
});

let stopping = false;
async function shutdown() {
  if (stopping) return;
  stopping = true;
  await Promise.allSettled([
    app.close(),
    rest.close(),
    qstash.close(),
    openai.close(),
    redis.close(),
  ]);
  await Promise.allSettled([redisServer.stop(), db.stop()]);
  process.exit(0);
}
process.on("SIGTERM", () => void shutdown());
process.on("SIGINT", () => void shutdown());
process.stdin.on("end", () => void shutdown());
process.stdin.resume();

process.stdout.write(
  `READY ${JSON.stringify({ env, databaseUrl: db.url, postgres: db.version, appUrl })}\n`,
);
