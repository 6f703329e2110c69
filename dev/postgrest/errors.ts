/**
 * PostgREST's error responses: the JSON body, the HTTP status for each SQLSTATE and the
 * connection/pool failures. Mirrors PostgREST's src/PostgREST/Error.hs (mapSQLtoHTTP,
 * PgError, JwtError).
 */

export interface PgrstErrorBody {
  code: string;
  details: string | null;
  hint: string | null;
  message: string;
}

/** An error response ready to send: status, body and any extra headers. */
export class PgrstError extends Error {
  constructor(
    readonly status: number,
    readonly body: PgrstErrorBody | Record<string, unknown>,
    readonly headers: Record<string, string> = {},
    readonly statusText?: string,
  ) {
    super(typeof body.message === "string" ? body.message : "PostgREST error");
    this.name = "PgrstError";
  }
}

export function pgrstError(
  status: number,
  code: string,
  message: string,
  details: string | null = null,
  hint: string | null = null,
  headers: Record<string, string> = {},
): PgrstError {
  return new PgrstError(status, { code, details, hint, message }, headers);
}

/** The fields of a server error as node-postgres reports them (`pg.DatabaseError`). */
interface ServerError {
  code: string;
  message: string;
  detail?: string | undefined;
  hint?: string | undefined;
}

function isServerError(err: unknown): err is ServerError {
  return (
    err instanceof Error &&
    typeof (err as { code?: unknown }).code === "string" &&
    typeof (err as { severity?: unknown }).severity === "string"
  );
}

/** PostgREST's mapSQLtoHTTP. `authed` = the request's role is not the anonymous role. */
export function statusForSqlState(code: string, message: string, authed: boolean): number {
  const two = code.slice(0, 2);
  if (two === "08") return 503;
  if (two === "09") return 500;
  if (two === "0L" || two === "0P") return 403;
  if (code === "23503" || code === "23505") return 409;
  if (code === "25006") return 405;
  if (code === "21000") return message.endsWith("requires a WHERE clause") ? 400 : 500;
  if (code === "22023")
    return message.startsWith("role") && message.endsWith("does not exist") ? 401 : 400;
  if (["25", "2D", "38", "39", "3B", "40"].includes(two)) return 500;
  if (two === "28") return 403;
  if (code === "53400") return 500;
  if (two === "53") return 503;
  if (two === "54" || two === "55") return 500;
  if (code === "57P01") return 503;
  if (["57", "58", "F0", "HV", "XX"].includes(two)) return 500;
  if (code === "P0001") return 400;
  if (two === "P0") return 500;
  if (code === "42883") return message.startsWith("function xmlagg(") ? 406 : 404;
  if (code === "42P01") return 404;
  if (code === "42P17") return 500;
  if (code === "42501") return authed ? 403 : 401;
  if (two === "PT") {
    const n = /^\d+$/.test(code.slice(2)) ? Number(code.slice(2)) : Number.NaN;
    return n >= 100 && n <= 999 ? n : 500;
  }
  return 400;
}

/** `raise sqlstate 'PGRST' using message = '{json}', detail = '{json}'`: full response control. */
function raisePgrst(err: ServerError): PgrstError {
  const parse = (text: string | undefined): Record<string, unknown> | undefined => {
    try {
      const v: unknown = text === undefined ? undefined : JSON.parse(text);
      return v && typeof v === "object" && !Array.isArray(v)
        ? (v as Record<string, unknown>)
        : undefined;
    } catch {
      return undefined;
    }
  };
  const msg = parse(err.message);
  const det = parse(err.detail);
  const parseError = (details: string, hint: string) =>
    pgrstError(
      500,
      "PGRST121",
      `Could not parse JSON in the "RAISE SQLSTATE 'PGRST'" error`,
      details,
      hint,
    );
  if (!msg || typeof msg.code !== "string" || typeof msg.message !== "string")
    return parseError(
      `Invalid JSON value for MESSAGE: '${err.message}'`,
      "MESSAGE must be a JSON object with obligatory keys: 'code', 'message' and optional keys: 'details', 'hint'.",
    );
  const detailHint =
    "DETAIL must be a JSON object with obligatory keys: 'status', 'headers' and optional key: 'status_text'.";
  if (err.detail === undefined)
    return parseError("DETAIL is missing in the RAISE statement", detailHint);
  if (
    !det ||
    typeof det.status !== "number" ||
    typeof det.headers !== "object" ||
    det.headers === null
  )
    return parseError(`Invalid JSON value for DETAIL: '${err.detail}'`, detailHint);
  const headers = Object.fromEntries(Object.entries(det.headers).map(([k, v]) => [k, String(v)]));
  const body = {
    code: msg.code,
    details: typeof msg.details === "string" ? msg.details : null,
    hint: typeof msg.hint === "string" ? msg.hint : null,
    message: msg.message,
  };
  return new PgrstError(
    det.status,
    body,
    headers,
    typeof det.status_text === "string" ? det.status_text : undefined,
  );
}

/**
 * Maps anything a database call threw to PostgREST's response. `phase` tells a failure to get a
 * connection (PGRST000, or PGRST003 when the pool wait timed out) from a connection that broke
 * mid-request (PGRST001).
 */
export function fromDatabaseError(
  err: unknown,
  authed: boolean,
  phase: "connect" | "session",
): PgrstError {
  if (err instanceof PgrstError) return err;
  if (isServerError(err)) {
    if (err.code === "PGRST") return raisePgrst(err);
    const status = statusForSqlState(err.code, err.message, authed);
    const body = {
      code: err.code,
      details: err.detail ?? null,
      hint: err.hint ?? null,
      message: err.message,
    };
    // PostgREST's mkStatus uses the message as the reason phrase for PTxyz codes.
    const statusText = err.code.startsWith("PT") ? err.message : undefined;
    return new PgrstError(
      status,
      body,
      status === 401 ? { "WWW-Authenticate": "Bearer" } : {},
      statusText,
    );
  }
  const detail = err instanceof Error ? err.message : String(err);
  if (phase === "connect" && /timeout exceeded when trying to connect/.test(detail))
    return pgrstError(504, "PGRST003", "Timed out acquiring connection from connection pool.");
  if (phase === "connect")
    return pgrstError(
      503,
      "PGRST000",
      "Database connection error. Retrying the connection.",
      detail,
    );
  return pgrstError(503, "PGRST001", "Database client error. Retrying the connection.", detail);
}
