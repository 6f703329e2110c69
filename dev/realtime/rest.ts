/**
 * Realtime's REST broadcast, `POST /realtime/v1/api/broadcast` (BroadcastController and
 * Realtime.Tenants.BatchBroadcast): `{messages: [{topic, event, payload, private?, id?}]}`.
 * The gateway's apikey check first; then the token (Authorization's bearer, else the apikey)
 * as Realtime checks it, 401 `{"message": "Unauthorized"}` when it fails. A public message goes
 * to the public channels of its topic; private ones, per topic, only when the token's role may
 * write there (the write policy, authorize.ts), and are dropped silently when it may not, as
 * Realtime drops them. Answers 202 with no body; 422 with the changeset's errors.
 */
import { type AuthConfig, gatewayKey, legacyGatewayKey } from "../postgrest/auth.ts";
import { PgrstError } from "../postgrest/errors.ts";
import { AuthorizationError, canWrite } from "./authorize.ts";
import { type Hub, hubKey } from "./channels.ts";
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
  const { pathname } = new URL(request.url);
  if (pathname !== "/realtime/v1/api/broadcast" || request.method !== "POST")
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

/** `AuthTenant`: the bearer token, else the apikey; an `sb_` key stands for its role's token. */
async function caller(headers: Record<string, string>, auth: AuthConfig): Promise<Claims> {
  const apikey = headers.apikey;
  if (apikey === undefined)
    throw new PgrstError(401, {
      message: "No API key found in request",
      hint: "No `apikey` request header or url param was found.",
    });
  const role = apikey.startsWith("sb_") ? gatewayKey(headers, apikey, auth) : undefined;
  if (!role) await legacyGatewayKey(apikey, auth);
  const bearer = /^bearer (.+)$/i.exec(headers.authorization ?? "")?.[1];
  const token = bearer ?? apikey;
  if (role && token === apikey) {
    const iat = Math.floor(Date.now() / 1000);
    return { iss: "supabase", role, iat, exp: iat + 3600 };
  }
  return verifyRealtimeToken(token, auth);
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
