import { describe, expect, test } from "vitest";
import {
  checkStrictSchema,
  type InputProblem,
  MAX_OUTPUT_NESTING,
  MAX_PROBLEMS,
  MAX_SCHEMA_BYTES,
  VALIDATOR_CACHE_SIZE,
  validateAgainst as validateWithin,
  validatorCacheSize,
} from "../../lib/kinds/json-schema.ts";
import { openaiExamples as docs } from "../support/openai-schemas.ts";

// What an answer must be, not how fast it is checked (test/unit/schema-cost.test.ts holds the
// deadline): a generous one, so that a loaded machine's scheduling cannot fail a valid answer.
const validateAgainst = (schema: object, value: unknown) => validateWithin(schema, value, 10_000);

/** An otherwise valid root with one property `x` of the given schema. */
const withX = (x: unknown, extra: Record<string, unknown> = {}) => ({
  type: "object",
  properties: { x },
  required: ["x"],
  additionalProperties: false,
  ...extra,
});

/** `depth` objects nested through property `a`, the root included. */
function nestedObjects(depth: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: "string" };
  for (let i = 0; i < depth; i++) schema = withX(schema);
  return schema;
}

describe("checkStrictSchema: OpenAI's documented examples pass", () => {
  test.each(Object.entries(docs))("%s", (_name, schema) => {
    expect(checkStrictSchema(schema)).toEqual([]);
  });

  test("formats OpenAI lists, nullable types, numeric and array bounds, const and title", () => {
    const schema = withX({
      type: "object",
      title: "All the keywords",
      properties: {
        when: { type: "string", format: "date-time" },
        mail: { type: ["string", "null"], format: "email" },
        id: { type: "string", format: "uuid" },
        n: { type: "integer", multipleOf: 5, exclusiveMinimum: 0, exclusiveMaximum: 100 },
        tags: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 3 },
        kind: { const: "invoice" },
      },
      required: ["when", "mail", "id", "n", "tags", "kind"],
      additionalProperties: false,
    });
    expect(checkStrictSchema(schema)).toEqual([]);
  });
});

type Case = [name: string, schema: unknown, path: string, message: RegExp];

