/**
 * A local stand-in for Supabase's PostgREST RPC endpoint (`/rest/v1/rpc/:fn`) in front of a
 * real PostgreSQL, so `@supabase/supabase-js` runs unchanged. Each call is one transaction:
 * the JWT's claims and role are set transaction-locally (as PostgREST does), the function is
 * called with named arguments, and the result and errors come back in PostgREST's shapes.
 * Table endpoints, filters and embedding are out of scope (this app talks to its database
 * only through functions) and are refused, never ignored: README.md, "What the stand-ins serve".
 */
import type { IncomingHttpHeaders } from "node:http";
import pg from "pg";
import { serve } from "../http/serve.ts";
import type { RealtimeStandIn } from "../realtime/index.ts";
import { type AuthConfig, authenticate, type RequestAuth } from "./auth.ts";
import { createCatalog } from "./catalog.ts";
import { fromDatabaseError, PgrstError, pgrstError } from "./errors.ts";
import { applyResponseGucs, JSON_TYPE, type Reply, shape, toResponse } from "./http.ts";
import {
  type Answer,
  checkMaxAffected,
  negotiate,
  type Preferences,
  preferences,
} from "./negotiate.ts";
import { buildCall, pickRoutine } from "./routines.ts";

export { mintAnonKey, mintServiceRoleKey } from "./auth.ts";

/** Query parameters PostgREST reserves for shaping a result rather than passing arguments. */
const RESERVED = new Set([
  "select",
  "order",
  "limit",
  "offset",
  "and",
  "or",
  "on_conflict",
  "columns",
]);
/** A `key=op.value` filter (`?id=eq.1`, `?tag=not.in.(a,b)`), as PostgREST parses one. */
const FILTER =
  /^(not\.)?(eq|neq|gt|gte|lt|lte|like|ilike|match|imatch|in|is|isdistinct|fts|plfts|phfts|wfts|cs|cd|ov|sl|sr|nxr|nxl|adj)(\(\w+\))?\./;

/**
 * PostgREST filters, selects, orders and pages a function's result from the query string
 * (`.select()`, `.eq()`, `.limit()` in supabase-js). The stand-in does none of it, so it
 * refuses such a request instead of answering the whole, unshaped result.
 */
function refuseResultShaping(query: URLSearchParams, method: string): void {
  const shaping = [...query].filter(
    ([key, value]) => method === "POST" || RESERVED.has(key) || FILTER.test(value),
  );
  if (shaping.length === 0) return;
  throw pgrstError(
    501,
    "PGRSTX01",
    `Filtering, selecting, ordering or paging a result is not supported by this local stand-in: ${shaping
      .map(([k, v]) => `${k}=${v}`)
      .join("&")}`,
    null,
    "Call the function with its arguments only; shape the result in SQL.",
  );
}

export interface PostgrestOptions {
  port: number;
  databaseUrl: string;
  jwtSecret: string;
  /** The project's server key: a legacy service_role JWT, or an `sb_secret_…` key. */
  serviceRoleKey: string;
  /** The browser key: a legacy anon JWT, or an `sb_publishable_…` key. */
  anonKey?: string;
  /**
   * The Auth stand-in (dev/auth/): served under `/auth/v1` on this origin, as the Supabase
   * gateway serves both, and its JWKS verifies asymmetric user tokens.
   */
  auth?: { jwks(): { keys: import("jose").JWK[] }; handle(request: Request): Promise<Response> };
  /** The Realtime stand-in (dev/realtime/): served under `/realtime/v1` on this origin, websocket included. */
  realtime?: Pick<RealtimeStandIn, "handle" | "upgrade">;
  /** Schemas a client may pick with Content-Profile/Accept-Profile. @default ["public", "graphql_public"] */
  schemas?: string[];
  /** @default 10 */
  poolMax?: number;
  /** How long a request waits for a pooled connection before 504 PGRST003. @default 10_000 */
  poolAcquireTimeoutMs?: number;
  /** How long function signatures and role settings are cached. @default 1_000 */
  schemaCacheTtlMs?: number;
}

export interface RunningPostgrest {
  url: string;
  close(): Promise<void>;
  stats(): { rpcCalls: number };
}

/**
 * Serves `/rest/v1/rpc/:fn` on 127.0.0.1:`port` against `databaseUrl`.
 * @example
 * const rest = await startPostgrest({ port: 54321, databaseUrl, jwtSecret, serviceRoleKey });
 * const { error, data } = await createClient(rest.url, serviceRoleKey).rpc("fn", { p_a: 1 });
 */
