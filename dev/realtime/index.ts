/**
 * A local stand-in for Supabase Realtime's Broadcast, so `@supabase/realtime-js` (through
 * supabase-js) runs unchanged against the local stack. Mounted by the PostgREST stand-in on the
 * project's origin under `/realtime/v1`, as the Supabase gateway serves it:
 *
 * - `GET /realtime/v1/websocket?apikey=…&vsn=1.0.0|2.0.0`: the Phoenix channel protocol
 *   (wire.ts, channels.ts). The apikey is checked as the gateway checks it (an `sb_` key, or one
 *   of the project's JWT keys) and then as Realtime does (`role` and `exp`); a refusal is the
 *   handshake's HTTP answer, before any upgrade.
 * - `POST /realtime/v1/api/broadcast`: a batch of messages (rest.ts).
 * - Broadcast from the database: `realtime.send` inserts into `realtime.messages`, which the
 *   stand-in reads as Realtime does, by logical decoding (replication.ts): each committed row
 *   goes to the joined channels of its topic, in commit order; a rolled-back one never.
 */
import { type IncomingMessage, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import type { JWK } from "jose";
import pg from "pg";
import { WebSocketServer } from "ws";
import { type AuthConfig, gatewayKey, legacyGatewayKey } from "../postgrest/auth.ts";
import { PgrstError } from "../postgrest/errors.ts";
import { type Channel, Connection, type Delivery, type Hub, hubKey } from "./channels.ts";
import { maintainMessagePartitions } from "./partitions.ts";
import { ensurePublication, streamMessages } from "./replication.ts";
import { handleRest } from "./rest.ts";
import { type Claims, TokenError, verifyRealtimeToken } from "./tokens.ts";
import { VSNS, type Vsn } from "./wire.ts";

export interface RealtimeOptions {
  databaseUrl: string;
  jwtSecret: string;
  /** The project's server key: a legacy service_role JWT, or an `sb_secret_…` key. */
  serviceRoleKey: string;
  /** The browser key: a legacy anon JWT, or an `sb_publishable_…` key. */
  anonKey?: string;
  /** The project's asymmetric signing keys (the Auth stand-in's JWKS). */
  jwks?: { keys: JWK[] };
  /** @default 5 */
  poolMax?: number;
  log?: (line: string) => void;
}

export interface RealtimeStandIn {
  /** Answers an HTTP request under `/realtime/v1` (the REST API). */
  handle(request: Request): Promise<Response>;
  /** Takes a websocket handshake for `/realtime/v1/websocket`. */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void;
  stats(): { sockets: number; channels: number; fromDatabase: number };
  /**
   * An outage, for tests: `down(true)` drops every socket and answers each handshake 503 (what a
   * client meets while Realtime is unreachable behind the gateway) until `down(false)`.
   */
  down(on: boolean): void;
  close(): Promise<void>;
}

const TEN_YEARS = 10 * 365 * 24 * 3600;

export async function startRealtime(options: RealtimeOptions): Promise<RealtimeStandIn> {
  const log = options.log ?? (() => {});
  const keys = [options.serviceRoleKey, ...(options.anonKey ? [options.anonKey] : [])];
  const auth: AuthConfig = {
    secret: new TextEncoder().encode(options.jwtSecret),
    ...(options.jwks ? { jwks: options.jwks } : {}),
    apiKeys: new Set(keys.filter((k) => !k.startsWith("sb_"))),
    secretKeys: new Set(keys.filter((k) => k.startsWith("sb_secret_"))),
    publishableKeys: new Set(keys.filter((k) => k.startsWith("sb_publishable_"))),
    anonRole: "anon",
  };
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: options.poolMax ?? 5 });
  pool.on("error", () => {});
  await maintainMessagePartitions(pool);
  // As Realtime's janitor does: tomorrow's partitions exist before tomorrow.
  const janitor = setInterval(() => {
    maintainMessagePartitions(pool).catch((e: Error) =>
      log(`realtime stand-in: partitions: ${e.message}`),
    );
  }, 3_600_000);
  janitor.unref();

  const subscribers = new Map<string, Set<Channel>>();
  const hub: Hub = {
    pool,
    auth,
    log,
    add(channel) {
      const key = hubKey(channel.private, channel.sub);
      const set = subscribers.get(key) ?? new Set();
      set.add(channel);
      subscribers.set(key, set);
    },
    remove(channel) {
      const key = hubKey(channel.private, channel.sub);
      subscribers.get(key)?.delete(channel);
      if (subscribers.get(key)?.size === 0) subscribers.delete(key);
    },
    deliver(key, delivery: Delivery, except?: Channel) {
      for (const channel of subscribers.get(key) ?? []) {
        if (channel === except) continue;
        // A private channel joined on presence's read policy alone hears no broadcast.
        if (channel.private && channel.read?.broadcast !== true) continue;
        channel.conn.deliver(channel, delivery);
      }
    },
  };

  // Streaming from the slot before the stand-in is ready: what commits after this is heard.
  const fromDatabase = await fromTheDatabase(options.databaseUrl, pool, hub, log).catch(
    async (e: unknown) => {
      clearInterval(janitor);
      await pool.end();
      throw e;
    },
  );

  const wss = new WebSocketServer({ noServer: true });
  const connections = new Set<Connection>();

  /** The gateway's apikey check, then Realtime's `UserSocket.connect`. */
  async function socketToken(
    request: IncomingMessage,
    apikey: string | undefined,
  ): Promise<{ token: string; claims: Claims }> {
    if (apikey === undefined) throw new Refusal(401, { error: "API key is missing" });
    if (apikey.startsWith("sb_")) {
      const role = gatewayKey(request.headers, apikey, auth);
      const iat = Math.floor(Date.now() / 1000);
      // The gateway passes Realtime a token of the key's role in place of the key.
      return { token: apikey, claims: { iss: "supabase", role, iat, exp: iat + TEN_YEARS } };
    }
    await legacyGatewayKey(apikey, auth);
    return { token: apikey, claims: await verifyRealtimeToken(apikey, auth) };
  }

  let isDown = false;

  function upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (isDown) {
      refuse(socket, new Refusal(503, { message: "Service Unavailable" }));
      return;
    }
    const url = new URL(request.url ?? "/", "http://localhost");
    if (url.pathname !== "/realtime/v1/websocket") {
      refuse(socket, new Refusal(404, { error: "Not Found" }));
      return;
    }
    const vsn = (url.searchParams.get("vsn") ?? "1.0.0") as Vsn;
    if (!VSNS.includes(vsn)) {
      refuse(
        socket,
        new Refusal(403, {
          error: `The client's requested transport version "${vsn}" does not match server's version requirements of "~> 2.0.0 or ~> 1.0.0"`,
        }),
      );
      return;
    }
    const apikey = url.searchParams.get("apikey") ?? header(request, "x-api-key");
    socketToken(request, apikey).then(
      (token) =>
        wss.handleUpgrade(request, socket, head, (ws) => {
          const conn = new Connection(ws, vsn, token, headersOf(request), hub);
          connections.add(conn);
          ws.on("close", () => connections.delete(conn));
        }),
      (err: unknown) => refuse(socket, toRefusal(err)),
    );
  }

  return {
    handle: async (request) =>
      isDown
        ? Response.json({ message: "Service Unavailable" }, { status: 503 })
        : handleRest(request, { hub, auth }),
    upgrade,
    stats: () => ({
      sockets: connections.size,
      channels: [...subscribers.values()].reduce((n, s) => n + s.size, 0),
      fromDatabase: fromDatabase.count(),
    }),
    down(on) {
      isDown = on;
      if (on) for (const ws of wss.clients) ws.terminate();
    },
    async close() {
      clearInterval(janitor);
      for (const ws of wss.clients) ws.terminate();
      wss.close();
      await fromDatabase.stop();
      await pool.end();
    },
  };
}

