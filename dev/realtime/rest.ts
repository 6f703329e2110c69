/**
 * Realtime's REST broadcast: the batch, `POST /realtime/v1/api/broadcast` (BroadcastController
 * and Realtime.Tenants.BatchBroadcast): `{messages: [{topic, event, payload, private?, id?}]}`,
 * and one message, `POST /realtime/v1/api/broadcast/<topic>/events/<event>[?private=true]`
 * (BroadcastSingleController and Realtime.Tenants.SingleBroadcast: what realtime-js's
 * `httpSend` calls), its body the payload: JSON, or raw bytes as `application/octet-stream`.
 *
 * The gateway's apikey check first; then the token (Authorization's bearer, else the apikey)
 * as Realtime checks it, 401 `{"message": "Unauthorized"}` when it fails. A public message goes
 * to the public channels of its topic; a private one only when the token's role may write there
 * (the write policy, authorize.ts). The batch drops a private message silently when it may not,
 * as Realtime does; the single message answers 403 `{"message": "Unauthorized"}`. Both answer
 * 202 with no body; the batch 422 with the changeset's errors; the single message 415 for a
 * body that is neither JSON nor octet-stream (RealtimeWeb.Plugs.ValidateBroadcastContentType).
 */
import { type AuthConfig, gatewayKey, legacyGatewayKey } from "../postgrest/auth.ts";
import { PgrstError } from "../postgrest/errors.ts";
import { AuthorizationError, canWrite } from "./authorize.ts";
import { type Delivery, type Hub, hubKey } from "./channels.ts";
import { type Claims, verifyRealtimeToken } from "./tokens.ts";

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json; charset=utf-8" },
  });

interface Message {
  topic: string;
  event: string;
  payload: Record<string, unknown>;
  private: boolean;
  id?: string;
}

export async function handleRest(
  request: Request,
  ctx: { hub: Hub; auth: AuthConfig },
): Promise<Response> {
  const url = new URL(request.url);
  const single = SINGLE.exec(url.pathname);
  if (single && request.method === "POST") return handleSingle(request, url, single, ctx);
  if (url.pathname !== "/realtime/v1/api/broadcast" || request.method !== "POST")
    return json(404, { errors: { detail: "Not Found" } });
  const headers = Object.fromEntries(request.headers);
  let claims: Claims;
  try {
    claims = await caller(headers, ctx.auth);
  } catch (err) {
    if (err instanceof PgrstError) return json(err.status, err.body);
    return json(401, { message: "Unauthorized" });
  }
  let body: unknown;
  try {
    body = JSON.parse(await request.text());
  } catch {
    return json(400, { errors: { detail: "Bad Request" } });
  }
  const checked = validate(body);
  if ("errors" in checked) return json(422, { errors: checked.errors });

  for (const m of checked.messages.filter((m) => !m.private))
    ctx.hub.deliver(hubKey(false, m.topic), { kind: "json", payload: broadcastPayload(m) });
  const privateTopics = new Map<string, Message[]>();
  for (const m of checked.messages.filter((m) => m.private))
    privateTopics.set(m.topic, [...(privateTopics.get(m.topic) ?? []), m]);
  for (const [topic, messages] of privateTopics) {
    let allowed = false;
    try {
      allowed = await canWrite(ctx.hub.pool, { topic, claims, headers });
    } catch (err) {
      if (!(err instanceof AuthorizationError)) throw err;
      ctx.hub.log(`realtime stand-in: ${err.reason}`);
    }
    if (!allowed) continue;
    for (const m of messages)
      ctx.hub.deliver(hubKey(true, topic), { kind: "json", payload: broadcastPayload(m) });
  }
  return new Response(null, { status: 202 });
}

/** The gateway in front (Kong's key-auth): the apikey must be one of the project's keys. */
async function gateway(
  headers: Record<string, string>,
  auth: AuthConfig,
): Promise<"service_role" | "anon" | undefined> {
  const apikey = headers.apikey;
  if (apikey === undefined)
    throw new PgrstError(401, {
      message: "No API key found in request",
      hint: "No `apikey` request header or url param was found.",
    });
  if (apikey.startsWith("sb_")) return gatewayKey(headers, apikey, auth);
  await legacyGatewayKey(apikey, auth);
  return undefined;
}

/** `AuthTenant`: the bearer token, else the apikey; an `sb_` key stands for its role's token. */
async function tokenClaims(
  headers: Record<string, string>,
  role: string | undefined,
  auth: AuthConfig,
): Promise<Claims> {
  const apikey = headers.apikey ?? "";
  const bearer = /^bearer (.+)$/i.exec(headers.authorization ?? "")?.[1];
  const token = bearer ?? apikey;
  if (role && token === apikey) {
    const iat = Math.floor(Date.now() / 1000);
    return { iss: "supabase", role, iat, exp: iat + 3600 };
  }
  return verifyRealtimeToken(token, auth);
}

async function caller(headers: Record<string, string>, auth: AuthConfig): Promise<Claims> {
  return tokenClaims(headers, await gateway(headers, auth), auth);
}

const SINGLE = /^\/realtime\/v1\/api\/broadcast\/([^/]+)\/events\/([^/]+)$/;

