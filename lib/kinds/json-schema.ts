/**
 * The JSON Schema of an extraction: `checkStrictSchema` decides, before anything is reserved,
 * whether a user's schema is one we send to OpenAI with `strict: true`; `validateAgainst` checks
 * a model's parsed output against it.
 *
 * The subset is OpenAI's documented Structured Outputs subset ("Supported schemas", in the
 * guide "Structured model outputs",
 * https://developers.openai.com/api/docs/guides/structured-outputs#supported-schemas, as the
 * stored copy read on 2026-12-02 gives it; the copy carries no date of its own), narrowed where
 * noted (*):
 *
 * - Types: string, number, integer, boolean, object, array, null, `enum`, `anyOf`; `type` is one
 *   name or a list of names (`["string", "null"]` is how an optional field is written).
 * - The root is an object schema (`type: "object"`), not `anyOf`.
 * - Every object schema has `additionalProperties: false` and lists every key of `properties` in
 *   `required` (and nothing else).
 * - Keywords by type. string: `format` (date-time, time, date, duration, email, hostname, ipv4,
 *   ipv6, uuid). number, integer: `multipleOf`, `minimum`, `maximum`, `exclusiveMinimum`,
 *   `exclusiveMaximum`. array: `items` (one schema, required), `minItems`, `maxItems`. object:
 *   `properties`, `required`, `additionalProperties`. Any schema: `description`, `title`,
 *   `enum`, `const`, `anyOf` (each branch in this subset), `$ref`. Every other keyword is
 *   refused, which covers the ones the page names as unsupported (`allOf`, `not`,
 *   `dependentRequired`, `dependentSchemas`, `if`/`then`/`else`) and the older page's list
 *   (`patternProperties`, `unevaluated*`, `propertyNames`, `min/maxProperties`, `contains`,
 *   `uniqueItems`, `minLength`/`maxLength`, ...).
 * - `$defs` and `$ref`, recursion through `"#"` included.
 * - At most 10 levels of nesting. The page does not say what a level is: we count the object and
 *   array schemas on a path from the root (the root is level 1), the nesting of the output value.
 * - At most 1000 enum values in the schema; one enum of more than 250 values holds at most
 *   15,000 characters of strings.
 * - At most 5000 object properties, and 120,000 characters of property names, definition names,
 *   enum and const values: not checked, because the 16 KiB cap below makes both unreachable (a
 *   property costs at least 11 bytes of JSON: `"k":{},` plus `"k",` in `required`, so 16 KiB
 *   holds under 1,500; every counted string is inside the JSON text). A test holds this.
 *
 * (*) Where we are stricter than OpenAI, and why:
 * - `pattern` is refused: the worker validates every output with Ajv, which would run a regular
 *   expression of the user's choosing on model output (a catastrophic-backtracking pattern stalls
 *   the worker: ReDoS).
 * - The schema is at most 16 KiB as JSON (UTF-8): it is stored with the job, sent on every
 *   attempt, and compiled by Ajv in the worker.
 * - `$ref` is only `"#"` or `"#/$defs/<name>"` to an existing definition, `$defs` only at the
 *   root, names of letters, digits, `_` and `-`: nothing is fetched, nothing needs decoding.
 * - Subschemas nest at most 32 deep (anyOf in anyOf included), checked without recursion before
 *   Ajv sees the schema: Ajv recurses per level, and 16 KiB of nested anyOf overflows its stack.
 *   Likewise an output nested over 1000 levels is refused before Ajv validates it.
 * - What checking an answer may cost is bounded (lib/kinds/schema-cost.ts): no `$ref` cycle
 *   through no property or item, one branch per value that recurses through a given property,
 *   at most 64 schemas on one value. OpenAI's limits admit schemas that Ajv, which memoises
 *   nothing, checks in time exponential in the answer's depth. The check itself also stops at
 *   {@link OUTPUT_CHECK_DEADLINE_MS}.
 * - `enum` and `const` values are strings, numbers, booleans or null, of the schema's type, and
 *   an enum lists a value once. As in JSON Schema, `type` and `enum` both hold: OpenAI's own
 *   `"type": ["string", "null"], "enum": ["F", "C"]` does not let null through; list null in
 *   the enum for that.
 *
 * How: the subset's shape is data, a meta-schema Ajv checks the user's schema against (its error
 * paths are the user's paths for free, and a rule is one line of data, not a branch of code).
 * A short walk does what a meta-schema cannot say: `required` equals the keys of `properties`,
 * `$ref` targets exist, keywords fit the declared type, depth, enum counts, the size cap.
 *
 * This module loads Ajv; the extract kind imports it lazily so a document never pays for it.
 */
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { within } from "./deadline.ts";
import { MAX_SCHEMA_BYTES } from "./extract-form.ts";
import { type CostRules, checkEvaluationCost } from "./schema-cost.ts";

