/**
 * One websocket and its channels, as RealtimeWeb.RealtimeChannel runs them: `phx_join` (the
 * token, then for a private channel the read policies), `phx_leave`, `access_token` (the new
 * token checked and the policies read again, the channel shut down if they no longer let it
 * read), `broadcast` from the client (a private channel's write policy checked once), and the
 * heartbeat on topic `phoenix`. Messages of one socket are handled in order, one at a time, as
 * a Phoenix socket process does. Presence and Postgres Changes are not served: a join asking for
 * Postgres Changes, and a presence push, are refused in words, never ignored.
 */
import type pg from "pg";
import type WebSocket from "ws";
import type { AuthConfig } from "../postgrest/auth.ts";
import {
  type AuthorizationContext,
  AuthorizationError,
  canWrite,
  type Extension,
  readPermissions,
} from "./authorize.ts";
import { type Claims, TokenError, verifyRealtimeToken } from "./tokens.ts";
import {
  decode,
  encodeMessage,
  encodeReply,
  encodeUserBroadcast,
  type Inbound,
  type UserBroadcast,
  type Vsn,
} from "./wire.ts";

/** What a broadcast carries to a channel: a JSON broadcast payload, or a user broadcast. */
export type Delivery =
  | { kind: "json"; payload: unknown }
  | { kind: "user"; broadcast: UserBroadcast; meta?: Record<string, unknown> };

export interface Channel {
  conn: Connection;
  /** `realtime:<sub>`, as joined. */
  topic: string;
  sub: string;
  joinRef: string | null;
  private: boolean;
  self: boolean;
  ack: boolean;
  presence: boolean;
  /** The token the channel runs as (the socket's own when the join named none, or an `sb_` key). */
  token: string;
  claims: Claims;
  read?: Record<Extension, boolean | undefined>;
  write?: boolean;
  timer?: NodeJS.Timeout;
}

/** Which channels a broadcast reaches: private and public topics of one name are apart. */
export const hubKey = (isPrivate: boolean, sub: string) =>
  `${isPrivate ? "private" : "public"}:${sub}`;

export interface Hub {
  pool: pg.Pool;
  auth: Pick<AuthConfig, "secret" | "jwks">;
  add(channel: Channel): void;
  remove(channel: Channel): void;
  deliver(key: string, delivery: Delivery, except?: Channel): void;
  log(line: string): void;
}

/** Realtime re-checks a channel's token this often, or at its expiry if sooner. */
const CONFIRM_TOKEN_MS = 5 * 60_000;

export class Connection {
  readonly channels = new Map<string, Channel>();
  private queue: Promise<void> = Promise.resolve();

  constructor(
    readonly ws: WebSocket,
    readonly vsn: Vsn,
    /** The socket's own token (its apikey's), and what it verified to. */
    readonly socketToken: { token: string; claims: Claims },
    readonly headers: Record<string, string>,
    private readonly hub: Hub,
  ) {
    ws.on("message", (data, isBinary) => {
      const raw = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
      this.queue = this.queue
        .then(() => this.receive(raw, isBinary))
        .catch((err: unknown) => hub.log(`realtime stand-in: ${(err as Error).message}`));
    });
    ws.on("close", () => {
      for (const channel of this.channels.values()) this.drop(channel);
    });
  }

