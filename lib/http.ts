/**
 * JSON responses, body limits and THE one place where an error becomes a status code.
 * Handlers throw (`HttpError` for refusals, `DatabaseError`/`UpstreamError` for failed
 * dependencies) and `handle` answers; nothing else in the codebase picks an error status.
 */
import { timingSafeEqual } from "node:crypto";
import { DatabaseError, HttpError, UpstreamError } from "./errors.ts";
import { json } from "./json.ts";
import { log } from "./log.ts";

export { json };

/** The HTTP methods our routes answer. */
export type Method = "GET" | "POST" | "PATCH" | "DELETE";
/** A Vercel Web handler. */
export type Handler = (req: Request) => Promise<Response>;

/** The error body every route uses. */
export type ErrorBody = { error: { code: string; message: string } };

/** Seconds a client (or QStash) should wait before retrying after a 503. */
const RETRY_AFTER_SECONDS = "5";

/** `{"error":{"code","message"}}`. */
export function errorBody(code: string, message: string): ErrorBody {
  return { error: { code, message } };
}

/**
 * Map anything thrown to a response:
 * - `HttpError` → its status, code, headers, and extra body fields beside `error`;
 * - `DatabaseError` → 503 `unavailable` + `Retry-After` (a retry can help; never "already done");
 * - `UpstreamError` → 503 `unavailable` + `Retry-After`;
 * - anything else → 500 `internal` with a generic message; the details go to the log only.
 */
export function toErrorResponse(err: unknown, context: Record<string, unknown> = {}): Response {
  if (err instanceof HttpError) {
    return json(err.status, { ...err.body, ...errorBody(err.code, err.message) }, err.headers);
  }
  if (err instanceof DatabaseError) {
    log.error("database_error", { ...context, ...err.details, error: err });
    return unavailable("The service is temporarily unavailable. Please retry shortly.");
  }
  if (err instanceof UpstreamError) {
    log.error("upstream_error", {
      ...context,
      service: err.service,
      status: err.status ?? null,
      error: err,
    });
    return unavailable("A dependency is temporarily unavailable. Please retry shortly.");
  }
  log.error("unhandled_error", { ...context, error: err instanceof Error ? err : String(err) });
  return json(500, errorBody("internal", "Internal server error."));
}

function unavailable(message: string): Response {
  return json(503, errorBody("unavailable", message), { "retry-after": RETRY_AFTER_SECONDS });
}

/**
 * Read a JSON request body, refusing before it is fully buffered when it is too large.
 * Throws `HttpError` 415 `unsupported_media_type` (Content-Type is not `application/json`),
 * 413 `payload_too_large` (declared Content-Length or streamed bytes over `maxBytes`; reading
 * stops at the limit), 400 `invalid_json` (empty, not UTF-8, or not JSON).
 *
 * @example const body = await readJson(req, { maxBytes: 16_384 });
 */
export async function readJson(
  request: Request,
  { maxBytes }: { maxBytes: number },
): Promise<unknown> {
  const mediaType = (request.headers.get("content-type") ?? "").split(";")[0]?.trim().toLowerCase();
  if (mediaType !== "application/json") {
    throw new HttpError(415, "unsupported_media_type", "Content-Type must be application/json.");
  }
  const bytes = await readBody(request, { maxBytes });
  const invalid = () => new HttpError(400, "invalid_json", "The request body is not valid JSON.");
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    throw invalid();
  }
  try {
    return JSON.parse(text);
  } catch {
    throw invalid();
  }
}

/**
 * Read a request body as bytes, refusing with `HttpError` 413 `payload_too_large` when the
 * declared Content-Length or the bytes streamed so far exceed `maxBytes`: reading stops at the
 * limit, so a client cannot make a function buffer (or wait for) more than that. No body is an
 * empty buffer.
 *
 * @example const raw = await readBody(req, { maxBytes: 65_536 });
 */
export async function readBody(
  request: Request,
  { maxBytes }: { maxBytes: number },
): Promise<Buffer> {
  const tooLarge = () =>
    new HttpError(413, "payload_too_large", `The request body exceeds ${maxBytes} bytes.`);
  const declared = Number(request.headers.get("content-length") ?? Number.NaN);
  if (Number.isFinite(declared) && declared > maxBytes) {
    await request.body?.cancel().catch(() => undefined);
    throw tooLarge();
  }
  if (!request.body) return Buffer.alloc(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => undefined);
      throw tooLarge();
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

/**
 * Whether the request carries `Authorization: Bearer <secret>`, compared in constant time (the
 * cron secret: Vercel cron sends it, and the operator uses it for detailed health).
 *
 * @example if (!bearerMatches(req, config.cronSecret)) throw new HttpError(401, ...);
 */
export function bearerMatches(req: Request, secret: string): boolean {
  const given = Buffer.from(req.headers.get("authorization") ?? "");
  const want = Buffer.from(`Bearer ${secret}`);
  return given.length === want.length && timingSafeEqual(given, want);
}

/** 401 `unauthorized` unless the request carries the cron secret ({@link bearerMatches}). */
export function requireCronSecret(req: Request, secret: string): void {
  if (!bearerMatches(req, secret)) {
    throw new HttpError(401, "unauthorized", "Missing or wrong cron secret.", {
      "www-authenticate": "Bearer",
    });
  }
}

/**
 * One route: dispatch by method, answer 405 `method_not_allowed` (with `Allow`) for others,
 * and turn every throw into a response through `toErrorResponse`.
 *
 * @example export default { fetch: handle({ GET: list, POST: enqueue }) };
 */
export function handle(methods: Partial<Record<Method, Handler>>): Handler {
  const allow = Object.keys(methods).join(", ");
  return async (req) => {
    const method = req.method.toUpperCase() as Method;
    const handler = Object.hasOwn(methods, method) ? methods[method] : undefined;
    if (!handler) {
      return json(405, errorBody("method_not_allowed", `Use ${allow}.`), { allow });
    }
    try {
      return await handler(req);
    } catch (err) {
      return toErrorResponse(err, { method: req.method, path: new URL(req.url).pathname });
    }
  };
}
