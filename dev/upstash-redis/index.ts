/**
 * A stand-in for Upstash Redis's REST API in front of a real `redis-server`, so
 * `new Redis({ url, token })` from @upstash/redis and @upstash/ratelimit run unchanged.
 *
 * Speaks what the SDK sends (as @upstash/redis and Upstash's REST API docs describe it): `POST /` with one command,
 * `POST /pipeline` (entries `{result}` / `{error}` in a 200 array), `POST /multi-exec` (MULTI …
 * EXEC on a connection of its own), bearer token, `Upstash-Encoding: base64`, and an
 * `upstash-sync-token` header. One Redis primary means every read sees every earlier write, so
 * the sync token is a counter with no other meaning.
 */
import { Redis } from "ioredis";
import { serve } from "../http/serve.ts";
import {
  encodeResult,
  isRedisReplyError,
  parseCommand,
  parseCommands,
  type WireCommand,
  WireFormatError,
} from "./encoding.ts";
import { ScriptTranslator } from "./scripts.ts";

export interface UpstashRedisOptions {
  port: number;
  /** `redis://127.0.0.1:6379` */
  redisUrl: string;
  token: string;
  /** @default "127.0.0.1" */
  host?: string;
}

export interface RunningUpstashRedis {
  /** `http://127.0.0.1:<port>`, the UPSTASH_REDIS_REST_URL */
  url: string;
  close(): Promise<void>;
}

/** A failure that reaches the client as `{"error": message}` with this status. */
class RestError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

const connectionOptions = {
  lazyConnect: true,
  protocol: 2 as const, // Upstash answers in RESP2 terms (ZSCORE is a string, maps are flat)
  enableOfflineQueue: false, // unreachable Redis: fail now (500), do not queue
  maxRetriesPerRequest: 0,
  autoResendUnfulfilledCommands: false, // never run an INCR twice after a reconnect
  connectTimeout: 2_000,
};

export async function startUpstashRedis(
  options: UpstashRedisOptions,
): Promise<RunningUpstashRedis> {
  const host = options.host ?? "127.0.0.1";
  const redis = new Redis(options.redisUrl, connectionOptions);
  redis.on("error", () => {}); // surfaced per request as a 500
  try {
    await redis.connect();
  } catch (error) {
    redis.disconnect();
    throw new Error(
      `Upstash Redis stand-in: cannot reach ${options.redisUrl}: ${(error as Error).message}`,
    );
  }
  let syncToken = 0;
  const scripts = new ScriptTranslator();

  /** One request's answer; every answer after the sync token is taken carries it. */
  async function handle(request: Request, headers: Record<string, string>): Promise<unknown> {
    if (request.method !== "POST") throw new RestError("Method not allowed", 405);
    // Upstash takes the token as a bearer or, as its REST docs show, as the `_token` parameter.
    const url = new URL(request.url);
    const bearer = request.headers.get("authorization");
    const token = bearer === null ? url.searchParams.get("_token") : bearer.replace(/^Bearer /, "");
    if (token !== options.token) throw new RestError("Unauthorized", 401);
    const path = url.pathname.replace(/\/+$/, "") || "/";
    if (path !== "/" && path !== "/pipeline" && path !== "/multi-exec") {
      throw new RestError(
        `ERR unknown endpoint '${path}' (this stand-in only serves /, /pipeline, /multi-exec)`,
        404,
      );
    }
    const body = parseJson(await request.text());
    const base64 = (request.headers.get("upstash-encoding") ?? "").toLowerCase() === "base64";
    syncToken += 1;
    headers["upstash-sync-token"] = String(syncToken);

    if (path === "/") {
      const { command, reply } = scripts.translate(parseOrReject(() => parseCommand(body)));
      await ready(redis);
      const result = await redis.callBuffer(command.name, ...command.args);
      return { result: encodeResult(reply(result), base64) };
    }
    const translated = parseOrReject(() => parseCommands(body)).map((command) =>
      scripts.translate(command),
    );
    const commands = translated.map(({ command }) => command);
    const entries =
      path === "/pipeline"
        ? await runPipeline(redis, commands)
        : await runTransaction(redis, commands);
    return entries.map(([error, result], i) =>
      error
        ? { error: error.message }
        : { result: encodeResult(translated[i]?.reply(result), base64) },
    );
  }

  const server = await serve(
    async (request) => {
      const headers: Record<string, string> = {};
      try {
        return json(200, await handle(request, headers), headers);
      } catch (error) {
        const status =
          error instanceof RestError ? error.status : isRedisReplyError(error) ? 400 : 500;
        return json(status, { error: (error as Error).message }, headers);
      }
    },
    { port: options.port, host, name: "Upstash Redis stand-in" },
  ).catch((error: unknown) => {
    redis.disconnect();
    throw error;
  });

  return {
    url: server.url,
    close: async () => {
      await server.close();
      redis.disconnect();
    },
  };
}

type Entry = [Error | null, unknown];

async function runPipeline(redis: Redis, commands: WireCommand[]): Promise<Entry[]> {
  await ready(redis);
  const pipeline = redis.pipeline();
  for (const command of commands) pipeline.callBuffer(command.name, ...command.args);
  return transportChecked((await pipeline.exec()) ?? []);
}

/** MULTI … EXEC on a connection of its own, so no other request's command lands inside. */
async function runTransaction(redis: Redis, commands: WireCommand[]): Promise<Entry[]> {
  const connection = redis.duplicate({ ...connectionOptions, retryStrategy: () => null });
  connection.on("error", () => {});
  try {
    await connection.connect().catch((error: Error) => {
      throw new RestError(`ERR Redis is unreachable: ${error.message}`, 500);
    });
    const transaction = connection.multi();
    for (const command of commands) transaction.callBuffer(command.name, ...command.args);
    // A command rejected while queueing aborts the whole transaction: EXECABORT → 400.
    const results = await transaction.exec();
    if (!results) throw new RestError("ERR transaction aborted", 400);
    return transportChecked(results);
  } finally {
    connection.disconnect();
  }
}

function transportChecked(entries: Entry[]): Entry[] {
  const failure = entries.find(([error]) => error && !isRedisReplyError(error));
  if (failure?.[0]) throw new RestError(`ERR Redis is unreachable: ${failure[0].message}`, 500);
  return entries;
}

/** Waits briefly for a (re)connecting client; a Redis that stays away is a 500. */
async function ready(redis: Redis): Promise<void> {
  const isReady = () => redis.status === "ready";
  const deadline = Date.now() + 1_000;
  while (!isReady()) {
    if (Date.now() > deadline)
      throw new RestError(`ERR Redis is unreachable (connection ${redis.status})`, 500);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

function parseOrReject<T>(parse: () => T): T {
  try {
    return parse();
  } catch (error) {
    if (error instanceof WireFormatError) throw new RestError(error.message, 400);
    throw error;
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new RestError("ERR failed to parse the request body as JSON", 400);
  }
}

function json(status: number, body: unknown, headers: Record<string, string>): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}
