/**
 * What a client may send, checked at the edge before anything is reserved. Every refusal is a
 * 4xx HttpError with a machine-readable code; nothing here touches the database.
 */
import * as z from "zod";
import { HttpError } from "./errors.ts";
import { isKindId, KIND_IDS, type KindId, loadKind } from "./kinds/index.ts";
import { isObject, MAX_TEXT_CHARS, textProblem } from "./kinds/kind.ts";
import { promptHoldTokens } from "./tokens.ts";

/** The longest prompt (or an extraction's text), in characters. */
export const MAX_PROMPT_CHARS = MAX_TEXT_CHARS;
/**
 * Request bodies above this are refused before they are buffered: an extraction's 8,000
 * characters of text (up to 4 bytes each) and its 16 KiB schema, with JSON around them.
 */
export const MAX_BODY_BYTES = 64 * 1024;

/** The legacy body `{"prompt"}` (its schema is also the OpenAPI document's, dev/openapi.ts). */
export const promptBody = z.object({ prompt: z.string() });

/** The prompt of a legacy `POST /api/jobs` body, `{"prompt"}`; extra fields are ignored. */
export function parsePrompt(body: unknown): string {
  const parsed = promptBody.safeParse(body);
  const refuse = (why: string) => new HttpError(400, "invalid_prompt", why);
  if (!parsed.success) throw refuse('The body must be a JSON object with a "prompt" string.');
  const problem = textProblem(parsed.data.prompt, "The prompt");
  if (problem) throw refuse(problem);
  return parsed.data.prompt;
}

/** A job request as the edge checked it: its kind, its input as stored, and what it holds. */
export interface JobRequest {
  kind: KindId;
  input: object;
  /** The `prompt` column: a document's prompt, an extraction's text. */
  text: string;
  /** The most its model input can bill (a token plan holds it plus the output bound). */
  holdTokens: number;
}

/** A document of a checked prompt: the legacy body's request. */
export const documentRequest = (prompt: string): JobRequest => ({
  kind: "document",
  input: { prompt },
  text: prompt,
  holdTokens: promptHoldTokens(prompt),
});

/**
 * A `POST /api/jobs` body: `{"kind", "input"}`, or the legacy `{"prompt"}` (a document, whose
 * refusals stay `invalid_prompt`). 400 `unknown_kind` for a kind that does not exist; 400
 * `invalid_input` with `details` (every problem, with its path) for an input the kind refuses.
 * Whether the user's plan offers the kind is the database's to say.
 */
export async function parseJobRequest(body: unknown): Promise<JobRequest> {
  if (!isObject(body) || !Object.hasOwn(body, "kind")) {
    return documentRequest(parsePrompt(body));
  }
  const { kind: id, input } = body;
  if (!isKindId(id)) {
    throw new HttpError(400, "unknown_kind", `"kind" must be one of: ${KIND_IDS.join(", ")}.`);
  }
  const kind = await loadKind(id);
  const parsed = await kind.parse(input);
  if (!parsed.ok) {
    const first = parsed.problems[0];
    throw new HttpError(
      400,
      "invalid_input",
      `The input is not valid: ${first ? `${first.path}: ${first.message}` : "unknown problem"}${parsed.problems.length > 1 ? ` (and ${parsed.problems.length - 1} more)` : ""}`,
      {},
      { details: parsed.problems },
    );
  }
  return {
    kind: id,
    input: parsed.input,
    text: kind.text(parsed.input),
    holdTokens: kind.holdTokens(parsed.input),
  };
}

/**
 * A `POST /api/jobs` body's optional `organization_id`: absent or null is a personal job; else a
 * UUID (any case, stored lower). 400 `invalid_organization_id` for anything else, before the
 * database is asked (docs/DESIGN.md#organizations).
 */
export function parseOrganizationId(body: unknown): string | null {
  if (!isObject(body) || !Object.hasOwn(body, "organization_id")) return null;
  const id = body.organization_id;
  if (id === null) return null;
  if (typeof id !== "string" || !isUuid(id)) {
    throw new HttpError(
      400,
      "invalid_organization_id",
      '"organization_id" must be the UUID of an organization you belong to, or null.',
    );
  }
  return id.toLowerCase();
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
