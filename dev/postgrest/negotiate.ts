/**
 * The `Accept` and `Prefer` headers of an RPC call, read as PostgREST reads them
 * (src/library/PostgREST/ApiRequest/Preferences.hs, Plan.hs and Plan/Negotiate.hs), and refused
 * where the stand-in does not serve what PostgREST would: a client asking for CSV, stripped nulls,
 * GeoJSON or a query plan gets a loud 501 here rather than plain JSON it did not ask for, and
 * what PostgREST itself refuses is refused with its own status, code and words.
 */
import type { IncomingHttpHeaders } from "node:http";
import { pgrstError } from "./errors.ts";
import type { Routine } from "./routines.ts";

/** What the stand-in answers with: PostgREST's JSON, or `.single()`'s object. */
export type Answer = "json" | "object";

// Media types PostgREST would produce for a call, but the stand-in does not.
const UNSERVED: RegExp[] = [
  /^text\/csv$/,
  /^text\/plain$/,
  /^text\/xml$/,
  /^application\/octet-stream$/,
  /^application\/geo\+json$/,
  /^application\/vnd\.pgrst\.plan/,
  /^application\/vnd\.pgrst\.(object|array)\+json;.*nulls=stripped/,
];

function classify(entry: string): Answer | "unserved" | "unknown" {
  const type = entry.replace(/\s+/g, "").toLowerCase();
  if (UNSERVED.some((re) => re.test(type))) return "unserved";
  const bare = type.split(";")[0] ?? "";
  if (bare === "*/*" || bare === "application/json" || bare === "application/vnd.pgrst.array+json")
    return "json";
  if (bare === "application/vnd.pgrst.object+json") return "object";
  return "unknown";
}

/**
 * The answer the `Accept` header asks for: the first listed media type PostgREST can produce
 * decides. None → 406 PGRST107; one the stand-in does not produce → 501 PGRSTX01.
 */
export function negotiate(headers: IncomingHttpHeaders): Answer {
  const accept = String(headers.accept ?? "").trim();
  const entries = accept === "" ? ["*/*"] : accept.split(",").map((e) => e.trim());
  for (const entry of entries) {
    const kind = classify(entry);
    if (kind === "unknown") continue;
    if (kind === "unserved")
      throw pgrstError(
        501,
        "PGRSTX01",
        `The media type ${entry} is not supported by this local stand-in`,
        null,
        "Ask for application/json (the default) or .single(); PostgREST itself serves this type.",
      );
    return kind;
  }
  throw pgrstError(
    406,
    "PGRST107",
    `None of these media types are available: ${entries.join(", ")}`,
  );
}

/** The preferences PostgREST accepts as they are; `timezone=` and `max-affected=` take a value. */
const ACCEPTED = new Set([
  "resolution=merge-duplicates",
  "resolution=ignore-duplicates",
  "return=representation",
  "return=minimal",
  "return=headers-only",
  "count=exact",
  "count=planned",
  "count=estimated",
  "tx=commit",
  "tx=rollback",
  "missing=default",
  "missing=null",
  "handling=strict",
  "handling=lenient",
]);

export interface Preferences {
  strict: boolean;
  /** `max-affected=n`, applied only with `handling=strict` (as PostgREST applies it). */
  maxAffected: number | null;
  /** The `Preference-Applied` parts for handling and max-affected, in PostgREST's order. */
  applied: string[];
}

/**
 * The `Prefer` headers of a call to `routine`, as PostgREST reads them. With `handling=strict`,
 * a preference PostgREST does not know is 400 PGRST122, and `max-affected` on a function that
 * does not return a set is 400 PGRST128 (the row count is checked after the call:
 * {@link checkMaxAffected}). `timezone=` sets the session's time zone in PostgREST, which the
 * stand-in does not: 501 rather than an answer in the wrong zone.
 */
export function preferences(headers: IncomingHttpHeaders, routine: Routine): Preferences {
  const raw = headers.prefer;
  const prefs = (Array.isArray(raw) ? raw : raw === undefined ? [] : [raw])
    .flatMap((h) => h.split(","))
    .map((p) => p.trim())
    .filter((p) => p !== "");
  const handling = prefs.find((p) => p === "handling=strict" || p === "handling=lenient");
  const strict = handling === "handling=strict";
  const invalid = prefs.filter(
    (p) => !ACCEPTED.has(p) && !p.startsWith("timezone=") && !p.startsWith("max-affected="),
  );
  if (strict && invalid.length > 0)
    throw pgrstError(
      400,
      "PGRST122",
      "Invalid preferences given with handling=strict",
      `Invalid preferences: ${invalid.join(", ")}`,
    );
  const timezone = prefs.find((p) => p.startsWith("timezone="));
  if (timezone)
    throw pgrstError(
      501,
      "PGRSTX01",
      `The preference ${timezone} is not supported by this local stand-in`,
      null,
      "Format times in SQL; PostgREST itself sets the session's time zone for this preference.",
    );
  const value = prefs.find((p) => p.startsWith("max-affected="))?.slice("max-affected=".length);
  const parsed = value !== undefined && /^\d+$/.test(value) ? Number(value) : null;
  const maxAffected = strict ? parsed : null;
  if (maxAffected !== null && !routine.setof)
    throw pgrstError(
      400,
      "PGRST128",
      "Function must return SETOF or TABLE when max-affected preference is used with handling=strict",
    );
  return {
    strict,
    maxAffected,
    applied: [
      ...(handling ? [handling] : []),
      ...(maxAffected !== null ? [`max-affected=${maxAffected}`] : []),
    ],
  };
}

/** After the call, before its commit: a set larger than `max-affected` is 400 PGRST124 (rolled back). */
export function checkMaxAffected(prefs: Preferences, rows: number): void {
  if (prefs.maxAffected !== null && rows > prefs.maxAffected)
    throw pgrstError(
      400,
      "PGRST124",
      "Query result exceeds max-affected preference constraint",
      `The query affects ${rows} rows`,
    );
}