  send(data: string | Buffer, binary = false): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.send(data, { binary });
  }

  deliver(channel: Channel, delivery: Delivery): void {
    if (delivery.kind === "json") {
      const payload = delivery.payload;
      this.send(
        encodeMessage(this.vsn, {
          joinRef: null,
          ref: null,
          topic: channel.topic,
          event: "broadcast",
          payload,
        }),
      );
      return;
    }
    const frame = encodeUserBroadcast(this.vsn, channel.topic, delivery.broadcast, delivery.meta);
    if (frame) this.send(frame.data, frame.binary);
  }

  private reply(m: Inbound, status: "ok" | "error", response: unknown): void {
    this.send(encodeReply(this.vsn, m, status, response));
  }

  private async receive(raw: Buffer, isBinary: boolean): Promise<void> {
    let m: Inbound;
    try {
      m = decode(this.vsn, raw, isBinary);
    } catch (err) {
      // Phoenix closes a socket that sends what its serializer cannot read.
      this.hub.log(`realtime stand-in: undecodable frame: ${(err as Error).message}`);
      this.ws.close(1003, "invalid message");
      return;
    }
    if (m.topic === "phoenix" && m.event === "heartbeat") return this.reply(m, "ok", {});
    if (m.event === "phx_join") return this.join(m);
    const channel = this.channels.get(m.topic);
    if (
      !channel ||
      (m.joinRef !== null && channel.joinRef !== null && m.joinRef !== channel.joinRef)
    )
      return this.reply(m, "error", { reason: "unmatched topic" });
    switch (m.event) {
      case "phx_leave":
        this.reply(m, "ok", {});
        this.close(channel);
        return;
      case "access_token":
        return this.refresh(channel, m.payload);
      case "broadcast":
        return this.broadcast(channel, m);
      case "presence":
        return this.reply(m, "error", {
          reason: "Presence is not served by the local Realtime stand-in (dev/realtime)",
        });
      default:
        // Realtime logs "Unexpected message from client" and answers nothing.
        return;
    }
  }

  private async join(m: Inbound): Promise<void> {
    const refuse = (reason: string) => this.reply(m, "error", { reason });
    if (!m.topic.startsWith("realtime:")) return refuse("unmatched topic");
    const sub = m.topic.slice("realtime:".length);
    if (sub === "") return refuse("TopicNameRequired: You must provide a topic name");
    // Phoenix: joining a topic already joined on this socket closes the first channel.
    const earlier = this.channels.get(m.topic);
    if (earlier) this.close(earlier);

    const params = (m.payload ?? {}) as Record<string, unknown>;
    const config = (params.config ?? {}) as Record<string, unknown>;
    const broadcast = (config.broadcast ?? {}) as Record<string, unknown>;
    const presence = (config.presence ?? {}) as Record<string, unknown>;
    const isPrivate = config.private === true;
    if (Array.isArray(config.postgres_changes) && config.postgres_changes.length > 0)
      return refuse("Postgres Changes is not served by the local Realtime stand-in (dev/realtime)");
    if (broadcast.replay !== undefined)
      return refuse(
        isPrivate
          ? "Broadcast replay is not served by the local Realtime stand-in (dev/realtime)"
          : "UnableToReplayMessages: Replay is not allowed for public channels",
      );

    let who: { token: string; claims: Claims };
    try {
      who = await this.tokenFor(params.access_token ?? params.user_token);
    } catch (err) {
      if (err instanceof TokenError) return refuse(err.reason);
      throw err;
    }
    const channel: Channel = {
      conn: this,
      topic: m.topic,
      sub,
      joinRef: m.joinRef ?? m.ref,
      private: isPrivate,
      self: broadcast.self === true,
      ack: broadcast.ack === true,
      presence: presence.enabled === true,
      ...who,
    };
    if (isPrivate) {
      const denied = await this.authorizeRead(channel);
      if (denied) return refuse(denied);
    }
    this.channels.set(m.topic, channel);
    this.hub.add(channel);
    this.scheduleConfirm(channel);
    this.reply(m, "ok", { postgres_changes: [] });
    if (broadcast.replication_ready === true)
      this.system(channel, "ok", "Replication connection established");
  }

  /** The token a join or refresh names: an `sb_` key (or none) means the socket's own. */
  private async tokenFor(named: unknown): Promise<{ token: string; claims: Claims }> {
    if (typeof named !== "string" || named.startsWith("sb_")) return this.socketToken;
    return { token: named, claims: await verifyRealtimeToken(named, this.hub.auth) };
  }

  /** Reads the channel's policies; answers why it may not join, or nothing. */
  private async authorizeRead(channel: Channel): Promise<string | undefined> {
    const denied = `Unauthorized: You do not have permissions to read from this Channel topic: ${channel.sub}`;
    try {
      channel.read = await readPermissions(
        this.hub.pool,
        this.context(channel),
        channel.presence ? ["broadcast", "presence"] : ["broadcast"],
      );
    } catch (err) {
      if (!(err instanceof AuthorizationError)) throw err;
      if (err.code === "MissingPartition") return err.reason;
      this.hub.log(`realtime stand-in: RlsPolicyError: ${err.message}`);
      return denied;
    }
    return channel.read.broadcast || channel.read.presence ? undefined : denied;
  }

  private context(channel: Channel): AuthorizationContext {
    return { topic: channel.sub, claims: channel.claims, headers: this.headers };
  }

  private async refresh(channel: Channel, payload: unknown): Promise<void> {
    const next = (payload as { access_token?: unknown } | null)?.access_token;
    if (typeof next !== "string" || next.startsWith("sb_") || next === channel.token) return;
    const before = channel.read;
    try {
      channel.claims = await verifyRealtimeToken(next, this.hub.auth);
    } catch (err) {
      if (err instanceof TokenError) return this.shutdown(channel, err.message);
      throw err;
    }
    channel.token = next;
    channel.write = undefined;
    if (channel.private) {
      const denied = await this.authorizeRead(channel);
      if (denied?.startsWith("Unauthorized: ")) return this.shutdown(channel, denied.slice(14));
      if (denied)
        return this.shutdown(channel, "Realtime was unable to connect to the project database");
      const revoked = (["broadcast", "presence"] as const).some(
        (e) => before?.[e] === true && channel.read?.[e] === false,
      );
      if (revoked)
        return this.shutdown(
          channel,
          `You no longer have permission to read from this Channel topic: ${channel.sub}`,
        );
    }
    this.scheduleConfirm(channel);
  }

  private async broadcast(channel: Channel, m: Inbound): Promise<void> {
    if (channel.private) {
      if (channel.write === undefined) {
        try {
          channel.write = await canWrite(this.hub.pool, this.context(channel));
        } catch (err) {
          if (!(err instanceof AuthorizationError)) throw err;
          this.hub.log(`realtime stand-in: ${err.reason}`);
          return;
        }
      }
      // No write permission: Realtime drops the message and answers nothing, not even an ack.
      if (!channel.write) return;
    }
    const delivery: Delivery = m.userBroadcast
      ? { kind: "user", broadcast: m.userBroadcast }
      : { kind: "json", payload: m.payload };
    this.hub.deliver(
      hubKey(channel.private, channel.sub),
      delivery,
      channel.self ? undefined : channel,
    );
    if (channel.ack) this.reply(m, "ok", {});
  }

  /** `RealtimeChannel.shutdown_response`: a system message, then the channel stops (phx_close). */
  shutdown(channel: Channel, message: string): void {
    this.system(channel, "error", message);
    this.close(channel);
  }

  private system(channel: Channel, status: "ok" | "error", message: string): void {
    const payload = { extension: "system", status, message, channel: channel.sub };
    this.send(
      encodeMessage(this.vsn, {
        joinRef: channel.joinRef,
        ref: null,
        topic: channel.topic,
        event: "system",
        payload,
      }),
    );
  }

  /** The channel's process ends: Phoenix tells the client with `phx_close`. */
  close(channel: Channel): void {
    this.drop(channel);
    this.send(
      encodeMessage(this.vsn, {
        joinRef: channel.joinRef,
        ref: channel.joinRef,
        topic: channel.topic,
        event: "phx_close",
        payload: {},
      }),
    );
  }

  private drop(channel: Channel): void {
    clearTimeout(channel.timer);
    if (this.channels.get(channel.topic) === channel) this.channels.delete(channel.topic);
    this.hub.remove(channel);
  }

  /** `confirm_token`: again in five minutes, or when the token expires if sooner. */
  private scheduleConfirm(channel: Channel): void {
    clearTimeout(channel.timer);
    const ms = Math.min(CONFIRM_TOKEN_MS, Math.max(0, channel.claims.exp * 1000 - Date.now()));
    channel.timer = setTimeout(() => {
      this.queue = this.queue
        .then(() => this.confirm(channel))
        .catch((err: unknown) => this.hub.log(`realtime stand-in: ${(err as Error).message}`));
    }, ms);
    channel.timer.unref();
  }

  private async confirm(channel: Channel): Promise<void> {
    if (this.channels.get(channel.topic) !== channel) return;
    try {
      // An `sb_` key stands for the token the gateway minted for it: nothing to re-check.
      if (!channel.token.startsWith("sb_"))
        channel.claims = await verifyRealtimeToken(channel.token, this.hub.auth);
    } catch (err) {
      if (err instanceof TokenError) return this.shutdown(channel, err.message);
      throw err;
    }
    this.scheduleConfirm(channel);
  }
}
