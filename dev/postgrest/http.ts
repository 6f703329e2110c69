/** Writing PostgREST-shaped HTTP responses for the RPC stand-in (dev/postgrest/index.ts). */
import type { IncomingHttpHeaders } from "node:http";
import { pgrstError } from "./errors.ts";
import type { Answer, Preferences } from "./negotiate.ts";
import type { Routine } from "./routines.ts";

export interface Reply {
  status: number;
  body?: string;
  headers: Record<string, string>;
  statusText?: string | undefined;
}

export const JSON_TYPE = "application/json; charset=utf-8";

/** PostgREST's body for each return kind; `.single()` (the object media type) on a set. */
export function shape(
  routine: Routine,
  headers: IncomingHttpHeaders,
  body: string | null,
  n: number,
  answer: Answer = "json",
  prefs: Pick<Preferences, "applied"> = { applied: [] },
): Reply {
  // PostgREST answers every call with a Content-Range; a function that returns one value (or
  // void) is one row: 0-0/*, or 0-0/1 when a count was asked for.
  const counted = /count=(exact|planned|estimated)/.exec(String(headers.prefer ?? ""))?.[0];
  const parts = [...(counted ? [counted] : []), ...prefs.applied];
  const applied: Record<string, string> =
    parts.length > 0 ? { "Preference-Applied": parts.join(", ") } : {};
  if (routine.returns === "void")
    return { status: 204, headers: { "Content-Range": `0-0/${counted ? 1 : "*"}`, ...applied } };
  const out: Record<string, string> = { "Content-Type": JSON_TYPE, ...applied };
  if (!routine.setof)
    return {
      status: 200,
      body: body ?? "null",
      headers: { ...out, "Content-Range": `0-0/${counted ? 1 : "*"}` },
    };
  if (answer === "object") {
    if (n !== 1)
      throw pgrstError(
        406,
        "PGRST116",
        "Cannot coerce the result to a single JSON object",
        `The result contains ${n} rows`,
      );
    return {
      status: 200,
      body: JSON.stringify((JSON.parse(body ?? "[]") as unknown[])[0]),
      headers: out,
    };
  }
  const count = counted ? String(n) : "*";
  out["Content-Range"] = n === 0 ? `*/${count}` : `0-${n - 1}/${count}`;
  return { status: 200, body: body ?? "[]", headers: out };
}

/** The reply as a Fetch `Response`: no body for HEAD or a null-body status, a status text only when it is valid on the wire. */
export function toResponse(reply: Reply, method: string): Response {
  const statusText =
    reply.statusText && /^[\t\x20-\x7e]*$/.test(reply.statusText) ? reply.statusText : undefined;
  const noBody = method === "HEAD" || [204, 205, 304].includes(reply.status);
  return new Response(noBody ? null : (reply.body ?? null), {
    status: reply.status,
    headers: reply.headers,
    ...(statusText ? { statusText } : {}),
  });
}

/** The `response.status` and `response.headers` settings a function may set, as PostgREST reads them. */
export function applyResponseGucs(
  reply: Reply,
  status: string | null,
  headers: string | null,
): void {
  if (status !== null) {
    const n = Number(status);
    if (!Number.isInteger(n) || n < 100 || n > 999)
      throw pgrstError(500, "PGRST112", "response.status guc must be a valid status code");
    reply.status = n;
  }
  if (headers === null) return;
  let list: unknown;
  try {
    list = JSON.parse(headers);
  } catch {}
  const valid = (h: unknown): h is Record<string, string> =>
    typeof h === "object" &&
    h !== null &&
    Object.keys(h).length === 1 &&
    Object.values(h).every((v) => typeof v === "string");
  if (!Array.isArray(list) || !list.every(valid))
    throw pgrstError(
      500,
      "PGRST111",
      "response.headers guc must be a JSON array composed of objects with a single key and a string value",
    );
  for (const h of list) Object.assign(reply.headers, h);
}