export interface InputProblem {
  /** Where, like `input.schema.properties.age.type` or `output.items[0].name`. */
  path: string;
  message: string;
}

/** Problems reported at most; a schema with more gets the first ones. */
export const MAX_PROBLEMS = 20;
export { MAX_SCHEMA_BYTES };
export const MAX_NESTING = 10;
export const MAX_SUBSCHEMA_DEPTH = 32;
/**
 * Nesting of objects and arrays an output may have. Ajv's validator recurses once per level of a
 * recursive schema ($ref "#") and overflows the stack near 10,000; an output past this is
 * refused before Ajv sees it.
 */
export const MAX_OUTPUT_NESTING = 1000;
export const MAX_ENUM_VALUES = 1000;
export const LARGE_ENUM_VALUES = 250;
export const MAX_LARGE_ENUM_CHARS = 15_000;
/** Compiled validators kept; the least recently used is dropped past this. */
export const VALIDATOR_CACHE_SIZE = 100;

const TYPES = ["string", "number", "integer", "boolean", "object", "array", "null"] as const;
const FORMATS = [
  "date-time",
  "time",
  "date",
  "duration",
  "email",
  "hostname",
  "ipv4",
  "ipv6",
  "uuid",
] as const;
const DEF_NAME = "^[A-Za-z0-9_-]{1,64}$";

/** Which keywords need which type: a keyword applies when the schema's type includes one. */
const KEYWORD_TYPES: Record<string, readonly string[]> = {
  format: ["string"],
  multipleOf: ["number", "integer"],
  minimum: ["number", "integer"],
  maximum: ["number", "integer"],
  exclusiveMinimum: ["number", "integer"],
  exclusiveMaximum: ["number", "integer"],
  items: ["array"],
  minItems: ["array"],
  maxItems: ["array"],
  properties: ["object"],
  required: ["object"],
  additionalProperties: ["object"],
};

const notOpenAI = (what: string) => `OpenAI's strict mode does not support ${what}.`;
/** Why a keyword is refused, when there is more to say than "not in the subset". */
const REFUSED: Record<string, string> = {
  pattern:
    "pattern is refused: this service would run your regular expression on every output. Describe the format in description instead, or use format.",
  oneOf: `${notOpenAI("oneOf")} Use anyOf.`,
  allOf: `${notOpenAI("allOf")} Write the combined object out, or use anyOf.`,
  not: notOpenAI("not"),
  if: notOpenAI("if/then/else"),
  // biome-ignore lint/suspicious/noThenProperty: a lookup table keyed by JSON Schema keywords, never awaited
  then: notOpenAI("if/then/else"),
  else: notOpenAI("if/then/else"),
  dependentRequired: notOpenAI("dependentRequired"),
  dependentSchemas: notOpenAI("dependentSchemas"),
  patternProperties: `${notOpenAI("patternProperties")} List the properties.`,
  propertyNames: `${notOpenAI("propertyNames")} List the properties.`,
  unevaluatedProperties: `${notOpenAI("unevaluatedProperties")} Use additionalProperties: false.`,
  unevaluatedItems: notOpenAI("unevaluatedItems"),
  minProperties: `${notOpenAI("minProperties")}: every listed property is required anyway.`,
  maxProperties: `${notOpenAI("maxProperties")}: every listed property is required anyway.`,
  contains: notOpenAI("contains"),
  minContains: notOpenAI("minContains"),
  maxContains: notOpenAI("maxContains"),
  uniqueItems: notOpenAI("uniqueItems"),
  prefixItems: `${notOpenAI("prefixItems")} Use items with one schema.`,
  minLength: "minLength is not among the string keywords OpenAI documents (format).",
  maxLength: "maxLength is not among the string keywords OpenAI documents (format).",
  definitions: "Use $defs (at the root) instead of definitions.",
  $defs: "$defs is allowed only at the root of the schema.",
  $id: "Remove $id: only local references (#, #/$defs/...) are supported.",
  $schema: "Remove $schema: the schema is read as JSON Schema 2020-12 in OpenAI's strict subset.",
  $anchor: "Remove $anchor: only local references (#, #/$defs/...) are supported.",
  $dynamicRef: "Use $ref to # or #/$defs/... instead of $dynamicRef.",
  $dynamicAnchor: "Remove $dynamicAnchor: only local references (#, #/$defs/...) are supported.",
  default: "default is not supported in strict mode: every property is always filled in.",
};