/** `ValidateBroadcastContentType`: none (taken as JSON), `application/json` or `…/octet-stream`. */
function bodyKind(contentType: string | undefined): "json" | "binary" | "none" | undefined {
  if (contentType === undefined) return "none";
  const m = /^\s*application\/(json|octet-stream)\s*(;.*)?$/i.exec(contentType);
  if (!m) return undefined;
  return m[1]?.toLowerCase() === "json" ? "json" : "binary";
}

/**
 * `POST /realtime/v1/api/broadcast/<topic>/events/<event>`: the router's `broadcast_single`
 * pipeline (the content type, then `AuthTenant`), then `SingleBroadcast.broadcast`. The message
 * goes out as a user broadcast with no metadata (`build_json_broadcast` /
 * `build_binary_broadcast`): a 1.0.0 socket gets the JSON one converted, and not a binary one.
 */
async function handleSingle(
  request: Request,
  url: URL,
  [, topicPart, eventPart]: RegExpExecArray,
  ctx: { hub: Hub; auth: AuthConfig },
): Promise<Response> {
  const headers = Object.fromEntries(request.headers);
  let role: "service_role" | "anon" | undefined;
  try {
    role = await gateway(headers, ctx.auth);
  } catch (err) {
    if (err instanceof PgrstError) return json(err.status, err.body);
    throw err;
  }
  const kind = bodyKind(headers["content-type"]);
  if (!kind)
    return json(415, {
      error: "Unsupported Media Type. Use application/json or application/octet-stream",
    });
  let claims: Claims;
  try {
    claims = await tokenClaims(headers, role, ctx.auth);
  } catch {
    return json(401, { message: "Unauthorized" });
  }
  let topic: string;
  let event: string;
  try {
    topic = decodeURIComponent(topicPart ?? "");
    event = decodeURIComponent(eventPart ?? "");
  } catch {
    return json(400, { errors: { detail: "Bad Request" } });
  }
  const raw = Buffer.from(await request.arrayBuffer());
  let body: Buffer;
  if (kind === "binary") body = raw;
  else {
    // Plug.Parsers: no content type reads no body (`%{}`); JSON that is not an object is
    // wrapped as `{"_json": …}`; an empty JSON body is `%{}`.
    let parsed: unknown = {};
    try {
      if (kind === "json" && raw.length > 0) parsed = JSON.parse(raw.toString("utf8"));
    } catch {
      return json(400, { errors: { detail: "Bad Request" } });
    }
    const map =
      typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)
        ? parsed
        : { _json: parsed };
    body = Buffer.from(JSON.stringify(map));
  }
  // `parse_private`: only "true" is true.
  const isPrivate = url.searchParams.get("private") === "true";
  const delivery: Delivery = {
    kind: "user",
    broadcast: { event, encoding: kind === "binary" ? "binary" : "json", body },
  };
  if (isPrivate) {
    let allowed: boolean;
    try {
      allowed = await canWrite(ctx.hub.pool, { topic, claims, headers });
    } catch (err) {
      if (!(err instanceof AuthorizationError)) throw err;
      ctx.hub.log(`realtime stand-in: ${err.reason}`);
      return json(422, {
        message:
          err.code === "MissingPartition" ? "Missing messages partition" : "RLS policy error",
      });
    }
    if (!allowed) return json(403, { message: "Unauthorized" });
  }
  ctx.hub.deliver(hubKey(isPrivate, topic), delivery);
  return new Response(null, { status: 202 });
}

function broadcastPayload(m: Message): Record<string, unknown> {
  return {
    payload: m.payload,
    event: m.event,
    type: "broadcast",
    ...(m.id !== undefined ? { meta: { id: m.id } } : {}),
  };
}

/** The changeset's checks: `messages` required; each needs topic, event and a map payload. */
function validate(body: unknown): { messages: Message[] } | { errors: Record<string, unknown> } {
  const list = (body as { messages?: unknown } | null)?.messages;
  if (!Array.isArray(list) || list.length === 0)
    return { errors: { messages: ["can't be blank"] } };
  const errors = list.map((raw) => {
    const m = (raw ?? {}) as Record<string, unknown>;
    const e: Record<string, string[]> = {};
    for (const field of ["topic", "event"] as const) {
      if (m[field] === undefined || m[field] === null || m[field] === "")
        e[field] = ["can't be blank"];
      else if (typeof m[field] !== "string") e[field] = ["is invalid"];
    }
    if (m.payload === undefined || m.payload === null) e.payload = ["can't be blank"];
    else if (typeof m.payload !== "object" || Array.isArray(m.payload)) e.payload = ["is invalid"];
    if (m.private !== undefined && m.private !== null && typeof m.private !== "boolean")
      e.private = ["is invalid"];
    return e;
  });
  if (errors.some((e) => Object.keys(e).length > 0)) return { errors: { messages: errors } };
  return {
    messages: list.map((raw) => {
      const m = raw as Record<string, unknown>;
      return {
        topic: m.topic as string,
        event: m.event as string,
        payload: m.payload as Record<string, unknown>,
        private: m.private === true,
        ...(typeof m.id === "string" ? { id: m.id } : {}),
      };
    }),
  };
}
