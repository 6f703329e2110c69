/**
 * Structured Outputs in the fake model: what OpenAI refuses in a strict schema, and the JSON
 * value the fake answers for a schema (its own small generator: it shares nothing with the app,
 * so a disagreement between the two shows up in the tests).
 *
 * The refusal is OpenAI's 400, as it answers a strict schema outside its subset (error bodies
 * reported from the API; the first problem found, depth first):
 *
 * - Chat Completions: `{"message": "Invalid schema for response_format '<name>': In context=(),
 *   'additionalProperties' is required to be supplied and to be false.", "type":
 *   "invalid_request_error", "param": "response_format", "code": null}`;
 * - Responses: the same message, `"param": "text.format.schema"`, `"code": "invalid_json_schema"`.
 *
 * `context` is the path to the offending sub-schema as a Python tuple (`('properties', 'items',
 * 'items')`). Checked: the root is `type: "object"` ("schema must be a JSON Schema of 'type:
 * \"object\"', got 'type: \"array\"'", `"None"` when it has no type); every object has
 * `additionalProperties: false` and a `required` listing every key of `properties` ("Missing
 * '<key>'"); every sub-schema has a `type` unless it is an `anyOf`, a `$ref`, an `enum` or a
 * `const` ("schema must have a 'type' key."); `$defs` / `definitions` are checked the same way.
 * A format with `strict` not `true` is not checked, as OpenAI does not.
 */
import { type ErrorReply, openAIError } from "./errors.ts";

type Schema = Record<string, unknown>;

const isSchema = (value: unknown): value is Schema =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Python's repr of a string, as OpenAI's messages quote keys. */
const pyString = (s: string) =>
  s.includes("'") && !s.includes('"')
    ? `"${s}"`
    : `'${s.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;

/** Python's repr of a tuple of strings: `()`, `('a',)`, `('a', 'b')`. */
const pyTuple = (path: string[]) =>
  path.length === 1 ? `(${pyString(path[0] as string)},)` : `(${path.map(pyString).join(", ")})`;

/** OpenAI's 400 for a strict schema it does not accept, or undefined when it accepts it. */
export function strictSchemaError(
  api: "chat" | "responses",
  name: string,
  schema: unknown,
): ErrorReply | undefined {
  const problem = rootProblem(schema);
  if (problem === undefined) return undefined;
  return openAIError(
    400,
    `Invalid schema for response_format ${pyString(name)}: ${problem}`,
    "invalid_request_error",
    api === "chat" ? "response_format" : "text.format.schema",
    api === "chat" ? null : "invalid_json_schema",
  );
}

function rootProblem(schema: unknown): string | undefined {
  const type = isSchema(schema) ? schema.type : undefined;
  if (!isSchema(schema) || type !== "object") {
    const got =
      typeof type === "string" ? type : Array.isArray(type) ? JSON.stringify(type) : "None";
    return `schema must be a JSON Schema of 'type: "object"', got 'type: "${got}"'.`;
  }
  const found = nodeProblem(schema, []);
  if (found) return found;
  for (const key of ["$defs", "definitions"]) {
    const defs = schema[key];
    if (!isSchema(defs)) continue;
    for (const [name, sub] of Object.entries(defs)) {
      const inDef = nodeProblem(sub, [key, name]);
      if (inDef) return inDef;
    }
  }
  return undefined;
}

function nodeProblem(node: unknown, path: string[]): string | undefined {
  if (!isSchema(node)) return undefined;
  const at = (what: string) => `In context=${pyTuple(path)}, ${what}`;
  if (typeof node.$ref === "string") return undefined;
  if (Array.isArray(node.anyOf)) {
    for (const [i, variant] of node.anyOf.entries()) {
      const found = nodeProblem(variant, [...path, "anyOf", String(i)]);
      if (found) return found;
    }
    return undefined;
  }
  if (node.type === undefined) {
    if (Array.isArray(node.enum) || "const" in node) return undefined;
    return at("schema must have a 'type' key.");
  }
  const types = Array.isArray(node.type) ? node.type : [node.type];
  if (types.includes("object")) {
    if (node.additionalProperties !== false)
      return at("'additionalProperties' is required to be supplied and to be false.");
    const properties = isSchema(node.properties) ? node.properties : {};
    const required = Array.isArray(node.required) ? node.required : null;
    const missing = Object.keys(properties).find((key) => !required?.includes(key));
    if (required === null || missing !== undefined)
      return at(
        `'required' is required to be supplied and to be an array including every key in properties.${missing !== undefined ? ` Missing ${pyString(missing)}.` : ""}`,
      );
    for (const [key, sub] of Object.entries(properties)) {
      const found = nodeProblem(sub, [...path, "properties", key]);
      if (found) return found;
    }
  }
  if (types.includes("array") && node.items !== undefined)
    return nodeProblem(node.items, [...path, "items"]);
  return undefined;
}

/** What to make a value from. */
export interface Fill {
  /** The text strings are made of (the last user message, shortened). */
  text: string;
  /** A number derived from the prompt: numbers and integers start from it. */
  seed: number;
  /** `[fake:tokens:N]`: the first free-text string is this long instead (about N tokens). */
  longText?: string | undefined;
}

/** Past this depth a value takes the shortest way out: no optional items, null where allowed. */
const SETTLE_DEPTH = 4;
/** A schema whose only values are infinitely deep has none: give up here. */
const MAX_DEPTH = 40;

/**
 * A JSON value that conforms to `schema`: every property of an object (in order); the first of
 * an `enum`, the `const`; a string from the prompt (within `minLength`/`maxLength`, or shaped by a
 * `format`: date-time, date, time, email, uuid, uri, hostname, ipv4, ipv6, duration); a number
 * from the prompt within its bounds (an integer for `integer`, a multiple of `multipleOf`);
 * `true`; `null`; arrays of `minItems` (at least one while shallow) up to `maxItems` items;
 * the first variant of `anyOf` or of a `type` list that is not null (null once deep, where
 * allowed); a local `$ref` (`#`, `#/$defs/…`, `#/definitions/…`), recursion bounded.
 */