const REQUIRED_MESSAGES: Record<string, string> = {
  type: 'The root schema needs "type": "object".',
  additionalProperties: 'An object schema needs "additionalProperties": false.',
  items: "An array schema needs items: the schema of its elements.",
};

// --- the subset as a meta-schema ------------------------------------------------------------

// `x-message` is an annotation on a meta-schema rule: the message a user reads when it fails.
const say = (message: string, schema: object) => ({ ...schema, "x-message": message });
const nodeRef = { $ref: "#/$defs/node" };
const number = (keyword: string) => say(`${keyword} must be a number.`, { type: "number" });
const count = (keyword: string) =>
  say(`${keyword} must be a whole number, 0 or more.`, { type: "integer", minimum: 0 });
const scalar = ["string", "number", "boolean", "null"];

const keywords = {
  type: say(`type must be one of ${TYPES.join(", ")}, or a list of them.`, {
    anyOf: [
      { enum: TYPES },
      { type: "array", minItems: 1, uniqueItems: true, items: { enum: TYPES } },
    ],
  }),
  description: say("description must be a string.", { type: "string" }),
  title: say("title must be a string.", { type: "string" }),
  // No uniqueItems here: Ajv compares every pair of a list of arrays or objects (quadratic in
  // a 16 KiB list); the walk finds repeats among the scalars it allows, with a Set.
  enum: say("enum must be a list of values.", {
    type: "array",
    minItems: 1,
    items: say("An enum value must be a string, number, boolean or null.", { type: scalar }),
  }),
  const: say("const must be a string, number, boolean or null.", { type: scalar }),
  anyOf: say("anyOf must be a list of schemas.", { type: "array", minItems: 1, items: nodeRef }),
  $ref: say('$ref must be "#" or "#/$defs/<name>" (a definition of this schema).', {
    type: "string",
    pattern: `^#(/\\$defs/${DEF_NAME.slice(1, -1)})?$`,
  }),
  properties: say("properties must map property names to schemas.", {
    type: "object",
    additionalProperties: nodeRef,
  }),
  required: say("required must be a list of distinct property names.", {
    type: "array",
    uniqueItems: true,
    items: { type: "string" },
  }),
  additionalProperties: say("additionalProperties must be false: OpenAI's strict mode needs it.", {
    const: false,
  }),
  items: nodeRef,
  minItems: count("minItems"),
  maxItems: count("maxItems"),
  format: say(`format must be one of ${FORMATS.join(", ")}.`, { enum: FORMATS }),
  multipleOf: say("multipleOf must be a number above 0.", {
    type: "number",
    exclusiveMinimum: 0,
  }),
  minimum: number("minimum"),
  maximum: number("maximum"),
  exclusiveMinimum: number("exclusiveMinimum"),
  exclusiveMaximum: number("exclusiveMaximum"),
};

const metaSchema = {
  $defs: {
    node: {
      type: "object",
      "x-message": "A schema must be a JSON object.",
      properties: keywords,
      additionalProperties: false,
    },
  },
  type: "object",
  properties: {
    ...keywords,
    type: say('The root schema must have "type": "object".', { const: "object" }),
    anyOf: say("The root schema must be an object schema, not anyOf.", { not: {} }),
    $defs: say("$defs must map definition names (letters, digits, _ and -) to schemas.", {
      type: "object",
      propertyNames: { pattern: DEF_NAME },
      additionalProperties: nodeRef,
    }),
  },
  required: ["type"],
  additionalProperties: false,
};

let checkShape: ValidateFunction | undefined;
function shapeValidator(): ValidateFunction {
  if (!checkShape) {
    const ajv = new Ajv2020({ allErrors: true, verbose: true, allowUnionTypes: true });
    ajv.addKeyword({ keyword: "x-message", schemaType: "string" });
    checkShape = ajv.compile(metaSchema);
  }
  return checkShape;
}

