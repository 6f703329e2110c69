/**
 * public/kinds.js: the page's kind offers, forms and refusals, from the kinds' own declarations
 * (lib/kinds, as GET /api/usage sends them). The page knows no kind by name.
 */
import { readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import { declarations, KIND_IDS } from "../../lib/kinds/index.ts";
import type { KindDeclaration } from "../../lib/kinds/kind.ts";
import type { Usage } from "../../lib/view.ts";
import {
  catalogOf,
  fieldHelp,
  fieldProblems,
  offers,
  readForm,
  shortOfUnitsSentence,
  unitsOf,
} from "../../public/kinds.js";
import { viewUsage } from "../support/page-fixtures.ts";

const tokyo = { locale: "en-GB", timeZone: "Asia/Tokyo" };
const now = new Date("2026-11-30T05:00:00Z");
// What GET /api/usage sends: JSON, so no function or undefined survives.
const catalog: KindDeclaration[] = JSON.parse(JSON.stringify(await declarations()));
const kind = (id: string) => catalog.find((k) => k.id === id) as KindDeclaration;

const usage = (over: Partial<Usage>): Usage => viewUsage(over);

describe("which kinds the plan offers", () => {
  test("every declared kind is listed, in the registry's order", () => {
    const all = usage({ kinds: KIND_IDS.map((kind) => ({ kind, units: 1 })) });
    expect(offers(catalog, all).map((o) => o.kind.id)).toEqual(KIND_IDS);
  });

  test("a plan that offers a kind: its cost in units, in the kind's own noun", () => {
    const kinds = [
      { kind: "document", units: 1 },
      { kind: "extract", units: 2 },
    ];
    const seen = offers(catalog, usage({ kinds }));
    expect(seen.filter((o) => o.offered).map((o) => o.note)).toEqual([
      "Each document uses 1 unit of your plan.",
      "Each extraction uses 2 units of your plan.",
    ]);
  });

  test("a kind the plan does not offer is listed, not offered, with the reason", () => {
    const free = usage({ plan: "free", limit: 1, kinds: [{ kind: "document", units: 1 }] });
    expect(offers(catalog, free).find((o) => o.kind.id === "extract")).toMatchObject({
      offered: false,
      note: "Your Free plan does not include extractions.",
    });
  });

  test("on a team's pool, the notes name the team's plan, not the user's own", () => {
    const pooled = usage({
      plan: "acme_team",
      kinds: [{ kind: "document", units: 1 }],
      organizationId: "5b0f8c3e-1f7e-4c1a-9d0e-2a6b1c9e4f00",
    });
    const seen = offers(catalog, pooled);
    expect(seen.find((o) => o.kind.id === "document")?.note).toBe(
      "Each document uses 1 unit of your team's pool.",
    );
    expect(seen.find((o) => o.kind.id === "extract")?.note).toBe(
      "Your team's plan does not include extractions.",
    );
  });

  test("a token plan counts every kind in tokens", () => {
    const team = usage({
      plan: "team",
      meter: "tokens",
      limit: 2_000_000,
      kinds: KIND_IDS.map((kind) => ({ kind, units: 1 })),
    });
    expect(new Set(offers(catalog, team).map((o) => o.note))).toEqual(
      new Set(["Counted in tokens, like every job on your plan."]),
    );
  });

  test("the catalog comes with GET /api/usage only; unitsOf reads the plan's cost of a kind", () => {
    expect(catalogOf(usage({ catalog }))).toEqual(catalog);
    expect(catalogOf(usage({}))).toBeUndefined();
    expect(unitsOf(usage({ kinds: [{ kind: "extract", units: 2 }] }), "extract")).toBe(2);
    expect(unitsOf(null, "extract")).toBe(1);
  });
});

describe("a kind's form, from its fields", () => {
  test("the help says each field's limit, from the declaration", () => {
    expect(kind("extract").fields.map(fieldHelp)).toEqual([
      "Up to 8,000 characters.",
      expect.stringMatching(/^At most 16 KB\. Paste a JSON Schema object/),
    ]);
    expect(fieldHelp(kind("summary").fields[1] as KindDeclaration["fields"][number])).toBe(
      "A whole number from 10 to 500.",
    );
  });

  test("the values read as the input the kind takes: JSON parsed, an empty whole number left out", () => {
    expect(readForm(kind("extract"), { text: "Ada", schema: '{"type": "object"}' })).toEqual({
      ok: true,
      input: { text: "Ada", schema: { type: "object" } },
    });
    expect(readForm(kind("summary"), { text: "A text.", words: "" })).toEqual({
      ok: true,
      input: { text: "A text." },
    });
    expect(readForm(kind("summary"), { text: "A text.", words: "50" })).toEqual({
      ok: true,
      input: { text: "A text.", words: 50 },
    });
  });

  test("an empty field, a text too long, JSON that does not parse: nothing to send", () => {
    const read = readForm(kind("extract"), { text: " ", schema: '{"type": "object",' });
    expect(read.ok).toBe(false);
    expect(!read.ok && read.problems.text).toBe("This field is empty.");
    expect(!read.ok && read.problems.schema).toMatch(/^This is not valid JSON: .+\.$/);
    const long = readForm(kind("document"), { prompt: "🙂".repeat(8001) });
    expect(!long.ok && long.problems.prompt).toBe("Keep it to 8,000 characters.");
    // 8,000 characters are code points, as the API counts them, not UTF-16 units
    expect(readForm(kind("document"), { prompt: "🙂".repeat(8000) }).ok).toBe(true);
  });

  test("each kind's examples fill fields the kind declares", () => {
    for (const k of catalog)
      for (const example of k.examples ?? [])
        for (const name of Object.keys(example.input))
          expect(k.fields.map((f) => f.name)).toContain(name);
    expect((kind("extract").examples ?? []).map((e) => e.name)).toEqual([
      "Contact card",
      "Invoice lines",
      "Event",
    ]);
  });

  test("no kind is named in the page's code: its choices and forms come from the catalog", () => {
    for (const file of [
      "app.js",
      "kinds.js",
      "kind-forms.js",
      "job-list.js",
      "cards.js",
      "outputs.js",
      "index.html",
    ]) {
      const source = readFileSync(`public/${file}`, "utf8");
      for (const id of KIND_IDS)
        expect(source, `${file} names ${id}`).not.toMatch(new RegExp(`["'\`]${id}["'\`-]`));
      for (const k of catalog) expect(source, `${file} says ${k.label}`).not.toContain(k.label);
    }
  });
});

describe("the API's refusals, next to the field they name", () => {
  test("invalid_input's details go to their field by path; inside a JSON field, with where", () => {
    expect(
      fieldProblems(
        {
          code: "invalid_input",
          message: "The input is not valid.",
          details: [
            { path: "input.text", message: "Write 1 to 8,000 characters of text." },
            { path: "input.schema.properties.age.type", message: "integer needs a range" },
            { path: "input.schema", message: "The schema is larger than 16 KiB." },
            { path: "input.other", message: "Unknown field." },
          ],
        },
        kind("extract"),
      ),
    ).toEqual({
      kind: [],
      fields: {
        text: ["Write 1 to 8,000 characters of text."],
        schema: [
          "At properties.age.type: integer needs a range",
          "The schema is larger than 16 KiB.",
        ],
      },
      form: ["Unknown field."],
    });
  });

  test("invalid_input without details still says something, for the whole form", () => {
    expect(
      fieldProblems({ code: "invalid_input", message: "Bad input." }, kind("summary"))?.form,
    ).toEqual(["Bad input."]);
  });

  test("unknown_kind and kind_not_in_plan go to the kind choice, in the kind's noun", () => {
    expect(fieldProblems({ code: "unknown_kind" }, kind("extract"))?.kind).toEqual([
      "This service does not know this kind of job. Reload the page and try again.",
    ]);
    expect(
      fieldProblems({ code: "kind_not_in_plan", message: "It offers: documents." }, kind("summary"))
        ?.kind,
    ).toEqual([
      "Your plan does not include summaries (it may have changed since this page loaded).",
    ]);
  });

  test("quota, rate limit and network refusals are for the whole form (the general sentences)", () => {
    for (const code of ["quota_exceeded", "rate_limited", "network", "unavailable"])
      expect(fieldProblems({ code }, kind("extract"))).toBeNull();
  });

  test("a job that costs more than what is left says both numbers", () => {
    const problem = { code: "quota_exceeded", usage: usage({ used: 99 }) };
    expect(shortOfUnitsSentence(problem, kind("extract"), 2, now, tokyo)).toBe(
      "Each extraction uses 2 units; 1 of your 100 is left. They come back tomorrow at 09:00.",
    );
    // nothing left, or a token plan: the general sentence is the true one
    const extract = kind("extract");
    expect(
      shortOfUnitsSentence({ ...problem, usage: usage({ used: 100 }) }, extract, 2, now),
    ).toBeNull();
    expect(
      shortOfUnitsSentence({ ...problem, usage: usage({ meter: "tokens" }) }, extract, 2, now),
    ).toBeNull();
  });
});
