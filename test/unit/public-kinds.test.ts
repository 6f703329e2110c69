import { describe, expect, test } from "vitest";
import { checkStrictSchema } from "../../lib/kinds/json-schema.ts";
import type { Usage } from "../../lib/view.ts";
import {
  EXAMPLES,
  fieldProblems,
  offers,
  readSchema,
  shortOfUnitsSentence,
  unitsOf,
} from "../../public/kinds.js";
import { viewUsage } from "../support/page-fixtures.ts";

const tokyo = { locale: "en-GB", timeZone: "Asia/Tokyo" };
const now = new Date("2026-11-30T05:00:00Z");

const usage = (over: Partial<Usage> & { kinds?: { kind: string; units: number }[] }): Usage =>
  viewUsage(over);

describe("which kinds the plan offers", () => {
  test("a plan that offers both: each with its cost in units", () => {
    const kinds = [
      { kind: "document", units: 1 },
      { kind: "extract", units: 2 },
    ];
    expect(offers(usage({ kinds }))).toEqual([
      { kind: "document", offered: true, note: "Each document uses 1 unit of your plan." },
      { kind: "extract", offered: true, note: "Each extraction uses 2 units of your plan." },
    ]);
  });

  test("a kind the plan does not offer is listed, not offered, with the reason", () => {
    const free = usage({ plan: "free", limit: 1, kinds: [{ kind: "document", units: 1 }] });
    expect(offers(free)[1]).toEqual({
      kind: "extract",
      offered: false,
      note: "Your Free plan does not include extractions.",
    });
  });

  test("a token plan counts every kind in tokens", () => {
    const team = usage({
      plan: "team",
      meter: "tokens",
      limit: 2_000_000,
      kinds: [
        { kind: "document", units: 1 },
        { kind: "extract", units: 2 },
      ],
    });
    expect(offers(team).map((o) => o.note)).toEqual([
      "Counted in tokens, like every job on your plan.",
      "Counted in tokens, like every job on your plan.",
    ]);
  });

  test("a server from before kinds (no kinds in the usage) offers documents only", () => {
    expect(offers(usage({})).map((o) => [o.kind, o.offered, o.note])).toEqual([
      ["document", true, "Each document uses 1 unit of your plan."],
      ["extract", false, "This service does not offer extractions yet."],
    ]);
  });

  test("before the usage is known, documents only and no note", () => {
    expect(offers(null).map((o) => o.offered)).toEqual([true, false]);
  });

  test("unitsOf reads the plan's cost of a kind", () => {
    expect(unitsOf(usage({ kinds: [{ kind: "extract", units: 2 }] }), "extract")).toBe(2);
    expect(unitsOf(null, "extract")).toBe(1);
  });
});

describe("the example schemas", () => {
  test("three, each a strict object schema with a sample text", () => {
    expect(EXAMPLES.map((e) => e.name)).toEqual(["Contact card", "Invoice lines", "Event"]);
    for (const example of EXAMPLES) {
      expect(example.schema.type).toBe("object");
      // the server's own check of OpenAI's strict subset: each is sent as is
      expect(checkStrictSchema(example.schema), example.id).toEqual([]);
      expect(example.text.length).toBeGreaterThan(20);
      // what the form puts in the field reads back as the same schema
      expect(readSchema(JSON.stringify(example.schema, null, 2))).toEqual({
        ok: true,
        schema: example.schema,
      });
    }
  });
});

describe("a pasted schema", () => {
  test("empty, not JSON, or not an object: a sentence saying so", () => {
    expect(readSchema("  ")).toEqual({
      ok: false,
      message: "Paste a JSON Schema, or start from an example.",
    });
    const broken = readSchema('{"type": "object",}');
    expect(broken.ok).toBe(false);
    expect(!broken.ok && broken.message).toMatch(/^The schema is not valid JSON: .+\.$/);
    for (const source of ["[]", "null", '"object"', "42"])
      expect(readSchema(source)).toEqual({
        ok: false,
        message: "The schema must be a JSON object, like the examples.",
      });
  });
});

describe("the API's refusals, next to the field they name", () => {
  test("invalid_input's details go to the text or the schema by path", () => {
    expect(
      fieldProblems({
        code: "invalid_input",
        message: "The input is not valid.",
        details: [
          { path: "input.text", message: "Write 1 to 8,000 characters of text." },
          { path: "input.schema.properties.age.type", message: "integer needs a range" },
          { path: "input.schema", message: "The schema is larger than 16 KiB." },
          { path: "input", message: "Unexpected field." },
        ],
      }),
    ).toEqual({
      kind: [],
      text: ["Write 1 to 8,000 characters of text."],
      schema: [
        "At properties.age.type: integer needs a range",
        "The schema is larger than 16 KiB.",
      ],
      form: ["Unexpected field."],
    });
  });

  test("invalid_input without details still says something, for the whole form", () => {
    expect(fieldProblems({ code: "invalid_input", message: "Bad input." })?.form).toEqual([
      "Bad input.",
    ]);
  });

  test("unknown_kind and kind_not_in_plan go to the kind choice", () => {
    expect(fieldProblems({ code: "unknown_kind" })?.kind).toEqual([
      "This service does not know this kind of job. Reload the page and try again.",
    ]);
    expect(
      fieldProblems({ code: "kind_not_in_plan", message: "Your plan offers: document." })?.kind,
    ).toEqual([
      "Your plan does not include extractions (it may have changed since this page loaded).",
    ]);
  });

  test("quota, rate limit and network refusals are for the whole form (the general sentences)", () => {
    for (const code of ["quota_exceeded", "rate_limited", "network", "unavailable"])
      expect(fieldProblems({ code })).toBeNull();
  });

  test("an extraction that costs more than what is left says both numbers", () => {
    const problem = { code: "quota_exceeded", usage: usage({ used: 99 }) };
    expect(shortOfUnitsSentence(problem, 2, now, tokyo)).toBe(
      "An extraction uses 2 units; 1 of your 100 is left. They come back tomorrow at 09:00.",
    );
    // nothing left, or a token plan: the general sentence is the true one
    expect(shortOfUnitsSentence({ ...problem, usage: usage({ used: 100 }) }, 2, now)).toBeNull();
    expect(
      shortOfUnitsSentence({ ...problem, usage: usage({ meter: "tokens" }) }, 2, now),
    ).toBeNull();
  });
});