// --- paths ------------------------------------------------------------------------------------

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/** `base` followed by `segments`, reading `value` to tell an array index from an object key. */
function joinPath(base: string, value: unknown, segments: readonly string[]): string {
  let path = base;
  let at: unknown = value;
  for (const segment of segments) {
    if (Array.isArray(at)) path += `[${segment}]`;
    else path += IDENTIFIER.test(segment) ? `.${segment}` : `[${JSON.stringify(segment)}]`;
    at = at !== null && typeof at === "object" ? (at as Record<string, unknown>)[segment] : at;
  }
  return path;
}

function pointerSegments(pointer: string): string[] {
  if (pointer === "") return [];
  return pointer
    .slice(1)
    .split("/")
    .map((s) => s.replaceAll("~1", "/").replaceAll("~0", "~"));
}

/** Where `value` first nests objects and arrays more than `limit` deep, if it does (no recursion). */
function firstTooDeep(value: unknown, limit: number): string[] | undefined {
  type Step = { value: unknown; key: string; depth: number; parent: Step | undefined };
  const stack: Step[] = [{ value, key: "", depth: 1, parent: undefined }];
  for (let step = stack.pop(); step !== undefined; step = stack.pop()) {
    if (step.depth > limit) {
      const segments: string[] = [];
      for (let at: Step | undefined = step; at?.parent !== undefined; at = at.parent) {
        segments.unshift(at.key);
      }
      return segments;
    }
    for (const [key, child] of Object.entries(step.value as object)) {
      if (child !== null && typeof child === "object") {
        stack.push({ value: child, key, depth: step.depth + 1, parent: step });
      }
    }
  }
  return undefined;
}

// --- checkStrictSchema ------------------------------------------------------------------------

/**
 * Whether `schema` is one we send to OpenAI as a strict Structured Outputs schema.
 *
 * @param path where the schema sits in the request, for the problems' paths.
 * @default path "input.schema"
 * @returns `[]` when it is; else every problem found, at most {@link MAX_PROBLEMS}.
 * @example checkStrictSchema({ type: "object", properties: {}, required: [], additionalProperties: false }) // []
 */
export function checkStrictSchema(schema: unknown, path = "input.schema"): InputProblem[] {
  return strictProblems(schema, path, "all");
}

/** {@link checkStrictSchema}, with `cost` saying which of lib/kinds/schema-cost.ts's rules apply. */
function strictProblems(schema: unknown, path: string, cost: CostRules): InputProblem[] {
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) {
    return [{ path, message: "The schema must be a JSON object." }];
  }
  let text: string;
  try {
    text = JSON.stringify(schema);
  } catch {
    return [{ path, message: "The schema must be plain JSON." }];
  }
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > MAX_SCHEMA_BYTES) {
    return [
      { path, message: `The schema is ${bytes} bytes as JSON; at most ${MAX_SCHEMA_BYTES}.` },
    ];
  }
  // Ajv's meta-schema check recurses per level and overflows the stack on a deep enough 16 KiB
  // schema (1,300 nested anyOf): the nesting is bounded first, without recursion. A subschema
  // adds at most two levels of JSON (properties, then the property; anyOf, then the branch).
  const deep = firstTooDeep(schema, 2 * MAX_SUBSCHEMA_DEPTH + 1);
  if (deep !== undefined) {
    return [
      {
        path: joinPath(path, schema, deep),
        message: `Subschemas nest more than ${MAX_SUBSCHEMA_DEPTH} deep here.`,
      },
    ];
  }
  const problems: InputProblem[] = [];
  const seen = new Set<string>();
  const add = (segments: readonly string[], message: string) => {
    if (problems.length >= MAX_PROBLEMS) return;
    const problem = { path: joinPath(path, schema, segments), message };
    const key = `${problem.path}\n${message}`;
    if (!seen.has(key)) {
      seen.add(key);
      problems.push(problem);
    }
  };
  const validate = shapeValidator();
  if (!validate(schema)) {
    for (const error of shapeErrors(validate.errors ?? [])) {
      const [segments, message] = explain(error);
      add(segments, message);
    }
  }
  walk(schema as Record<string, unknown>, add);
  // What checking an answer can cost, once every $ref is known to resolve (lib/kinds/schema-cost.ts).
  // Without anyOf or $ref every value is checked by one schema: nothing to find.
  if (problems.length === 0 && /"(anyOf|\$ref)"/.test(text)) {
    checkEvaluationCost(schema as Record<string, unknown>, add, cost);
  }
  return problems.slice(0, MAX_PROBLEMS);
}

