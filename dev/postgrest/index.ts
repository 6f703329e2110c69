/**
 * A local stand-in for Supabase's PostgREST RPC endpoint (`/rest/v1/rpc/:fn`) in front of a
 * real PostgreSQL, so `@supabase/supabase-js` runs unchanged. Each call is one transaction:
 * the JWT's claims and role are set transaction-locally (as PostgREST does), the function is
 * called with named arguments, and the result and errors come back in PostgREST's shapes.
 * Table endpoints, filters and embedding are out of scope (this app talks to its database
 * only through functions) and are refused, never ignored: README.md, "What the stand-ins serve".
 */
import pg from "pg";
import { serve } from "../http/serve.ts";
import type { RealtimeStandIn } from "../realtime/index.ts";
import type { AuthConfig } from "./auth.ts";
import { createCatalog } from "./catalog.ts";
import { PgrstError, pgrstError } from "./errors.ts";
import { JSON_TYPE, toResponse } from "./http.ts";
import { type Context, handle } from "./rpc.ts";

export { mintAnonKey, mintServiceRoleKey } from "./auth.ts";

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
  const ctx: Context = { pool, auth, catalog, schemas, counts: { rpcCalls: 0 } };

  const authStandIn = options.auth;
  const realtime = options.realtime;
  /** PostgREST's answer to an RPC call, errors as PostgREST words them. */
  const rest = (request: Request) =>
    handle(ctx, request).then(
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
    );
  const server = await serve(
    (request) => {
      const path = new URL(request.url).pathname;
      if (authStandIn && path.startsWith("/auth/v1/")) return authStandIn.handle(request);
      if (realtime && path.startsWith("/realtime/v1/")) return realtime.handle(request);
      return rest(request);
    },
    {
      port: options.port,
      name: "PostgREST stand-in",
      ...(realtime ? { onUpgrade: realtime.upgrade } : {}),
    },
  );

  return {
    url: server.url,
    stats: () => ({ rpcCalls: ctx.counts.rpcCalls }),
    async close() {
      await server.close();
      await pool.end();
    },
  };
}
