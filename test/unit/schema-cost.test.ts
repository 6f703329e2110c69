/**
 * What checking an answer may cost (lib/kinds/schema-cost.ts, lib/kinds/deadline.ts): schemas
 * that make Ajv's check exponential or crash it are refused at enqueue with a path, OpenAI's
 * documented recursive schemas still pass, and a check that runs long anyway is stopped at
 * OUTPUT_CHECK_DEADLINE_MS.
 */
import { describe, expect, test } from "vitest";
import { within } from "../../lib/kinds/deadline.ts";
import {
  checkStrictSchema,
  OUTPUT_CHECK_DEADLINE_MS,
  validateAgainst,
} from "../../lib/kinds/json-schema.ts";
import { MAX_SCHEMA_APPLICATIONS } from "../../lib/kinds/schema-cost.ts";
import { openaiExamples } from "../support/openai-schemas.ts";
import { bomb, chain, cyclePaths, cycles, object } from "../support/schema-bombs.ts";

const { ui, linkedList } = openaiExamples;
/** A binary tree: two recursive properties, one recursive branch each. */
const tree = object(
  { root: { $ref: "#/$defs/node" } },
  {
    $defs: {
      node: object({
        value: { type: "string" },
        left: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] },
        right: { anyOf: [{ $ref: "#/$defs/node" }, { type: "null" }] },
      }),
    },
  },
);
/** An expression tree: anyOf of two recursive objects that recurse through different names. */
const expression = object(
  { expr: { $ref: "#/$defs/expr" } },
  {
    $defs: {
      expr: {
        anyOf: [
          object({ sum: { type: "array", items: { $ref: "#/$defs/expr" } } }),
          object({ negate: { $ref: "#/$defs/expr" } }),
          object({ number: { type: "number" } }),
        ],
      },
    },
  },
);

const bytes = (schema: unknown) => Buffer.byteLength(JSON.stringify(schema));

describe("checkStrictSchema admits OpenAI's recursive examples, and trees", () => {
  test.each([
    ["the UI component (recursion through #)", ui],
    ["the linked list (explicit recursion through $defs)", linkedList],
    ["a binary tree", tree],
    ["an expression tree (recursive branches, different property names)", expression],
  ])("%s", (_, schema) => {
    expect(checkStrictSchema(schema)).toEqual([]);
  });

  test("and their answers check in time, deep ones included", () => {
    let list: unknown = null;
    for (let i = 0; i < 900; i++) list = { value: i, next: list };
    expect(validateAgainst(linkedList, { linked_list: list })).toEqual([]);
    const leaf = { type: "button", label: "OK", children: [], attributes: [] };
    const wide = { type: "form", label: "", children: Array(2000).fill(leaf), attributes: [] };
    expect(validateAgainst(ui, wide)).toEqual([]);
  });
});