const x = "input.schema.properties.x";
const refusals: Case[] = [
  ["not an object", ["type", "object"], "input.schema", /must be a JSON object/],
  ["null", null, "input.schema", /must be a JSON object/],
  [
    "root without type",
    { properties: {}, required: [], additionalProperties: false },
    "input.schema.type",
    /"type": "object"/,
  ],
  [
    "root of another type",
    { type: "array", items: { type: "string" }, additionalProperties: false },
    "input.schema.type",
    /"type": "object"/,
  ],
  [
    "root nullable",
    { type: ["object", "null"], properties: {}, required: [], additionalProperties: false },
    "input.schema.type",
    /"type": "object"/,
  ],
  [
    "root anyOf",
    { type: "object", anyOf: [docs.ui], properties: {}, required: [], additionalProperties: false },
    "input.schema.anyOf",
    /not anyOf/,
  ],
  [
    "root without additionalProperties",
    { type: "object", properties: {}, required: [] },
    "input.schema.additionalProperties",
    /"additionalProperties": false/,
  ],
  [
    "nested object without additionalProperties",
    withX({ type: "object", properties: {}, required: [] }),
    `${x}.additionalProperties`,
    /"additionalProperties": false/,
  ],
  [
    "additionalProperties true",
    withX({ type: "object", properties: {}, required: [], additionalProperties: true }),
    `${x}.additionalProperties`,
    /must be false/,
  ],
  [
    "additionalProperties a schema",
    withX({
      type: "object",
      properties: {},
      required: [],
      additionalProperties: { type: "string" },
    }),
    `${x}.additionalProperties`,
    /must be false/,
  ],
  [
    "a property not required",
    {
      ...withX({ type: "string" }),
      properties: { x: { type: "string" }, age: { type: "integer" } },
    },
    "input.schema.properties.age",
    /not listed in required.*"null"/,
  ],
  [
    "required naming no property",
    withX({ type: "string" }, { required: ["x", "y"] }),
    "input.schema.required[1]",
    /properties does not define/,
  ],
  ["an unknown type", withX({ type: "date" }), `${x}.type`, /type must be one of/],
  ["a schema without any type", withX({ description: "anything" }), x, /give it a type/],
  ["a schema that is not an object", withX(true), x, /must be a JSON object/],
  [
    "pattern (ReDoS in our worker)",
    withX({ type: "string", pattern: "^(a+)+$" }),
    `${x}.pattern`,
    /pattern is refused: this service would run your regular expression/,
  ],
  [
    "a format OpenAI does not list",
    withX({ type: "string", format: "uri" }),
    `${x}.format`,
    /format must be one of date-time, time/,
  ],
  [
    "format on a number",
    withX({ type: "number", format: "date" }),
    `${x}.format`,
    /applies to string, not number/,
  ],
  [
    "minimum on a string",
    withX({ type: "string", minimum: 1 }),
    `${x}.minimum`,
    /applies to number or integer/,
  ],
  [
    "minItems without a type",
    withX({ anyOf: [{ type: "string" }], minItems: 1 }),
    `${x}.minItems`,
    /needs "type": "array"/,
  ],
  ["an array without items", withX({ type: "array" }), `${x}.items`, /needs items/],
  [
    "tuple items",
    withX({ type: "array", items: [{ type: "string" }] }),
    `${x}.items`,
    /must be a JSON object/,
  ],
  ["multipleOf 0", withX({ type: "number", multipleOf: 0 }), `${x}.multipleOf`, /above 0/],
  [
    "a negative minItems",
    withX({ type: "array", items: { type: "string" }, minItems: -1 }),
    `${x}.minItems`,
    /0 or more/,
  ],
  [
    "minItems above maxItems",
    withX({ type: "array", items: { type: "string" }, minItems: 3, maxItems: 1 }),
    `${x}.minItems`,
    /no array fits/,
  ],
  [
    "minimum above maximum",
    withX({ type: "number", minimum: 3, maximum: 1 }),
    `${x}.minimum`,
    /no number fits/,
  ],
  [
    "an enum of objects",
    withX({ enum: ["a", { b: 1 }] }),
    `${x}.enum[1]`,
    /string, number, boolean or null/,
  ],
  [
    "an enum value of another type",
    withX({ type: "string", enum: ["a", 2] }),
    `${x}.enum[1]`,
    /not of type string/,
  ],
  [
    "a non-integer in an integer enum",
    withX({ type: "integer", enum: [1, 1.5] }),
    `${x}.enum[1]`,
    /not of type integer/,
  ],
  ["an empty enum", withX({ enum: [] }), `${x}.enum`, /list of values/],
  [
    "a repeated enum value",
    withX({ enum: ["a", 1, "1", "a"] }),
    `${x}.enum[3]`,
    /already in the enum/,
  ],
  [
    "a property named __proto__",
    JSON.parse(
      '{"type":"object","properties":{"__proto__":{"type":"string","pattern":"a"}},"required":["__proto__"],"additionalProperties":false}',
    ),
    "input.schema.properties.__proto__.pattern",
    /pattern is refused/,
  ],
  [
    "a const of another type",
    withX({ type: "number", const: "1" }),
    `${x}.const`,
    /not of type number/,
  ],
  [
    "a remote $ref",
    withX({ $ref: "https://example.com/schema.json" }),
    `${x}.$ref`,
    /"#" or "#\/\$defs\/<name>"/,
  ],
  [
    "a $ref into properties",
    withX({ $ref: "#/properties/x" }),
    `${x}.$ref`,
    /"#" or "#\/\$defs\/<name>"/,
  ],
  [
    "a $ref to a missing definition",
    withX({ $ref: "#/$defs/nope" }),
    `${x}.$ref`,
    /#\/\$defs\/nope, which this schema does not define/,
  ],
  [
    "a definition name with a space",
    withX({ $ref: "#" }, { $defs: { "my step": { type: "string" } } }),
    'input.schema.$defs["my step"]',
    /letters, digits/,
  ],
  [
    "$defs below the root",
    withX({ type: "string", $defs: { a: { type: "string" } } }),
    `${x}.$defs`,
    /only at the root/,
  ],
  [
    "definitions",
    withX({ type: "string" }, { definitions: {} }),
    "input.schema.definitions",
    /Use \$defs/,
  ],
  [
    "$schema",
    withX({ type: "string" }, { $schema: "https://json-schema.org/draft/2020-12/schema" }),
    "input.schema.$schema",
    /Remove \$schema/,
  ],
  [
    "$id",
    withX({ type: "string" }, { $id: "https://example.com/s" }),
    "input.schema.$id",
    /Remove \$id/,
  ],
  [
    "a property name that is not an identifier",
    {
      ...withX({ type: "string" }),
      properties: { x: { type: "string" }, "first name": { type: "strin" } },
      required: ["x", "first name"],
    },
    'input.schema.properties["first name"].type',
    /type must be one of/,
  ],
  [
    "inside an anyOf branch",
    withX({ anyOf: [{ type: "string" }, { type: "object", properties: {}, required: [] }] }),
    `${x}.anyOf[1].additionalProperties`,
    /"additionalProperties": false/,
  ],
  [
    "inside a definition",
    withX({ $ref: "#/$defs/d" }, { $defs: { d: { type: "string", maxLength: 3 } } }),
    "input.schema.$defs.d.maxLength",
    /maxLength is not among/,
  ],
];

