import { DEV_SIGNING_KEYS, DEV_TOKEN } from "./constants.ts";
import type { Engine } from "./engine.ts";
import { FLOW_KEY_PATTERN } from "./flow.ts";
import { parsePublish } from "./publish.ts";
import { dlqView } from "./views.ts";

export interface RouteContext {
  engine: Engine;
  callerIp: string;
  maxTimeoutMs: number;
}

/**
 * Real QStash APIs this app never calls (URL groups are `topics`; message get/cancel and the bulk
 * cancel, DLQ delete and bulk retry are not in lib/ either): answered 501, so a caller learns
 * the stand-in lacks them rather than that something was not found.
 */
const UNSERVED = [
  "/v2/batch",
  "/v2/enqueue",
  "/v2/queues",
  "/v2/schedules",
  "/v2/topics",
  "/v2/globalParallelism",
  "/v2/logs",
  "/v2/events",
  "/v2/workflows",
  "/v2/messages",
  "/v2/dlq",
];

const json = (body: unknown, status = 200) => Response.json(body, { status });
const error = (message: string, status: number) => json({ error: message }, status);

/**
 * The query keys a DLQ call may carry. QStash's bulk filters (url, label, messageId, dates, ...)
 * are not served: a filter the stand-in ignored would widen a retry to every dead letter.
 */
function dlqQuery(query: URLSearchParams, endpoint: string, allowed: readonly string[]) {
  const other = [...query.keys()].find((key) => !allowed.includes(key));
  if (other !== undefined)
    return error(`filter ${other} on ${endpoint} is not served by the local stand-in`, 501);
  const count = query.get("count");
  if (count !== null && !/^[1-9]\d*$/.test(count)) return error(`invalid count: ${count}`, 400);
  return undefined;
}

/** The QStash v2 REST API subset the app and the runbook use. `(Request) → Response`, no server. */
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

  // The runbook's listing (docs/FAILURE-PATHS.md), paged as QStash pages it.
  if (path === "/v2/dlq" && method === "GET") {
    const refused = dlqQuery(url.searchParams, "GET /v2/dlq", ["count", "cursor"]);
    if (refused) return refused;
    const count = url.searchParams.get("count");
    const cursor = url.searchParams.get("cursor") || undefined;
    const page = engine.dlq.page({
      ...(count === null ? {} : { count: Number(count) }),
      ...(cursor ? { cursor } : {}),
    });
    return json({
      messages: page.entries.map(dlqView),
      ...(page.cursor ? { cursor: page.cursor } : {}),
    });
  }
  // The runbook's "retry this dead letter": by path, or by dlqIds as the SDK's retry(id) sends it.
  const retryPath = path.match(/^\/v2\/dlq\/retry(?:\/([^/]+))?$/);
  if (retryPath && method === "POST") {
    const single = retryPath[1];
    const refused = dlqQuery(url.searchParams, "POST /v2/dlq/retry", single ? [] : ["dlqIds"]);
    if (refused) return refused;
    const ids =
      single !== undefined
        ? [decodeURIComponent(single)]
        : url.searchParams.getAll("dlqIds").flatMap((v) => v.split(",").map((s) => s.trim()));
    if (ids.length === 0 || ids.includes(""))
      return error(
        "POST /v2/dlq/retry needs dlqIds (a retry of every dead letter is not served by the local stand-in)",
        501,
      );
    // QStash lets Upstash-* headers on a retry override the original message's settings; the
    // stand-in republishes it as it was, so it refuses rather than silently drop an override.
    const override = [...request.headers.keys()].find(
      (h) => h.startsWith("upstash-") && !h.startsWith("upstash-telemetry-"),
    );
    if (override !== undefined)
      return error(`${override} on a DLQ retry is not served by the local stand-in`, 501);
    const entries = ids.map((id) => engine.dlq.get(id));
    if (single !== undefined && entries[0] === undefined)
      return error("dlq message not found", 404);
    const responses = entries.flatMap((entry) => {
      if (!entry || !engine.dlq.delete(entry.dlqId)) return [];
      return [{ messageId: engine.publish({ ...entry.message, notBefore: Date.now() }).messageId }];
    });
    return single !== undefined ? json(responses[0], 201) : json({ responses });
  }
  if (path === "/v2/flowControl" || path.startsWith("/v2/flowControl/"))
    return flowControl(method, path, url.searchParams, engine);
  const unserved = UNSERVED.find((prefix) => path === prefix || path.startsWith(`${prefix}/`));
  if (unserved !== undefined)
    return error(
      `${method} ${path} is a QStash API not served by the local stand-in (it serves publish, GET /v2/dlq, POST /v2/dlq/retry, /v2/flowControl and keys)`,
      501,
    );
  return error(`${method} ${path} is not a QStash API`, 404);
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

const whole = (raw: string | null) =>
  raw !== null && /^[1-9]\d{0,8}$/.test(raw) ? Number(raw) : undefined;

/**
 * Flow Control's management API (qstash/openapi.yaml, tag "Flow Control"; the SDK's
 * `client.flowControl`): list, get (404 for a key no message named), pause, resume, pin (query
 * parallelism, rate, period in seconds), unpin (query parallelism=true, rate=true) and
 * resetRate. Pause/resume/pin/unpin/resetRate answer 200 with an empty body (the SDK does not
 * read it).
 */
function flowControl(method: string, path: string, query: URLSearchParams, engine: Engine) {
  if (method === "GET" && path === "/v2/flowControl") return json(engine.flowList());
  const match = path.match(/^\/v2\/flowControl\/([^/]*)(?:\/([^/]+))?$/);
  const key = match ? decodeURIComponent(match[1] ?? "") : "";
  const action = match?.[2];
  if (!match) return error(`${method} ${path} is not a QStash API`, 404);
  if (key === "") return error("flow control key is required", 400);
  if (method === "GET" && action === undefined) {
    const info = FLOW_KEY_PATTERN.test(key) ? engine.flowInfo(key) : undefined;
    return info ? json(info) : error("flow control key not found", 404);
  }
  if (method !== "POST" || action === undefined)
    return error(`${method} ${path} is not a QStash API`, 404);
  let done: boolean;
  if (action === "pause" || action === "resume" || action === "resetRate")
    done = engine.flowAction(key, action);
  else if (action === "pin") {
    const parallelism = whole(query.get("parallelism"));
    const rate = whole(query.get("rate"));
    const period = whole(query.get("period"));
    const bad = ["parallelism", "rate", "period"].find(
      (name) => query.get(name) !== null && whole(query.get(name)) === undefined,
    );
    if (bad !== undefined) return error(`invalid ${bad}: must be a positive whole number`, 400);
    if (parallelism === undefined && rate === undefined)
      return error("pin needs parallelism or rate", 400);
    done = engine.flowAction(key, {
      pin: {
        ...(parallelism === undefined ? {} : { parallelism }),
        ...(rate === undefined ? {} : { rate }),
        ...(period === undefined ? {} : { periodMs: period * 1000 }),
      },
    });
  } else if (action === "unpin")
    done = engine.flowAction(key, {
      unpin: {
        parallelism: query.get("parallelism") === "true",
        rate: query.get("rate") === "true",
      },
    });
  else return error(`${method} ${path} is not a QStash API`, 404);
  return done ? new Response(null, { status: 200 }) : error("flow control key not found", 404);
}
