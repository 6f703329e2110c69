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
import { countBytes } from "../../lib/tokens.ts";

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
  test("the registry is document, extract and summary", async () => {
    expect(KIND_IDS).toEqual(["document", "extract", "summary"]);
    for (const id of KIND_IDS) expect((await loadKind(id)).id).toBe(id);
    await expect(loadKind("translate")).rejects.toThrow(/unknown job kind/);
  });

  test.each(texts)(
    "each kind's hold bounds its input's tokens, and the worker's count stays under it (%#)",
    async (text) => {
      for (const [id, input] of [
        ["document", { prompt: text }],
        ["extract", { text, schema }],
        ["summary", { text, words: 50 }],
      ] as const) {
        const kind = await loadKind(id);
        const parsed = await kind.parse(input);
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