export function valueFor(schema: Schema, fill: Fill): unknown {
  const state = { longText: fill.longText };
  return make(schema, schema, fill, state, 0);
}

function make(
  node: unknown,
  root: Schema,
  fill: Fill,
  state: { longText: string | undefined },
  depth: number,
): unknown {
  if (!isSchema(node) || depth > MAX_DEPTH) return null;
  const settle = depth >= SETTLE_DEPTH;
  if (typeof node.$ref === "string")
    return make(resolve(root, node.$ref), root, fill, state, depth + 1);
  if (Array.isArray(node.enum)) return node.enum[0] ?? null;
  if ("const" in node) return node.const;
  const variants = node.anyOf ?? node.oneOf;
  if (Array.isArray(variants) && variants.length > 0) {
    const nullable = variants.find((v) => isSchema(v) && v.type === "null");
    const pick =
      settle && nullable
        ? nullable
        : (variants.find((v) => !(isSchema(v) && v.type === "null")) ?? variants[0]);
    return make(pick, root, fill, state, depth + 1);
  }
  const types = Array.isArray(node.type) ? node.type : [node.type];
  const type =
    settle && types.includes("null") ? "null" : (types.find((t) => t !== "null") ?? types[0]);
  switch (type) {
    case "object": {
      const properties = isSchema(node.properties) ? node.properties : {};
      return Object.fromEntries(
        Object.entries(properties).map(([key, sub]) => [
          key,
          make(sub, root, fill, state, depth + 1),
        ]),
      );
    }
    case "array": {
      const min = count(node.minItems, 0);
      const max = count(node.maxItems, Number.POSITIVE_INFINITY);
      const n = Math.min(max, Math.max(min, settle ? 0 : 1));
      return Array.from({ length: n }, () => make(node.items, root, fill, state, depth + 1));
    }
    case "string":
      return text(node, fill, state);
    case "integer":
    case "number":
      return number(node, fill.seed, type === "integer");
    case "boolean":
      return true;
    default:
      return null;
  }
}

const count = (value: unknown, otherwise: number) =>
  typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : otherwise;

/** A JSON pointer into the root (`#`, `#/$defs/Name`); null when it points nowhere. */
function resolve(root: Schema, ref: string): unknown {
  if (!ref.startsWith("#")) return null;
  let at: unknown = root;
  for (const raw of ref.slice(1).split("/").slice(1)) {
    const key = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    at = isSchema(at) ? at[key] : Array.isArray(at) ? at[Number(key)] : undefined;
    if (at === undefined) return null;
  }
  return at;
}

const FORMATS: Record<string, string> = {
  "date-time": "2026-01-15T09:30:00Z",
  date: "2026-01-15",
  time: "09:30:00Z",
  duration: "P1D",
  email: "someone@example.com",
  hostname: "example.com",
  ipv4: "192.0.2.1",
  ipv6: "2001:db8::1",
  uuid: "123e4567-e89b-42d3-a456-426614174000",
  uri: "https://example.com/",
};

function text(node: Schema, fill: Fill, state: { longText: string | undefined }): string {
  if (typeof node.format === "string" && node.format in FORMATS)
    return FORMATS[node.format] as string;
  const min = count(node.minLength, 0);
  const max = count(node.maxLength, Number.POSITIVE_INFINITY);
  let s = fill.text || "text";
  if (
    state.longText !== undefined &&
    node.pattern === undefined &&
    max === Number.POSITIVE_INFINITY
  ) {
    s = state.longText;
    state.longText = undefined;
  }
  while ([...s].length < min) s += " ".concat(fill.text || "text");
  return [...s].slice(0, max).join("");
}

function number(node: Schema, seed: number, integer: boolean): number {
  const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
  const step = num(node.multipleOf) ?? (integer ? 1 : undefined);
  let low = num(node.minimum) ?? Number.NEGATIVE_INFINITY;
  let high = num(node.maximum) ?? Number.POSITIVE_INFINITY;
  const exLow = num(node.exclusiveMinimum);
  const exHigh = num(node.exclusiveMaximum);
  if (exLow !== undefined) low = Math.max(low, exLow + (step ?? 1e-6));
  if (exHigh !== undefined) high = Math.min(high, exHigh - (step ?? 1e-6));
  let value = Math.min(Math.max(seed, low), high);
  if (step !== undefined && step > 0) {
    value = Math.ceil(value / step) * step;
    if (value > high) value -= step;
    if (integer) value = Math.round(value);
  }
  return value;
}

/**
 * `[fake:json_invalid]`: well-formed JSON that breaks the schema, as a provider that does not
 * enforce strict mode could send: the conforming object without a property the schema requires
 * (strict mode requires every one), or with an extra one when it requires none and allows no
 * other, or else the value wrapped in an array.
 */
export function invalidFor(schema: Schema, valid: unknown): unknown {
  if (isSchema(valid)) {
    const required = Array.isArray(schema.required) ? schema.required : [];
    const drop = Object.keys(valid).find((key) => required.includes(key));
    if (drop !== undefined) {
      const { [drop]: _dropped, ...rest } = valid;
      return rest;
    }
    if (schema.additionalProperties === false) return { ...valid, unexpected: true };
  }
  return [valid];
}
