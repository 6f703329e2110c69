import { DEV_SIGNING_KEYS, DEV_TOKEN } from "./constants.ts";
import type { Engine } from "./engine.ts";
import { CANCEL_FILTERS, DLQ_FILTERS, parseFilter } from "./filters.ts";
import { parsePublish } from "./publish.ts";
import { dlqView, messageView } from "./views.ts";

export interface RouteContext {
  engine: Engine;
  callerIp: string;
  maxTimeoutMs: number;
}

/**
 * Real QStash APIs this app never calls (URL groups are `topics`): answered 501, so a caller
 * learns the stand-in lacks them rather than that something was not found.
 */
const UNSERVED = [
  "/v2/batch",
  "/v2/enqueue",
  "/v2/queues",
  "/v2/schedules",
  "/v2/topics",
  "/v2/flowControl",
  "/v2/globalParallelism",
  "/v2/logs",
  "/v2/events",
  "/v2/workflows",
];

const json = (body: unknown, status = 200) => Response.json(body, { status });
const error = (message: string, status: number) => json({ error: message }, status);

/** The QStash v2 REST API subset the app and the SDK use. `(Request) → Response`, no server. */
export async function handle(request: Request, ctx: RouteContext): Promise<Response> {
  const url = new URL(request.url);
  const path = url.pathname;
  if (!path.startsWith("/v2/")) return error("not found", 404);
  if (request.headers.get("authorization") !== `Bearer ${DEV_TOKEN}`)
    return error("Unauthorized", 401);
  const method = request.method;
  const { engine } = ctx;

  if (method === "GET" && path === "/v2/keys")
    return json({ current: DEV_SIGNING_KEYS.current, next: DEV_SIGNING_KEYS.next });
  if (method === "POST" && path.startsWith("/v2/publish/")) {
    // The destination travels raw in the path, its own query string as the request's.
    return publish(path.slice("/v2/publish/".length) + url.search, request.headers, request, ctx);
  }

  const messageId = path.match(/^\/v2\/messages\/([^/]+)$/)?.[1];
  if (messageId !== undefined) {
    const message = engine.get(decodeURIComponent(messageId));
    if (method === "GET")
      return message ? json(messageView(message)) : error("message not found", 404);
    if (method === "DELETE") {
      return engine.cancel(decodeURIComponent(messageId))
        ? json({ cancelled: 1 })
        : error("message not found", 404);
    }
  }
  if (method === "DELETE" && path === "/v2/messages") {
    // No filter at all cancels every message, as documented (the SDK's `{ all: true }`).
    const filter = parseFilter(url.searchParams, CANCEL_FILTERS);
    if (filter.outcome === "refused") return error(filter.error, filter.status);
    return json({ cancelled: engine.cancelWhere(filter.match) });
  }

  if (path === "/v2/dlq" && method === "GET") {
    const filter = parseFilter(url.searchParams, DLQ_FILTERS("GET /v2/dlq"));
    if (filter.outcome === "refused") return error(filter.error, filter.status);
    const page = engine.dlq.page(filter);
    return json({
      messages: page.entries.map(dlqView),
      ...(page.cursor ? { cursor: page.cursor } : {}),
    });
  }
  if (path === "/v2/dlq" && method === "DELETE") {
    const filter = parseFilter(url.searchParams, DLQ_FILTERS("DELETE /v2/dlq"));
    if (filter.outcome === "refused") return error(filter.error, filter.status);
    const page = engine.dlq.page(filter);
    const deleted = page.entries.filter((e) => engine.dlq.delete(e.dlqId)).length;
    return json({ deleted, ...(page.cursor ? { cursor: page.cursor } : {}) });
  }
  const retryId = path.match(/^\/v2\/dlq\/retry(?:\/([^/]+))?$/);
  if (retryId && method === "POST") {
    const single = retryId[1];
    const query = single === undefined ? url.searchParams : new URLSearchParams({ dlqIds: single });
    const filter = parseFilter(query, DLQ_FILTERS("POST /v2/dlq/retry"));
    if (filter.outcome === "refused") return error(filter.error, filter.status);
    // QStash lets Upstash-* headers on a retry override the original message's settings; the
    // stand-in republishes it as it was, so it refuses rather than silently drop an override.
    const override = [...request.headers.keys()].find(
      (h) => h.startsWith("upstash-") && !h.startsWith("upstash-telemetry-"),
    );
    if (override !== undefined)
      return error(`${override} on a DLQ retry is not supported by the qstash stand-in`, 501);
    const page = engine.dlq.page(filter);
    if (single !== undefined && page.entries.length === 0)
      return error("dlq message not found", 404);
    const responses = page.entries.map((entry) => {
      engine.dlq.delete(entry.dlqId);
      return { messageId: engine.publish({ ...entry.message, notBefore: Date.now() }).messageId };
    });
    if (single !== undefined) return json(responses[0], 201);
    return json({ responses, ...(page.cursor ? { cursor: page.cursor } : {}) });
  }
  const dlqId = path.match(/^\/v2\/dlq\/([^/]+)$/)?.[1];
  if (dlqId !== undefined) {
    const entry = engine.dlq.get(decodeURIComponent(dlqId));
    if (method === "DELETE") {
      if (!entry) return error("dlq message not found", 404);
      engine.dlq.delete(entry.dlqId);
      return new Response(null, { status: 200 });
    }
  }
  const unserved = UNSERVED.find((prefix) => path === prefix || path.startsWith(`${prefix}/`));
  if (unserved !== undefined || (path.startsWith("/v2/dlq/") && method === "GET"))
    return error(
      `${method} ${path} is a QStash API the stand-in does not serve (it serves publish, messages, dlq and keys)`,
      501,
    );
  return error(`${method} ${path} is not supported by the qstash stand-in`, 404);
}

async function publish(destination: string, headers: Headers, request: Request, ctx: RouteContext) {
  const body = new Uint8Array(await request.arrayBuffer());
  const parsed = parsePublish({
    destination,
    headers,
    body,
    callerIp: ctx.callerIp,
    now: Date.now(),
    maxTimeoutMs: ctx.maxTimeoutMs,
  });
  if (parsed.outcome === "invalid") return error(parsed.error, 400);
  if (parsed.outcome === "unsupported") return error(parsed.error, 501);
  const result = ctx.engine.publish(parsed.spec, parsed.dedupKey);
  return result.deduplicated
    ? json({ messageId: result.messageId, url: parsed.spec.url, deduplicated: true }, 202)
    : json({ messageId: result.messageId, url: parsed.spec.url });
}