describe("schemas whose check is exponential are refused at enqueue, with a path", () => {
  test.each([3, 4])("the bomb with k = %i (under 450 bytes)", (k) => {
    const schema = bomb(k);
    expect(bytes(schema)).toBeLessThan(450);
    const problems = checkStrictSchema(schema);
    expect(problems).toEqual([
      {
        path: "input.schema.$defs.B.properties.n",
        message: expect.stringMatching(new RegExp(`^Here ${k + 1} schemas .*exponential`)),
      },
      {
        path: "input.schema.properties.n",
        message: expect.stringMatching(new RegExp(`^Here ${k + 1} schemas .*"n"`)),
      },
    ]);
  });

  test("two branches recursing through the same property: refused, even with a discriminator", () => {
    // Ajv checks every property of a failing branch (allErrors), so a discriminating const does
    // not stop the second branch from descending: 2^depth for a tree of "b" nodes.
    const union = object(
      { node: { $ref: "#/$defs/node" } },
      {
        $defs: {
          node: {
            anyOf: [
              object({
                kind: { const: "a" },
                children: { type: "array", items: { $ref: "#/$defs/node" } },
              }),
              object({
                kind: { const: "b" },
                children: { type: "array", items: { $ref: "#/$defs/node" } },
              }),
            ],
          },
        },
      },
    );
    expect(checkStrictSchema(union)).toEqual([
      {
        path: "input.schema.$defs.node",
        message: expect.stringMatching(/^Here 2 schemas .*"children"/),
      },
    ]);
  });

  test("one recursive branch duplicated through nested anyOf is two", () => {
    const twice = object({
      n: { anyOf: [{ anyOf: [{ $ref: "#" }, { $ref: "#" }] }, { type: "null" }] },
    });
    expect(checkStrictSchema(twice)).toEqual([
      {
        path: "input.schema.properties.n.anyOf[0]",
        message: expect.stringMatching(/^Here 2 schemas/),
      },
    ]);
  });

  test(`branches multiplied through a chain of definitions: at most ${MAX_SCHEMA_APPLICATIONS} schemas on one value`, () => {
    // No recursion at all: D1's x is anyOf 3 × D2, D2's x is anyOf 3 × D3, …: 3^levels schemas
    // check the innermost value, each failing at the leaf.
    const chainOf = (levels: number) =>
      object(
        { x: { $ref: "#/$defs/D1" } },
        {
          $defs: Object.fromEntries(
            Array.from({ length: levels + 1 }, (_, i) => [
              `D${i + 1}`,
              i === levels
                ? { type: "string" }
                : object({ x: { anyOf: Array(3).fill({ $ref: `#/$defs/D${i + 2}` }) } }),
            ]),
          ),
        },
      );
    expect(checkStrictSchema(chainOf(2))).toEqual([]);
    const problems = checkStrictSchema(chainOf(10));
    expect(problems).toEqual([
      {
        path: expect.stringMatching(/^input\.schema\.\$defs\.D\d+/),
        message: expect.stringMatching(/at most 64\./),
      },
    ]);
    expect(bytes(chainOf(10))).toBeLessThan(2000);
  });
});

describe("reference cycles through no property or item are refused at enqueue, with a path", () => {
  test.each(Object.keys(cycles) as (keyof typeof cycles)[])("%s", (name) => {
    expect(checkStrictSchema(cycles[name])).toEqual([
      { path: cyclePaths[name], message: expect.stringMatching(/^This \$ref leads back/) },
    ]);
  });

  test('the walk follows references: a cycle reached only through $ref "#" is found', () => {
    const root = object(
      { n: { anyOf: [{ $ref: "#/$defs/A" }, { type: "null" }] } },
      {
        $defs: { A: { anyOf: [{ $ref: "#/$defs/B" }] }, B: { $ref: "#/$defs/A" } },
      },
    );
    expect(checkStrictSchema(root)).toHaveLength(1);
  });

  test("validateAgainst never compiles one: it throws (a bug) instead of overflowing Ajv's stack", () => {
    for (const schema of Object.values(cycles)) {
      expect(() => validateAgainst(schema, { a: null })).toThrow(/outside the strict subset/);
    }
  });
});

describe(`the output check stops at ${OUTPUT_CHECK_DEADLINE_MS} ms`, () => {
  test.each([3, 4])(
    "the bomb with k = %i, a depth-14 answer, got past acceptance: one problem at output, in time",
    (k) => {
      const schema = bomb(k);
      // Compiled first: the deadline is on the check, compiling is bounded by the schema's size.
      expect(validateAgainst(schema, chain(2))).toEqual([]);
      const answer = chain(14);
      const started = performance.now();
      const problems = validateAgainst(schema, answer);
      const ms = performance.now() - started;
      expect(problems).toEqual([
        {
          path: "output",
          message: `took more than ${OUTPUT_CHECK_DEADLINE_MS} ms to check against the schema`,
        },
      ]);
      // The termination lands within a few ms of the deadline; the rest is a loaded machine.
      expect(ms).toBeLessThan(OUTPUT_CHECK_DEADLINE_MS + 250);
      process.stdout.write(
        `[schema-cost] bomb k=${k}, depth 14: stopped after ${ms.toFixed(0)} ms\n`,
      );
    },
  );

  test("within: a value in time, a stop past it, a throw rethrown, and the next call unharmed", () => {
    expect(within(50, () => 6 * 7)).toEqual({ ok: true, value: 42 });
    const started = performance.now();
    expect(
      within(20, () => {
        for (;;) {
          // spin
        }
      }),
    ).toEqual({ ok: false });
    expect(performance.now() - started).toBeLessThan(20 + 250);
    expect(() =>
      within(50, () => {
        throw new RangeError("too deep");
      }),
    ).toThrow(RangeError);
    expect(within(50, () => "again")).toEqual({ ok: true, value: "again" });
  });
});