/**
 * Ajv's errors less the noise: a failed anyOf stands for its inline branches' errors (which Ajv
 * lists just before it), if for its then.
 */
function shapeErrors(errors: ErrorObject[]): ErrorObject[] {
  const kept: ErrorObject[] = [];
  let branches: ErrorObject | undefined;
  for (let i = errors.length - 1; i >= 0; i--) {
    const error = errors[i] as ErrorObject;
    if (
      branches !== undefined &&
      error.schemaPath.startsWith(`${branches.schemaPath}/`) &&
      error.instancePath.startsWith(branches.instancePath)
    ) {
      continue;
    }
    branches = error.keyword === "anyOf" ? error : undefined;
    if (error.keyword !== "if") kept.push(error);
  }
  return kept.reverse();
}

function explain(error: ErrorObject): [string[], string] {
  const segments = pointerSegments(error.instancePath);
  if (error.keyword === "additionalProperties") {
    // A keyword outside the subset. The root's list has $defs, so "$defs" here is a nested one.
    const keyword = String(error.params.additionalProperty);
    const known = Object.hasOwn(REFUSED, keyword) ? REFUSED[keyword] : undefined;
    return [
      [...segments, keyword],
      known ?? `${keyword} is not a keyword of OpenAI's strict JSON Schema subset.`,
    ];
  }
  if (error.keyword === "required") {
    const missing = String(error.params.missingProperty);
    return [[...segments, missing], REQUIRED_MESSAGES[missing] ?? `${missing} is required here.`];
  }
  if (error.keyword === "propertyNames" || error.propertyName !== undefined) {
    const name = error.propertyName ?? String(error.params.propertyName);
    return [[...segments, name], "A definition name is 1 to 64 letters, digits, _ or -."];
  }
  const message = (error.parentSchema as Record<string, unknown> | undefined)?.["x-message"];
  return [segments, typeof message === "string" ? message : `The schema ${error.message}.`];
}

// --- the walk: what the meta-schema cannot say ----------------------------------------------

type Add = (segments: readonly string[], message: string) => void;
type Node = Record<string, unknown>;

const isNode = (value: unknown): value is Node =>
  value !== null && typeof value === "object" && !Array.isArray(value);

/** The schema's type names, or undefined when it has none (or a malformed one). */
function typeList(type: unknown): string[] | undefined {
  const names = typeof type === "string" ? [type] : type;
  if (!Array.isArray(names) || names.length === 0) return undefined;
  if (!names.every((t) => (TYPES as readonly unknown[]).includes(t))) return undefined;
  return names as string[];
}

function fitsType(value: unknown, types: readonly string[]): boolean {
  if (value === null) return types.includes("null");
  if (typeof value === "number") {
    return types.includes("number") || (types.includes("integer") && Number.isInteger(value));
  }
  return types.includes(typeof value);
}

