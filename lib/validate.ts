/**
 * What a client may send, checked at the edge before anything is reserved. Every refusal is a
 * 4xx HttpError with a machine-readable code; nothing here touches the database.
 */
import * as z from "zod";
import { HttpError } from "./errors.ts";

export const MAX_PROMPT_CHARS = 8000;
/** Request bodies above this are refused before they are buffered (8,000 chars of 4-byte UTF-8 + JSON). */
export const MAX_BODY_BYTES = 64 * 1024;

// C0/C1 control characters other than tab, newline and carriage return have no place in a
// prompt; NUL cannot even be stored in a Postgres text column.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const forbiddenControl = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/;

const promptBody = z.object({ prompt: z.string() });

/** The prompt of a `POST /api/jobs` body; extra fields are ignored. */
export function parsePrompt(body: unknown): string {
  const parsed = promptBody.safeParse(body);
  const refuse = (why: string) => new HttpError(400, "invalid_prompt", why);
  if (!parsed.success) throw refuse('The body must be a JSON object with a "prompt" string.');
  const prompt = parsed.data.prompt;
  if (prompt.trim().length === 0) throw refuse("The prompt is empty.");
  if (!prompt.isWellFormed()) throw refuse("The prompt is not valid Unicode text.");
  if ([...prompt].length > MAX_PROMPT_CHARS)
    throw refuse(`The prompt is longer than ${MAX_PROMPT_CHARS} characters.`);
  if (forbiddenControl.test(prompt)) throw refuse("The prompt contains control characters.");
  return prompt;
}

/** The optional `Idempotency-Key` header: 1 to 255 visible ASCII characters. */
export function parseIdempotencyKey(req: Request): string | null {
  const key = req.headers.get("idempotency-key");
  if (key === null) return null;
  if (!/^[\x21-\x7e]{1,255}$/.test(key)) {
    throw new HttpError(
      400,
      "invalid_idempotency_key",
      "Idempotency-Key must be 1 to 255 visible ASCII characters.",
    );
  }
  return key;
}

const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (s: string): boolean => uuid.test(s);

/** `GET /api/jobs?limit=&cursor=`: limit 1..100 (default 20); the cursor is opaque. */
export function parseListQuery(url: URL): {
  limit: number;
  before?: { createdAt: string; id: string };
} {
  const refuse = (why: string) => new HttpError(400, "invalid_query", why);
  const rawLimit = url.searchParams.get("limit");
  const limit = rawLimit === null ? 20 : Number(rawLimit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100)
    throw refuse("limit must be a whole number from 1 to 100.");
  const cursor = url.searchParams.get("cursor");
  if (cursor === null || cursor === "") return { limit };
  const before = decodeCursor(cursor);
  if (!before) throw refuse("cursor is not one this API gave out.");
  return { limit, before };
}

export function encodeCursor(job: { created_at: string; id: string }): string {
  return Buffer.from(JSON.stringify([job.created_at, job.id])).toString("base64url");
}

// What `encodeCursor` gives out: Postgres's ISO 8601 timestamptz (`2026-11-30T22:44:42.123456+00:00`).
const timestamp =
  /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.\d{1,6})?(?:Z|[+-](\d{2}):(\d{2}))$/;

/**
 * A timestamp Postgres accepts, checked field by field: `Date.parse` is far more lenient
 * ("2024-02-30", "1", "+275760-09-13") than Postgres, and a value it lets through would reach the
 * database and come back as an error, i.e. a 503 for the client's own mistake.
 */
function isTimestamp(s: string): boolean {
  const m = timestamp.exec(s);
  if (!m) return false;
  const [year, month, day, hour, minute, second, offsetHours = 0, offsetMinutes = 0] = m
    .slice(1)
    .map((x) => (x === undefined ? undefined : Number(x)));
  if (!year || !month || !day || month > 12) return false;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const daysInMonth = month === 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].includes(month) ? 30 : 31;
  return (
    day <= daysInMonth &&
    (hour ?? 99) <= 23 &&
    (minute ?? 99) <= 59 &&
    (second ?? 99) <= 59 &&
    offsetHours <= 15 &&
    offsetMinutes <= 59
  );
}

function decodeCursor(cursor: string): { createdAt: string; id: string } | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
    if (!Array.isArray(value) || value.length !== 2) return null;
    const [createdAt, id] = value as unknown[];
    if (typeof createdAt !== "string" || typeof id !== "string" || !isUuid(id)) return null;
    if (!isTimestamp(createdAt)) return null;
    return { createdAt, id };
  } catch {
    return null;
  }
}

/** The job id of `/api/jobs/:id` (Vercel passes it as `?id=`; the path works too). */
export function jobIdFrom(url: URL): string | null {
  const id = url.searchParams.get("id") ?? url.pathname.split("/").filter(Boolean).at(-1) ?? "";
  return isUuid(id) ? id.toLowerCase() : null;
}