// Keywords OpenAI names as unsupported (composition), the older page's per-type list, and the
// ones we refuse ourselves: each is refused at its own path.
const keywordRefusals: Case[] = [
  ["allOf", [{ type: "string" }], /does not support allOf/],
  ["oneOf", [{ type: "string" }], /Use anyOf/],
  ["not", { type: "null" }, /does not support not/],
  ["if", { type: "string" }, /if\/then\/else/],
  ["then", { type: "string" }, /if\/then\/else/],
  ["else", { type: "string" }, /if\/then\/else/],
  ["dependentRequired", { a: ["b"] }, /dependentRequired/],
  ["dependentSchemas", { a: { type: "object" } }, /dependentSchemas/],
  ["patternProperties", { "^a": { type: "string" } }, /patternProperties/],
  ["unevaluatedProperties", false, /unevaluatedProperties/],
  ["propertyNames", { type: "string" }, /propertyNames/],
  ["minProperties", 1, /minProperties/],
  ["maxProperties", 1, /maxProperties/],
  ["unevaluatedItems", false, /unevaluatedItems/],
  ["contains", { type: "string" }, /contains/],
  ["minContains", 1, /minContains/],
  ["maxContains", 1, /maxContains/],
  ["uniqueItems", true, /uniqueItems/],
  ["prefixItems", [{ type: "string" }], /prefixItems/],
  ["minLength", 1, /minLength/],
  ["maxLength", 1, /maxLength/],
  ["default", "a", /default/],
  ["$anchor", "a", /\$anchor/],
  ["$dynamicRef", "#a", /\$dynamicRef/],
  ["examples", ["a"], /examples is not a keyword of OpenAI's strict JSON Schema subset/],
].map(([keyword, value, message]) => [
  `keyword ${keyword}`,
  withX({ type: "string", [keyword as string]: value }),
  `${x}.${keyword}`,
  message as RegExp,
]);

describe("checkStrictSchema: each restriction is refused where it stands", () => {
  test.each([...refusals, ...keywordRefusals])("%s", (_name, schema, path, message) => {
    const problems = checkStrictSchema(schema);
    expect(problems, JSON.stringify(problems)).toContainEqual({
      path,
      message: expect.stringMatching(message),
    });
  });

  test("a schema with several problems gets all of them, each at its path", () => {
    const problems = checkStrictSchema({
      type: "object",
      properties: {
        age: { type: "integer", pattern: "\\d+" },
        name: { type: "string", format: "uri" },
      },
      required: ["age"],
      additionalProperties: false,
    });
    expect(problems.map((p) => p.path).sort()).toEqual([
      "input.schema.properties.age.pattern",
      "input.schema.properties.name",
      "input.schema.properties.name.format",
    ]);
  });

  test("the path prefix is the caller's", () => {
    expect(checkStrictSchema(withX({ type: "date" }), "body.input.schema")).toEqual([
      { path: "body.input.schema.properties.x.type", message: expect.any(String) },
    ]);
  });
});

describe("checkStrictSchema: nesting, counts and size", () => {
  test("10 levels of objects pass, 11 are refused at the 11th", () => {
    expect(checkStrictSchema(nestedObjects(10))).toEqual([]);
    const problems = checkStrictSchema(nestedObjects(11));
    expect(problems).toEqual([
      {
        path: `input.schema${".properties.x".repeat(10)}`,
        message: expect.stringMatching(/more than 10 levels/),
      },
    ]);
  });

  test("arrays count as levels: 5 arrays of objects under the root are 11 levels", () => {
    let schema: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 5; i++) schema = { type: "array", items: withX(schema) };
    expect(checkStrictSchema(withX(schema))).toContainEqual({
      path: `input.schema${".properties.x.items".repeat(5)}`,
      message: expect.stringMatching(/more than 10 levels/),
    });
  });

  test("anyOf inside anyOf is bounded too (32 subschemas deep)", () => {
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 40; i++) deep = { anyOf: [deep] };
    const problems = checkStrictSchema(withX(deep));
    expect(problems).toHaveLength(1);
    expect(problems[0]?.message).toMatch(/nest more than 32 deep/);
  });

  test("a 16 KiB schema of 1,300 nested anyOf is refused, not a stack overflow", () => {
    // Without the iterative depth check first, Ajv's meta-schema check overflows the stack.
    let deep: Record<string, unknown> = { type: "string" };
    for (let i = 0; i < 1300; i++) deep = { anyOf: [deep] };
    const schema = withX(deep);
    expect(Buffer.byteLength(JSON.stringify(schema))).toBeLessThanOrEqual(MAX_SCHEMA_BYTES);
    expect(checkStrictSchema(schema)).toEqual([
      {
        path: expect.stringMatching(/^input\.schema\.properties\.x(\.anyOf\[0\])+(\.anyOf)?$/),
        message: expect.stringMatching(/more than 32 deep/),
      },
    ]);
  });

  test("1000 enum values in all pass, 1001 are refused", () => {
    const values = (n: number) => Array.from({ length: n }, (_, i) => i);
    const two = (a: number, b: number) => ({
      type: "object",
      properties: { a: { enum: values(a) }, b: { enum: values(b) } },
      required: ["a", "b"],
      additionalProperties: false,
    });
    expect(checkStrictSchema(two(500, 500))).toEqual([]);
    expect(checkStrictSchema(two(500, 501))).toEqual([
      {
        path: "input.schema.properties.b.enum",
        message: expect.stringMatching(/more than 1000 enum values/),
      },
    ]);
  });

  test("an enum of more than 250 strings holds at most 15,000 characters", () => {
    const strings = (n: number, length: number) =>
      Array.from({ length: n }, (_, i) => String(i).padStart(length, "v"));
    expect(checkStrictSchema(withX({ enum: strings(251, 59) }))).toEqual([]); // 14,809
    expect(checkStrictSchema(withX({ enum: strings(250, 62) }))).toEqual([]); // 15,500 in 250
    expect(checkStrictSchema(withX({ enum: strings(251, 60) }))).toEqual([
      {
        path: `${x}.enum`,
        message: expect.stringMatching(/at most 15000 characters; this one holds 15060/),
      },
    ]);
  });

  test("16 KiB of JSON (UTF-8 bytes) passes, one byte more is refused with that one problem", () => {
    // A schema of exactly `bytes` bytes, its description padded with `char` then "a".
    const sized = (bytes: number, char: string, extra: Record<string, unknown> = {}) => {
      const make = (description: string) => withX({ type: "string", ...extra, description });
      const pad = bytes - Buffer.byteLength(JSON.stringify(make("")));
      const wide = char.repeat(Math.floor(pad / Buffer.byteLength(char)));
      const rest = pad - Buffer.byteLength(wide);
      return make(wide + "a".repeat(rest));
    };
    for (const char of ["a", "é"]) {
      const fits = sized(MAX_SCHEMA_BYTES, char);
      expect(Buffer.byteLength(JSON.stringify(fits))).toBe(MAX_SCHEMA_BYTES);
      expect(checkStrictSchema(fits)).toEqual([]);
      // Past the cap nothing else is looked at (here: the pattern).
      const over = sized(MAX_SCHEMA_BYTES + 1, char, { pattern: "x" });
      expect(checkStrictSchema(over)).toEqual([
        {
          path: "input.schema",
          message: `The schema is ${MAX_SCHEMA_BYTES + 1} bytes as JSON; at most ${MAX_SCHEMA_BYTES}.`,
        },
      ]);
    }
  });

  test("the 16 KiB cap keeps OpenAI's 5000-property and 120,000-character limits out of reach", () => {
    // Fewest bytes a property costs: `"k":{},` in properties and `"k",` in required.
    const minBytesPerProperty = '"k":{},'.length + '"k",'.length;
    expect(Math.floor(MAX_SCHEMA_BYTES / minBytesPerProperty)).toBeLessThan(5000);
    // Every counted string (names, enum and const values) is part of the JSON text.
    expect(MAX_SCHEMA_BYTES).toBeLessThan(120_000);
  });

  test(`the problem list stops at ${MAX_PROBLEMS}`, () => {
    const many: Record<string, unknown> = {};
    for (let i = 0; i < 30; i++) many[`k${i}`] = { type: "string", pattern: "a" };
    const problems = checkStrictSchema({
      type: "object",
      properties: many,
      required: Object.keys(many),
      additionalProperties: false,
    });
    expect(problems).toHaveLength(MAX_PROBLEMS);
    expect(problems[0]).toEqual({
      path: "input.schema.properties.k0.pattern",
      message: expect.any(String),
    });
  });
});