function walk(root: Node, add: Add): void {
  const defs = isNode(root.$defs) ? root.$defs : {};
  let enumValues = 0;
  let enumCountReported = false;

  const visit = (node: unknown, at: string[], outer: number, depth: number): void => {
    if (!isNode(node)) return;
    if (depth > MAX_SUBSCHEMA_DEPTH) {
      add(at, `Subschemas nest more than ${MAX_SUBSCHEMA_DEPTH} deep here.`);
      return;
    }
    const types = typeList(node.type);
    const level = types?.some((t) => t === "object" || t === "array") ? outer + 1 : outer;
    if (level > MAX_NESTING) {
      add(at, `Objects and arrays nest more than ${MAX_NESTING} levels deep here.`);
      return;
    }
    if (!["type", "anyOf", "$ref", "enum", "const"].some((k) => k in node)) {
      add(at, "Say what this value is: give it a type (or anyOf, enum, const or $ref).");
    }
    for (const keyword of Object.keys(node)) {
      const wants = KEYWORD_TYPES[keyword];
      if (wants === undefined || !Object.hasOwn(KEYWORD_TYPES, keyword)) continue;
      if (types === undefined) {
        if (!("type" in node)) add([...at, keyword], `${keyword} needs "type": "${wants[0]}".`);
      } else if (!wants.some((t) => types.includes(t))) {
        add(
          [...at, keyword],
          `${keyword} applies to ${wants.join(" or ")}, not ${types.join(" or ")}.`,
        );
      }
    }
    if (types?.includes("array") && !("items" in node))
      add([...at, "items"], REQUIRED_MESSAGES.items ?? "");
    if (types?.includes("object")) {
      if (!("additionalProperties" in node)) {
        add([...at, "additionalProperties"], REQUIRED_MESSAGES.additionalProperties ?? "");
      }
      checkRequired(node, at, add);
    }
    if (typeof node.$ref === "string" && node.$ref.startsWith("#/$defs/")) {
      const name = node.$ref.slice("#/$defs/".length);
      if (!Object.hasOwn(defs, name)) {
        add([...at, "$ref"], `$ref points to #/$defs/${name}, which this schema does not define.`);
      }
    }
    if (Array.isArray(node.enum)) {
      enumValues += node.enum.length;
      if (enumValues > MAX_ENUM_VALUES && !enumCountReported) {
        enumCountReported = true;
        add([...at, "enum"], `The schema has more than ${MAX_ENUM_VALUES} enum values in all.`);
      }
      const chars = node.enum.reduce<number>(
        (n, v) => n + (typeof v === "string" ? v.length : 0),
        0,
      );
      if (node.enum.length > LARGE_ENUM_VALUES && chars > MAX_LARGE_ENUM_CHARS) {
        add(
          [...at, "enum"],
          `An enum of more than ${LARGE_ENUM_VALUES} values may hold at most ${MAX_LARGE_ENUM_CHARS} characters; this one holds ${chars}.`,
        );
      }
      const listed = new Set<string>();
      node.enum.forEach((value, i) => {
        if (value !== null && typeof value === "object") return;
        const key = `${typeof value}:${String(value)}`;
        if (listed.has(key)) add([...at, "enum", String(i)], "This value is already in the enum.");
        listed.add(key);
      });
      if (types) {
        node.enum.forEach((value, i) => {
          if (!fitsType(value, types))
            add([...at, "enum", String(i)], `This value is not of type ${types.join(" or ")}.`);
        });
      }
    }
    if ("const" in node && types && !fitsType(node.const, types)) {
      add([...at, "const"], `const is not of type ${types.join(" or ")}.`);
    }
    const below = (low: string, high: string, what: string) => {
      const [a, b] = [node[low], node[high]];
      if (typeof a === "number" && typeof b === "number" && a > b) {
        add([...at, low], `${low} is above ${high}: no ${what} fits.`);
      }
    };
    below("minItems", "maxItems", "array");
    below("minimum", "maximum", "number");

    if (isNode(node.properties)) {
      for (const [key, child] of Object.entries(node.properties)) {
        visit(child, [...at, "properties", key], level, depth + 1);
      }
    }
    visit(node.items, [...at, "items"], level, depth + 1);
    if (Array.isArray(node.anyOf)) {
      node.anyOf.forEach((child, i) => {
        visit(child, [...at, "anyOf", String(i)], level, depth + 1);
      });
    }
  };

  visit(root, [], 0, 1);
  // A definition is placed wherever it is referenced; counted as the root's child.
  for (const [name, def] of Object.entries(defs)) visit(def, ["$defs", name], 1, 2);
}

/** Strict mode fills in every property, so `required` must be exactly the keys of `properties`. */
function checkRequired(node: Node, at: string[], add: Add): void {
  const properties = node.properties ?? {};
  const required = node.required ?? [];
  if (!isNode(properties)) return;
  if (!Array.isArray(required) || !required.every((r) => typeof r === "string")) return;
  for (const key of Object.keys(properties)) {
    if (!required.includes(key)) {
      add(
        [...at, "properties", key],
        'This property is not listed in required: OpenAI\'s strict mode needs every property required. To make it optional, allow null: "type": ["string", "null"].',
      );
    }
  }
  required.forEach((name, i) => {
    if (!Object.hasOwn(properties, name)) {
      add(
        [...at, "required", String(i)],
        "required names a property that properties does not define.",
      );
    }
  });
}

// --- validateAgainst --------------------------------------------------------------------------

// Compiled validators by the schema's JSON text, least recently used first (a Map keeps
// insertion order; a hit moves to the end). Each holds a compiled schema of at most 16 KiB, so
// VALIDATOR_CACHE_SIZE bounds the memory a warm worker keeps.
const validators = new Map<string, ValidateFunction>();
let outputAjv: Ajv2020 | undefined;

