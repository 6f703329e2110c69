/**
 * PostgREST's function resolution: of a name's overloads (dev/postgrest/catalog.ts), pick the
 * one whose parameter names fit the request's keys, and build the SQL that calls it with named
 * arguments typed by the signature (PostgREST's `json_to_record` trick: the body is
 * one json parameter and Postgres casts each field to the parameter's declared type).
 */
import { pgrstError } from "./errors.ts";

export interface RoutineParam {
  name: string;
  type: string;
  variadic: boolean;
  hasDefault: boolean;
}

export interface Routine {
  schema: string;
  name: string;
  params: RoutineParam[];
  /** void → 204; scalar → the bare value; row → an object (composite, OUT params, table). */
  returns: "void" | "scalar" | "row";
  setof: boolean;
}

const isSingleUnnamedJson = (r: Routine) =>
  r.params.length === 1 &&
  r.params[0]?.name === "" &&
  (r.params[0].type === "json" || r.params[0].type === "jsonb");

/** The function's one parameter has no name: PostgREST calls it positionally, `f($1)`. */
const isPositional = (r: Routine) => r.params.length === 1 && r.params[0]?.name === "";

const POSITIONAL_TYPES = new Set(["bytea", "json", "jsonb", "text", "xml"]);

/**
 * PostgREST's schema cache holds only functions it can call: no unnamed parameter, or exactly
 * one of a type a raw body can fill (bytea, json, jsonb, text, xml). The rest (`f(int, int)`,
 * `f(int)`) are not found at all: 404 PGRST202, never a call with positional guesses.
 */
export function isCallable(r: Routine): boolean {
  const unnamed = r.params.filter((p) => p.name === "");
  return (
    unnamed.length === 0 || (unnamed.length === 1 && POSITIONAL_TYPES.has(unnamed[0]?.type ?? ""))
  );
}

export interface Picked {
  routine: Routine;
  /** The whole body goes to the function's one unnamed parameter, positionally. */
  single: boolean;
}

/** PostgREST's overload resolution by argument names; 404 PGRST202 / 300 PGRST203 otherwise. */
export function pickRoutine(
  schema: string,
  name: string,
  routines: Routine[],
  keys: string[] | undefined,
  isPost: boolean,
): Picked {
  const given = keys ?? [];
  // The key "" names an unnamed parameter only when that is the function's one parameter
  // (PostgREST then passes the whole body positionally); beside named ones it has no name to
  // pass it by, so it matches nothing.
  const fits = (r: Routine) =>
    keys !== undefined &&
    (!given.includes("") || isPositional(r)) &&
    given.every((k) => r.params.some((p) => p.name === k)) &&
    r.params.every((p) => p.hasDefault || given.includes(p.name));
  const named = routines.filter(fits);
  const [first, ...rest] = named;
  if (first && rest.length === 0) return { routine: first, single: isPositional(first) };
  if (first)
    throw pgrstError(
      300,
      "PGRST203",
      `Could not choose the best candidate function between: ${named
        .map(
          (r) =>
            `${r.schema}.${r.name}(${r.params.map((p) => `${p.name} => ${p.type}`).join(", ")})`,
        )
        .join(", ")}`,
      null,
      "Try renaming the parameters or the function itself in the database so function overloading can be resolved",
    );
  const single = isPost ? routines.find(isSingleUnnamedJson) : undefined;
  if (single) return { routine: single, single: true };

  const sorted = [...(keys ?? [])].sort();
  const fn = `${schema}.${name}`;
  const withParams = (prefix: string) =>
    sorted.length === 0
      ? " without parameters"
      : `${prefix}${sorted.length > 1 ? "s" : ""} ${sorted.join(", ")}`;
  // PostgREST fuzzy-matches the overloads' parameter lists for the hint; the closest by shared
  // names is near enough for a local stand-in.
  const overlap = (r: Routine) => r.params.filter((p) => sorted.includes(p.name)).length;
  const closest = [...routines].sort((a, b) => overlap(b) - overlap(a))[0];
  throw pgrstError(
    404,
    "PGRST202",
    `Could not find the function ${fn}${sorted.length === 0 ? " without parameters" : `(${sorted.join(", ")})`} in the schema cache`,
    `Searched for the function ${fn}${withParams(" with parameter")}${isPost ? " or with a single unnamed json/jsonb parameter" : ""}, but no matches were found in the schema cache.`,
    closest
      ? `Perhaps you meant to call the function ${fn}(${closest.params
          .map((p) => p.name)
          .sort()
          .join(", ")})`
      : null,
  );
}

const ident = (s: string) => `"${s.replaceAll('"', '""')}"`;

/**
 * One statement that calls the routine and returns `body` (JSON text or null), `n` (rows, for
 * Content-Range) and the `response.status`/`response.headers` GUCs the function may have set.
 */
export function buildCall(
  { routine, single }: Picked,
  args: unknown,
  /**
   * Writes the arguments' JSON into the text as a literal (`client.escapeLiteral`) instead of
   * `$1`, so the statement can share a simple-protocol round trip with others; `values` is then
   * empty. A quoted literal is of type unknown until its cast, as an untyped `$1` is.
   */
  inline?: (value: string) => string,
): { text: string; values: unknown[] } {
  const fn = `${ident(routine.schema)}.${ident(routine.name)}`;
  let call: string;
  let from = "";
  let values: unknown[] = [];
  if (single) {
    call = `${fn}($1::${routine.params[0]?.type})`;
    values = [JSON.stringify(args)];
  } else {
    const given = args as Record<string, unknown>;
    const passed = routine.params.filter((p) => Object.hasOwn(given, p.name));
    call = `${fn}(${passed.map((p) => `${p.variadic ? "variadic " : ""}${ident(p.name)} => pgrst_args.${ident(p.name)}`).join(", ")})`;
    if (passed.length > 0) {
      from = `pg_catalog.json_to_record($1::json) as pgrst_args(${passed.map((p) => `${ident(p.name)} ${p.type}`).join(", ")})`;
      values = [JSON.stringify(Object.fromEntries(passed.map((p) => [p.name, given[p.name]])))];
    }
  }
  const lateral = (alias: string) =>
    from ? `${from}, lateral ${call} as ${alias}` : `${call} as ${alias}`;
  let source: string;
  let body: string;
  let n = "1";
  if (routine.returns === "row") {
    source = `select pgrst_call.* from ${lateral("pgrst_call")}`;
    body = routine.setof ? `coalesce(json_agg(pgrst_source), '[]')` : "to_json(pgrst_source)";
  } else if (routine.setof) {
    source = `select pgrst_call.v from ${lateral("pgrst_call(v)")}`;
    body = `coalesce(json_agg(pgrst_source.v), '[]')`;
  } else {
    source = `select ${call} as v${from ? ` from ${from}` : ""}`;
    body = routine.returns === "void" ? "null" : "to_json(pgrst_source.v)";
  }
  if (routine.setof) n = "count(*)";
  const text = `select ${body}::text as body, ${n}::int as n,
    nullif(current_setting('response.status', true), '') as status,
    nullif(current_setting('response.headers', true), '') as headers
    from (${source}) pgrst_source`;
  const [value] = values;
  if (inline && typeof value === "string")
    return { text: text.replace("$1::", () => `${inline(value)}::`), values: [] };
  return { text, values };
}