describe("validateAgainst", () => {
  test("conforming outputs have no problems, recursion included", () => {
    expect(
      validateAgainst(docs.mathReasoning, {
        steps: [{ explanation: "Subtract 7 from both sides.", output: "8x = -30" }],
        final_answer: "x = -15 / 4",
      }),
    ).toEqual([]);
    expect(
      validateAgainst(docs.weatherData, { location: "Paris", unit: "C", value: 21.5 }),
    ).toEqual([]);
    const leaf = { type: "button", label: "OK", children: [], attributes: [] };
    expect(
      validateAgainst(docs.ui, {
        type: "form",
        label: "",
        children: [leaf, { ...leaf }],
        attributes: [],
      }),
    ).toEqual([]);
    expect(
      validateAgainst(docs.linkedList, {
        linked_list: { value: 1, next: { value: 2, next: null } },
      }),
    ).toEqual([]);
  });

  test("problems come at output paths, and never repeat the output's content", () => {
    const problems = validateAgainst(docs.definitions, {
      steps: [
        { explanation: "fine", output: "fine" },
        { explanation: 42, output: "x", secret_note: "Alice's card 4111" },
      ],
    });
    expect(problems).toEqual<InputProblem[]>([
      { path: "output.final_answer", message: "is missing" },
      { path: "output.steps[1]", message: "has a property the schema does not define" },
      { path: "output.steps[1].explanation", message: "must be string" },
    ]);
    expect(JSON.stringify(problems)).not.toMatch(/secret_note|Alice|4111|42/);
  });

  test("enum, nullable type, numeric bounds and recursion are enforced", () => {
    expect(validateAgainst(docs.weatherData, { location: "Paris", unit: "K", value: 200 })).toEqual(
      [
        { path: "output.unit", message: "must be equal to one of the allowed values" },
        { path: "output.value", message: "must be <= 130" },
      ],
    );
    const leaf = { type: "button", label: "OK", children: [], attributes: [] };
    expect(
      validateAgainst(docs.ui, {
        type: "div",
        label: "",
        children: [{ ...leaf, children: [{ ...leaf, type: "marquee" }] }],
        attributes: [],
      }),
    ).toEqual([
      {
        path: "output.children[0].children[0].type",
        message: "must be equal to one of the allowed values",
      },
    ]);
    expect(
      validateAgainst(docs.linkedList, {
        linked_list: { value: 1, next: { value: "2", next: null } },
      }),
    ).toEqual([
      // through a $ref the failing branch's own problem shows too
      { path: "output.linked_list.next.value", message: "must be number" },
      { path: "output.linked_list.next", message: "matches none of the schemas in anyOf" },
    ]);
    const nullable = withX({ anyOf: [{ type: "string" }, { type: "null" }] });
    expect(validateAgainst(nullable, { x: null })).toEqual([]);
    expect(validateAgainst(nullable, { x: 5 })).toEqual([
      { path: "output.x", message: "matches none of the schemas in anyOf" },
    ]);
  });

  test("enum and type both hold, as JSON Schema reads them: null passes only if enum lists it", () => {
    // OpenAI's weather example types unit ["string", "null"] with enum ["F", "C"].
    expect(validateAgainst(docs.weatherData, { location: "Paris", unit: null, value: 1 })).toEqual([
      { path: "output.unit", message: "must be equal to one of the allowed values" },
    ]);
    const withNull = withX({ type: ["string", "null"], enum: ["F", "C", null] });
    expect(checkStrictSchema(withNull)).toEqual([]);
    expect(validateAgainst(withNull, { x: null })).toEqual([]);
  });

  test("formats are checked (email, date-time with its offset, uuid)", () => {
    const schema = withX({
      type: "object",
      properties: {
        mail: { type: "string", format: "email" },
        at: { type: "string", format: "date-time" },
        id: { type: "string", format: "uuid" },
      },
      required: ["mail", "at", "id"],
      additionalProperties: false,
    });
    const good = {
      mail: "a@example.com",
      at: "2026-12-02T03:00:00Z",
      id: "3f1c2b9e-0c4d-4e55-9a7b-1d2e3f4a5b6c",
    };
    expect(validateAgainst(schema, { x: good })).toEqual([]);
    expect(
      validateAgainst(schema, { x: { mail: "not an address", at: "2026-12-02 03:00", id: "42" } }),
    ).toEqual([
      { path: "output.x.mail", message: 'must match format "email"' },
      { path: "output.x.at", message: 'must match format "date-time"' },
      { path: "output.x.id", message: 'must match format "uuid"' },
    ]);
  });

  test("a schema outside the subset is never compiled: it throws (a bug), pattern included", () => {
    // Without this guard Ajv would compile and run a user's regular expression on model output.
    const redos = withX({ type: "string", pattern: "^(a+)+$" });
    expect(() => validateAgainst(redos, { x: "aaaa" })).toThrow(/outside the strict subset/);
    expect(() => validateAgainst(withX({ $ref: "https://example.com/s.json" }), { x: 1 })).toThrow(
      /outside the strict subset/,
    );
  });

  test(`an output nested more than ${MAX_OUTPUT_NESTING} deep is refused before Ajv recurses into it`, () => {
    // Without the check, Ajv overflows the stack on this output of the recursive UI schema.
    let value: Record<string, unknown> = { type: "div", label: "", children: [], attributes: [] };
    for (let i = 0; i < 10_000; i++) {
      value = { type: "div", label: "", children: [value], attributes: [] };
    }
    const problems = validateAgainst(docs.ui, value);
    expect(problems).toEqual([
      {
        path: expect.stringMatching(/^output(\.children\[0\])+$/),
        message: `nests more than ${MAX_OUTPUT_NESTING} levels deep`,
      },
    ]);
    expect(problems[0]?.path.split("children").length).toBe(MAX_OUTPUT_NESTING / 2 + 1);
  });

  test(`at most ${VALIDATOR_CACHE_SIZE} compiled validators are kept`, () => {
    const before = validatorCacheSize();
    validateAgainst(docs.mathReasoning, { steps: [], final_answer: "" });
    validateAgainst(docs.mathReasoning, { steps: [], final_answer: "again" });
    expect(validatorCacheSize()).toBeLessThanOrEqual(before + 1);
    for (let i = 0; i < VALIDATOR_CACHE_SIZE + 20; i++) {
      const schema = withX({ type: "integer", minimum: i });
      expect(validateAgainst(schema, { x: i })).toEqual([]);
      expect(validateAgainst(schema, { x: i - 1 })).toEqual([
        { path: "output.x", message: `must be >= ${i}` },
      ]);
    }
    expect(validatorCacheSize()).toBe(VALIDATOR_CACHE_SIZE);
  });
});