export async function startPostgrest(options: PostgrestOptions): Promise<RunningPostgrest> {
  const pool = new pg.Pool({
    connectionString: options.databaseUrl,
    max: options.poolMax ?? 10,
    connectionTimeoutMillis: options.poolAcquireTimeoutMs ?? 10_000,
  });
  pool.on("error", () => {}); // an idle connection died; the pool replaces it
  const keys = [options.serviceRoleKey, ...(options.anonKey ? [options.anonKey] : [])];
  const auth: AuthConfig = {
    secret: new TextEncoder().encode(options.jwtSecret),
    ...(options.auth ? { jwks: options.auth.jwks() } : {}),
    apiKeys: new Set(keys.filter((k) => !k.startsWith("sb_"))),
    secretKeys: new Set(keys.filter((k) => k.startsWith("sb_secret_"))),
    publishableKeys: new Set(keys.filter((k) => k.startsWith("sb_publishable_"))),
    anonRole: "anon",
  };
  const schemas = options.schemas ?? ["public", "graphql_public"];
  const catalog = createCatalog(pool, options.schemaCacheTtlMs ?? 1_000);
  let rpcCalls = 0;

  /** One call's method, path and headers (as node:http lists them, for the request.headers GUC). */
  interface Call {
    method: string;
    path: string;
    headers: IncomingHttpHeaders;
  }

  async function run(
    req: Call,
    who: RequestAuth,
    picked: ReturnType<typeof pickRoutine>,
    args: unknown,
    answer: Answer,
    prefs: Preferences,
  ): Promise<Reply> {
    const authed = who.role !== auth.anonRole;
    const readOnly = req.method !== "POST";
    const settings =
      (
        await catalog
          .roleSettings()
          .catch((e: unknown) => Promise.reject(fromDatabaseError(e, authed, "connect")))
      ).get(who.role) ?? [];
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (err) {
      throw fromDatabaseError(err, authed, "connect");
    }
    let broken: Error | undefined;
    try {
      const lit = (s: string) => client.escapeLiteral(s);
      const gucs: [string, string][] = [
        ["role", who.role],
        ["request.jwt.claims", JSON.stringify(who.claims)],
        ["request.method", req.method],
        ["request.path", req.path.replace(/^\/rest\/v1/, "")],
        ["request.headers", JSON.stringify(req.headers)],
        ["request.cookies", "{}"],
        ...settings,
      ];
      // One round trip: begin and every transaction-local setting, values escaped as literals.
      await client.query(
        `begin isolation level read committed${readOnly ? " read only" : ""};
         select ${gucs.map(([k, v]) => `pg_catalog.set_config(${lit(k)}, ${lit(v)}, true)`).join(", ")}`,
      );
      const call = buildCall(picked, args);
      const { rows } = await client.query<{
        body: string | null;
        n: number;
        status: string | null;
        headers: string | null;
      }>(call.text, call.values);
      const row = rows[0];
      checkMaxAffected(prefs, row?.n ?? 0);
      const reply = shape(
        picked.routine,
        req.headers,
        row?.body ?? null,
        row?.n ?? 0,
        answer,
        prefs,
      );
      applyResponseGucs(reply, row?.status ?? null, row?.headers ?? null);
      await client.query("commit");
      return reply;
    } catch (err) {
      await client.query("rollback").catch((e: Error) => {
        broken = e;
      });
      throw fromDatabaseError(err, authed, "session");
    } finally {
      client.release(broken);
    }
  }

  async function handle(request: Request): Promise<Reply> {
    const url = new URL(request.url);
    const match = /^\/rest\/v1\/rpc\/([^/]+)$/.exec(url.pathname);
    if (!match?.[1])
      throw pgrstError(
        404,
        "PGRST125",
        "Invalid path specified in request URL",
        "this local stand-in serves only /rest/v1/rpc/:fn",
      );
    rpcCalls++;
    const name = decodeURIComponent(match[1]);
    const method = request.method;
    const req: Call = { method, path: url.pathname, headers: Object.fromEntries(request.headers) };
    if (!["GET", "HEAD", "POST"].includes(method))
      throw pgrstError(405, "PGRST101", `Cannot use the ${method} method on RPC`);
    refuseResultShaping(url.searchParams, method);
    const raw = await request.text();
    const who = await authenticate(req.headers, auth);
    const profile = req.headers[method === "POST" ? "content-profile" : "accept-profile"];
    const schema = (Array.isArray(profile) ? profile[0] : profile) ?? schemas[0] ?? "public";
    if (!schemas.includes(schema))
      throw pgrstError(
        406,
        "PGRST106",
        `Invalid schema: ${schema}`,
        null,
        `Only the following schemas are exposed: ${schemas.join(", ")}`,
      );
    let args: unknown;
    if (method === "POST") {
      try {
        args = raw.trim() === "" ? {} : JSON.parse(raw);
      } catch {
        throw pgrstError(400, "PGRST102", "Empty or invalid json");
      }
    } else {
      args = Object.fromEntries(url.searchParams);
    }
    const keys =
      args && typeof args === "object" && !Array.isArray(args) ? Object.keys(args) : undefined;
    const found = await catalog
      .routines(schema, name)
      .catch((e: unknown) =>
        Promise.reject(fromDatabaseError(e, who.role !== auth.anonRole, "connect")),
      );
    const picked = pickRoutine(schema, name, found, keys, method === "POST");
    // PostgREST's order: the function, then the media type, then the preferences.
    const answer = negotiate(req.headers);
    return run(req, who, picked, args, answer, preferences(req.headers, picked.routine));
  }

  const authStandIn = options.auth;
  const realtime = options.realtime;
  const server = await serve(
    (request) =>
      authStandIn && new URL(request.url).pathname.startsWith("/auth/v1/")
        ? authStandIn.handle(request)
        : realtime && new URL(request.url).pathname.startsWith("/realtime/v1/")
          ? realtime.handle(request)
          : handle(request).then(
              (reply) => toResponse(reply, request.method),
              (err: unknown) => {
                const e =
                  err instanceof PgrstError
                    ? err
                    : pgrstError(500, "PGRSTX00", err instanceof Error ? err.message : String(err));
                const code = typeof e.body.code === "string" ? e.body.code : undefined;
                return toResponse(
                  {
                    status: e.status,
                    body: JSON.stringify(e.body),
                    headers: {
                      "Content-Type": JSON_TYPE,
                      ...(code ? { "Proxy-Status": `PostgREST; error=${code}` } : {}),
                      ...e.headers,
                    },
                    statusText: e.statusText,
                  },
                  request.method,
                );
              },
            ),
    {
      port: options.port,
      name: "PostgREST stand-in",
      ...(realtime ? { onUpgrade: realtime.upgrade } : {}),
    },
  );

  return {
    url: server.url,
    stats: () => ({ rpcCalls }),
    async close() {
      await server.close();
      await pool.end();
    },
  };
}
