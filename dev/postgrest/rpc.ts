/**
 * One RPC call as PostgREST serves it: the path, method, schema and arguments checked, the
 * caller authenticated, the function picked, then one transaction with the request's settings.
 */
import type { IncomingHttpHeaders } from "node:http";
import type pg from "pg";
import { type AuthConfig, authenticate, type RequestAuth } from "./auth.ts";
import type { createCatalog } from "./catalog.ts";
import { fromDatabaseError, pgrstError } from "./errors.ts";
import { applyResponseGucs, type Reply, shape } from "./http.ts";
import {
  type Answer,
  checkMaxAffected,
  negotiate,
  type Preferences,
  preferences,
} from "./negotiate.ts";
import { buildCall, pickRoutine } from "./routines.ts";

/** What every call of one stand-in shares. */
export interface Context {
  pool: pg.Pool;
  auth: AuthConfig;
  catalog: ReturnType<typeof createCatalog>;
  schemas: string[];
  counts: { rpcCalls: number };
}

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

/** One call's method, path and headers (as node:http lists them, for the request.headers GUC). */
interface Call {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
}

async function run(
  ctx: Context,
  req: Call,
  who: RequestAuth,
  picked: ReturnType<typeof pickRoutine>,
  args: unknown,
  answer: Answer,
  prefs: Preferences,
): Promise<Reply> {
  const { auth, catalog, pool } = ctx;
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
    // One round trip: begin, every transaction-local setting and the call, values escaped as
    // literals (the simple protocol, three statements). The commit is a second one, sent only
    // after the checks below passed (max-affected, the response GUCs: a failure rolls back).
    // The connection is held across each round trip, which waits on this process's event loop:
    // under the load test, two instead of three held it 23-28 ms instead of 30-31 (p50).
    const call = buildCall(picked, args, lit);
    const results = (await client.query(
      `begin isolation level read committed${readOnly ? " read only" : ""};
       select ${gucs.map(([k, v]) => `pg_catalog.set_config(${lit(k)}, ${lit(v)}, true)`).join(", ")};
       ${call.text}`,
    )) as unknown as pg.QueryResult<{
      body: string | null;
      n: number;
      status: string | null;
      headers: string | null;
    }>[];
    const row = results.at(-1)?.rows[0];
    checkMaxAffected(prefs, row?.n ?? 0);
    const reply = shape(picked.routine, req.headers, row?.body ?? null, row?.n ?? 0, answer, prefs);
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

export async function handle(ctx: Context, request: Request): Promise<Reply> {
  const { auth, catalog, schemas } = ctx;
  const url = new URL(request.url);
  const match = /^\/rest\/v1\/rpc\/([^/]+)$/.exec(url.pathname);
  if (!match?.[1])
    throw pgrstError(
      404,
      "PGRST125",
      "Invalid path specified in request URL",
      "this local stand-in serves only /rest/v1/rpc/:fn",
    );
  ctx.counts.rpcCalls++;
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
  return run(ctx, req, who, picked, args, answer, preferences(req.headers, picked.routine));
}
