/**
 * The Phoenix channel protocol as Realtime frames it, both versions realtime-js can ask for
 * (`vsn` on the websocket URL; realtime-js sends 2.0.0 today):
 *
 * - 1.0.0 (Phoenix.Socket.V1.JSONSerializer): a JSON object `{topic, event, payload, ref}` each
 *   way (a client also sends `join_ref`; the server never does).
 * - 2.0.0 (RealtimeWeb.Socket.V2Serializer): a JSON array `[join_ref, ref, topic, event,
 *   payload]`, plus two binary frames for user broadcasts: kind 3 (client → server: join_ref,
 *   ref, topic, event, metadata, then the payload as JSON or raw bytes) and kind 4 (server →
 *   client: topic, event, metadata, then the payload).
 *
 * A 1.0.0 socket cannot carry a binary payload: Realtime drops such a broadcast for it.
 */
export type Vsn = "1.0.0" | "2.0.0";

export const VSNS: readonly Vsn[] = ["1.0.0", "2.0.0"];

const USER_BROADCAST_PUSH = 3;
const USER_BROADCAST = 4;

/** A user broadcast whose payload is kept as its bytes: JSON text, or binary. */
export interface UserBroadcast {
  event: string;
  encoding: "json" | "binary";
  body: Buffer;
}

export interface Inbound {
  joinRef: string | null;
  ref: string | null;
  topic: string;
  event: string;
  payload: unknown;
  /** A kind-3 frame: the client's broadcast with its payload still encoded. */
  userBroadcast?: UserBroadcast;
}

export class WireError extends Error {}

export function decode(vsn: Vsn, data: Buffer, isBinary: boolean): Inbound {
  if (isBinary) {
    if (vsn === "1.0.0") throw new WireError("binary frames need vsn 2.0.0");
    return decodeUserBroadcastPush(data);
  }
  const parsed: unknown = JSON.parse(data.toString("utf8"));
  if (vsn === "2.0.0") {
    if (!Array.isArray(parsed) || parsed.length < 5)
      throw new WireError("expected V2 array [join_ref, ref, topic, event, payload]");
    const [joinRef, ref, topic, event, payload] = parsed as unknown[];
    return {
      joinRef: str(joinRef),
      ref: str(ref),
      topic: String(topic),
      event: String(event),
      payload,
    };
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed))
    throw new WireError("expected a V1 message object");
  const m = parsed as Record<string, unknown>;
  return {
    joinRef: str(m.join_ref),
    ref: str(m.ref),
    topic: String(m.topic),
    event: String(m.event),
    payload: m.payload,
  };
}

const str = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

function decodeUserBroadcastPush(data: Buffer): Inbound {
  if (data[0] !== USER_BROADCAST_PUSH || data.length < 7)
    throw new WireError(`unexpected binary frame kind ${data[0]}`);
  const sizes = [data[1], data[2], data[3], data[4], data[5]].map((n) => n ?? 0);
  const encoding = data[6] === 0 ? "binary" : "json";
  let at = 7;
  const [joinRef, ref, topic, event, metadata] = sizes.map((n) => {
    const part = data.subarray(at, at + n).toString("utf8");
    at += n;
    return part;
  });
  const body = Buffer.from(data.subarray(at));
  return {
    joinRef: joinRef || null,
    ref: ref || null,
    topic: topic ?? "",
    event: "broadcast",
    payload: metadata ? JSON.parse(metadata) : {},
    userBroadcast: { event: event ?? "", encoding, body },
  };
}

/** A push or broadcast from the server: `ref` is null unless it answers a push. */
export function encodeMessage(
  vsn: Vsn,
  m: { joinRef: string | null; ref: string | null; topic: string; event: string; payload: unknown },
): string {
  return vsn === "2.0.0"
    ? JSON.stringify([m.joinRef, m.ref, m.topic, m.event, m.payload])
    : JSON.stringify({ topic: m.topic, event: m.event, payload: m.payload, ref: m.ref });
}

export function encodeReply(
  vsn: Vsn,
  to: { joinRef: string | null; ref: string | null; topic: string },
  status: "ok" | "error",
  response: unknown,
): string {
  return encodeMessage(vsn, { ...to, event: "phx_reply", payload: { status, response } });
}

/**
 * A user broadcast to one socket: kind 4 on 2.0.0; on 1.0.0 the JSON broadcast Realtime converts
 * it to (`UserBroadcast.convert_to_json_broadcast`), or nothing for a binary payload.
 */
export function encodeUserBroadcast(
  vsn: Vsn,
  topic: string,
  b: UserBroadcast,
  meta?: Record<string, unknown>,
): { data: Buffer | string; binary: boolean } | undefined {
  if (vsn === "1.0.0") {
    if (b.encoding === "binary") return undefined;
    const payload = {
      event: b.event,
      payload: JSON.parse(b.body.toString("utf8")),
      type: "broadcast",
      ...(meta ? { meta } : {}),
    };
    return {
      data: encodeMessage(vsn, { joinRef: null, ref: null, topic, event: "broadcast", payload }),
      binary: false,
    };
  }
  const t = Buffer.from(topic);
  const e = Buffer.from(b.event);
  const m = Buffer.from(meta ? JSON.stringify(meta) : "");
  if (t.length > 255 || e.length > 255 || m.length > 255)
    throw new WireError("topic, event and metadata must each be at most 255 bytes");
  const header = Buffer.from([
    USER_BROADCAST,
    t.length,
    e.length,
    m.length,
    b.encoding === "json" ? 1 : 0,
  ]);
  return { data: Buffer.concat([header, t, e, m, b.body]), binary: true };
}