/** A handshake refused with this status and JSON body. */
class Refusal {
  constructor(
    readonly status: number,
    readonly body: unknown,
  ) {}
}

function toRefusal(err: unknown): Refusal {
  if (err instanceof Refusal) return err;
  if (err instanceof PgrstError) return new Refusal(err.status, err.body);
  if (err instanceof TokenError) return new Refusal(401, { error: err.handshake });
  return new Refusal(500, { error: "Error connecting to Realtime" });
}

function refuse(socket: Duplex, refusal: Refusal): void {
  const body = JSON.stringify(refusal.body);
  socket.end(
    `HTTP/1.1 ${refusal.status} ${STATUS_CODES[refusal.status] ?? ""}\r\n` +
      "content-type: application/json; charset=utf-8\r\n" +
      `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

function header(request: IncomingMessage, name: string): string | undefined {
  const v = request.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function headersOf(request: IncomingMessage): Record<string, string> {
  return Object.fromEntries(
    Object.entries(request.headers).map(([k, v]) => [
      k,
      Array.isArray(v) ? v.join(", ") : (v ?? ""),
    ]),
  );
}

/**
 * Broadcast from the database: the committed broadcast rows of `realtime.messages`, decoded from
 * the WAL (replication.ts), go to the joined channels of their topic in commit order.
 */
async function fromTheDatabase(
  databaseUrl: string,
  pool: pg.Pool,
  hub: Hub,
  log: (line: string) => void,
): Promise<{ count(): number; stop(): Promise<void> }> {
  await ensurePublication(pool);
  let delivered = 0;
  const stream = await streamMessages({
    databaseUrl,
    log,
    deliver(row) {
      // Realtime skips a row without an event or a payload (UnableToBroadcastChanges).
      if (row.event === null || (row.payload === null && row.binaryPayload === null)) return;
      delivered++;
      hub.deliver(hubKey(row.private, row.topic), {
        kind: "user",
        broadcast: {
          event: row.event,
          encoding: row.binaryPayload ? "binary" : "json",
          body: row.binaryPayload ?? Buffer.from(row.payload ?? "null"),
        },
        meta: { id: row.id },
      });
    },
  });
  return { count: () => delivered, stop: () => stream.stop() };
}
