/**
 * The kinds (lib/kinds): each one's hold bound covers what its model input counts to (tiktoken,
 * an implementation the app does not use), the worker's count never passes the bound (a progress
 * write may only lower what a cancel charges), the registry is the list the API names, and an
 * extraction's output is read strictly: a `length` finish, text that is not JSON and JSON that
 * breaks the schema are failures of their own.
 */
import { get_encoding } from "tiktoken";
import { describe, expect, test } from "vitest";
import { KIND_IDS, loadKind } from "../../lib/kinds/index.ts";
import type { KindDeclaration, KindField } from "../../lib/kinds/kind.ts";
import { countBytes } from "../../lib/tokens.ts";

/** An input of the kind made from its declared fields: every text the given one. */
function sampleInput(kind: KindDeclaration, text: string): Record<string, unknown> {
  const field = (f: KindField) =>
    f.type === "text" ? text : f.type === "integer" ? Math.min(f.max, f.default + 1) : schema;
  return Object.fromEntries(kind.fields.map((f) => [f.name, field(f)]));
}

const o200k = get_encoding("o200k_base");
const cl100k = get_encoding("cl100k_base");
const counts = [
  (s: string) => o200k.encode_ordinary(s).length,
  (s: string) => cl100k.encode_ordinary(s).length,
];

const schema = {
  type: "object",
  properties: {
    名前: { type: "string", description: "<|endoftext|> the name 🧪" },
    tags: { type: "array", items: { type: "string", enum: ["a", "b", "ü"] } },
  },
  required: ["名前", "tags"],
  additionalProperties: false,
};
const texts = [
  "Ada Lovelace, born 1815.",
  "தமிழ் ".repeat(400),
  "🙂🚀".repeat(900),
  "<|im_start|>x",
];

describe("job kinds", () => {
  test("the registry loads each of its kinds by its id, and no other", async () => {
    expect(KIND_IDS).toContain("document");
    for (const id of KIND_IDS) expect((await loadKind(id)).id).toBe(id);
    await expect(loadKind("translate")).rejects.toThrow(/unknown job kind/);
  });

  test("each kind declares its names, a field for each input key it takes, and its output", async () => {
    for (const id of KIND_IDS) {
      const kind = await loadKind(id);
      expect(kind.label.length, id).toBeGreaterThan(0);
      expect(kind.nouns, id).not.toBe(kind.noun);
      expect(["text", "json"]).toContain(kind.output);
      // the input its form sends is one the kind takes: the fields are its input's keys
      const parsed = await kind.parse(sampleInput(kind, "Ada Lovelace, born 1815."));
      expect(parsed.ok, id).toBe(true);
      const keys = kind.fields.map((f) => f.name);
      const extra = await kind.parse({ ...sampleInput(kind, "x"), other: 1 });
      expect(extra.ok, id).toBe(false);
      expect(new Set(keys).size, id).toBe(keys.length);
      for (const example of kind.examples ?? [])
        expect((await kind.parse(example.input)).ok, `${id}: ${example.name}`).toBe(true);
    }
  });

  test.each(texts)(
    "each kind's hold bounds its input's tokens, and the worker's count stays under it (%#)",
    async (text) => {
      for (const id of KIND_IDS) {
        const kind = await loadKind(id);
        const parsed = await kind.parse(sampleInput(kind, text));
        expect(parsed.ok).toBe(true);
        if (!parsed.ok) continue;
        const request = kind.request(parsed.input);
        const hold = kind.holdTokens(parsed.input);
        for (const count of counts) {
          const billed =
            count(request.prompt) +
            count(request.instructions ?? "") +
            count(JSON.stringify(request.format?.schema ?? "")) +
            (request.instructions ? 7 + 4 : 7);
          expect(hold).toBeGreaterThanOrEqual(billed);
          expect(kind.countedPromptTokens(request, count)).toBeLessThanOrEqual(hold);
        }
        expect(kind.countedPromptTokens(request, countBytes)).toBe(hold);
      }
    },
  );

  test("an extraction's request: fixed instructions, the text as input, the schema as a strict format", async () => {
    const kind = await loadKind("extract");
    const request = kind.request({ text: "Ada, 1815", schema });
    expect(request.prompt).toBe("Ada, 1815");
    expect(request.instructions).toMatch(/schema/);
    expect(request.format).toEqual({
      type: "json_schema",
      name: "extraction",
      schema,
      strict: true,
    });
  });

  test("an extraction's output: length → output_truncated, not JSON or off-schema → output_invalid", async () => {
    const kind = await loadKind("extract");
    const input = { text: "x", schema };
    const good = JSON.stringify({ 名前: "Ada", tags: ["a"] });
    expect(await kind.readOutput(good, "stop", input)).toEqual({ ok: true, output: good });
    expect(await kind.readOutput(good, "length", input)).toMatchObject({
      ok: false,
      reason: "output_truncated",
    });
    expect(await kind.readOutput('{"名前": "Ad', "stop", input)).toMatchObject({
      ok: false,
      reason: "output_invalid",
    });
    const off = await kind.readOutput(JSON.stringify({ 名前: 5, tags: ["z"] }), "stop", input);
    expect(off).toMatchObject({ ok: false, reason: "output_invalid" });
    // Where it went wrong, never the output's values.
    if (!off.ok) expect(off.problem).not.toContain('"z"');
  });

  test("a document's output is kept as it came, a length finish included", async () => {
    const kind = await loadKind("document");
    expect(await kind.readOutput("# cut", "length", { prompt: "p" })).toEqual({
      ok: true,
      output: "# cut",
    });
  });
});