function outputValidator(schema: object): ValidateFunction {
  const key = JSON.stringify(schema);
  const hit = validators.get(key);
  if (hit) {
    validators.delete(key);
    validators.set(key, hit);
    return hit;
  }
  // Ajv compiles the schema into JavaScript: only a schema inside the subset may reach it (no
  // pattern, no remote $ref, bounded size and nesting, no reference cycle: Ajv's compiler
  // overflows the stack on one). Callers check it at the edge; this check is the guard for a
  // caller that did not, or a job stored before a rule was added. The rules on what checking
  // costs are left to the deadline here: it bounds what they bound.
  const problems = strictProblems(schema, "schema", "cycles");
  if (problems.length > 0) {
    throw new Error(
      `validateAgainst: the schema is outside the strict subset (${problems.length} problems)`,
    );
  }
  // strict: false because a subset schema may trip Ajv's strict-mode lints (a union type such
  // as ["string", "null"] beside enum) while being exactly what OpenAI accepts; logger: false
  // keeps Ajv off the console (this app logs through lib/log.ts).
  outputAjv ??= addFormats.default(new Ajv2020({ allErrors: true, strict: false, logger: false }), [
    ...FORMATS,
  ]);
  const copy = structuredClone(schema);
  const validate = outputAjv.compile(copy);
  // Ajv keeps every compiled schema in its own cache, unbounded; this module's map is the one
  // holder, so the entry is dropped from Ajv's at once.
  outputAjv.removeSchema(copy);
  validators.set(key, validate);
  if (validators.size > VALIDATOR_CACHE_SIZE) {
    const oldest = validators.keys().next().value;
    if (oldest !== undefined) validators.delete(oldest);
  }
  return validate;
}

/** How many compiled validators are kept now (at most {@link VALIDATOR_CACHE_SIZE}). */
export function validatorCacheSize(): number {
  return validators.size;
}

/**
 * The longest an output's check may run, in milliseconds, before it is stopped and the output
 * refused: the check runs on the worker's event loop, which every other job of the instance
 * shares (their progress writes, their cancels). A schema inside the subset is linear to check
 * (lib/kinds/schema-cost.ts); this is the bound for one that is slow anyway. Measured on a
 * loaded machine: a conforming 94 KB answer to a 15 KiB schema of 300 properties in 4-8 ms, a
 * 34 KB one at the cost rules' cap in about 20 ms.
 */
export const OUTPUT_CHECK_DEADLINE_MS = 50;

/**
 * Checks a parsed model output against the extraction's schema, which must have passed
 * {@link checkStrictSchema} (else this throws: a bug). Compiles once per schema; the check
 * itself runs under {@link OUTPUT_CHECK_DEADLINE_MS} (lib/kinds/deadline.ts), and one stopped
 * there is one problem at `output`.
 *
 * Messages name the schema's expectation, never the output's content (an output is user data).
 *
 * @returns `[]` when it conforms; else its problems, at most {@link MAX_PROBLEMS}, at paths like
 *   `output.items[0].name`.
 */
export function validateAgainst(
  schema: object,
  value: unknown,
  deadlineMs = OUTPUT_CHECK_DEADLINE_MS,
): InputProblem[] {
  const validate = outputValidator(schema);
  const checked = within(deadlineMs, () => check(validate, value));
  if (checked.ok) return checked.value;
  return [
    { path: "output", message: `took more than ${deadlineMs} ms to check against the schema` },
  ];
}

function check(validate: ValidateFunction, value: unknown): InputProblem[] {
  if (value !== null && typeof value === "object") {
    const deep = firstTooDeep(value, MAX_OUTPUT_NESTING);
    if (deep !== undefined) {
      return [
        {
          path: joinPath("output", value, deep),
          message: `nests more than ${MAX_OUTPUT_NESTING} levels deep`,
        },
      ];
    }
  }
  if (validate(value)) return [];
  return shapeErrors(validate.errors ?? [])
    .slice(0, MAX_PROBLEMS)
    .map((error) => {
      const segments = pointerSegments(error.instancePath);
      if (error.keyword === "required") {
        const missing = String(error.params.missingProperty);
        return { path: joinPath("output", value, [...segments, missing]), message: "is missing" };
      }
      // The extra key itself is model output: it is not repeated.
      const message =
        error.keyword === "additionalProperties"
          ? "has a property the schema does not define"
          : error.keyword === "anyOf"
            ? "matches none of the schemas in anyOf"
            : (error.message ?? "is invalid");
      return { path: joinPath("output", value, segments), message };
    });
}
