/**
 * The hold's bound (lib/tokens.ts): no byte-level BPE makes more tokens of a string than its
 * UTF-8 bytes, so bytes + the chat framing hold at least what OpenAI bills for the prompt,
 * whatever the model's encoding. Checked on adversarial strings with two independent
 * implementations of o200k_base and cl100k_base (tiktoken, the WASM build of OpenAI's own, which
 * the fake model uses; gpt-tokenizer, the app's), each encoding special-token strings as plain
 * text. And the worker's counter: it never throws, counts with the configured model's encoding,
 * and falls back to bytes.
 */
import fc from "fast-check";
import * as gptCl100k from "gpt-tokenizer/encoding/cl100k_base";
import * as gptO200k from "gpt-tokenizer/encoding/o200k_base";
import { get_encoding } from "tiktoken";
import { describe, expect, test } from "vitest";
import { promptTokens } from "../../dev/openai/stream.ts";
import { CHAT_FRAMING_TOKENS, promptHoldTokens, tokenCounter } from "../../lib/tokens.ts";
import { SPECIAL_TOKENS } from "../support/special-tokens.ts";

const tiktoken = {
  o200k_base: get_encoding("o200k_base"),
  cl100k_base: get_encoding("cl100k_base"),
};
const plain = { allowedSpecial: new Set<string>(), disallowedSpecial: new Set<string>() };
const tokenizers: Array<[string, (s: string) => number]> = [
  ["tiktoken o200k_base", (s) => tiktoken.o200k_base.encode_ordinary(s).length],
  ["tiktoken cl100k_base", (s) => tiktoken.cl100k_base.encode_ordinary(s).length],
  ["gpt-tokenizer o200k_base", (s) => gptO200k.countTokens(s, plain)],
  ["gpt-tokenizer cl100k_base", (s) => gptCl100k.countTokens(s, plain)],
];
const bytes = (s: string) => Buffer.byteLength(s, "utf8");

const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
const run = fc
  .tuple(
    fc.constantFrom("a", "😀", " ", "1", "தமிழ்", "中", "\u0301", "!", "\n", "<|"),
    fc.integer({ min: 1, max: 300 }),
  )
  .map(([c, n]) => c.repeat(n));
const piece = fc.oneof(
  fc.constantFrom(...SPECIAL_TOKENS),
  loneSurrogate,
  fc.string({ unit: "binary" }),
  fc.string({ unit: "grapheme" }),
  fc.constantFrom(
    "👨‍👩‍👧‍👦",
    "🏳️‍🌈",
    "தமிழ் மொழி",
    "日本語のテキスト",
    "Ünïcödé",
    "\u0000",
    "\uFEFF",
    "\uFFFD",
  ),
  run,
);
/** Special tokens, lone surrogates, any code point, huge words, mixed scripts and emoji. */
const adversarial = fc.array(piece, { maxLength: 16 }).map((parts) => parts.join(""));

describe("the hold's bound: tokens <= UTF-8 bytes (+ framing for the billed prompt)", () => {
  test.each(tokenizers)("%s never makes more tokens than bytes", (_, count) => {
    fc.assert(
      fc.property(adversarial, (s) => count(s) <= bytes(s)),
      { numRuns: 250 },
    );
  });

  test("what OpenAI bills for the prompt as one user message fits promptHoldTokens, on both encodings", () => {
    fc.assert(
      fc.property(adversarial, (s) => {
        const hold = promptHoldTokens(s);
        for (const enc of Object.values(tiktoken))
          if (promptTokens(enc, [{ role: "user", text: s }]) > hold) return false;
        return hold === bytes(s) + CHAT_FRAMING_TOKENS;
      }),
      { numRuns: 250 },
    );
  });

  test("the worst case: a string of one-byte tokens is exactly its bytes", () => {
    const s = "\u0000\u0001\u0002".repeat(100);
    for (const [, count] of tokenizers) expect(count(s)).toBeLessThanOrEqual(bytes(s));
    expect(promptHoldTokens("")).toBe(CHAT_FRAMING_TOKENS);
  });
});

describe("the worker's counter", () => {
  test.each(SPECIAL_TOKENS)("counts %s as plain text instead of throwing", async (special) => {
    expect(() => gptO200k.countTokens(`Say ${special} now`)).toThrow(); // gpt-tokenizer's default
    const count = await tokenCounter("gpt-4o-mini");
    const text = `Say ${special} now`;
    expect(count(text)).toBe(tiktoken.o200k_base.encode_ordinary(text).length);
  });

  test("uses the configured model's encoding: o200k_base for gpt-4o/4.1/5/o3, cl100k_base for gpt-4(-turbo)/3.5", async () => {
    const tamil = "தமிழ் மொழி இலக்கியம் ".repeat(20);
    const o200k = tiktoken.o200k_base.encode_ordinary(tamil).length;
    const cl100k = tiktoken.cl100k_base.encode_ordinary(tamil).length;
    expect(cl100k).toBeGreaterThan(1.5 * o200k);
    for (const model of ["gpt-4o-mini", "gpt-4o", "gpt-4.1", "gpt-5", "o3"])
      expect((await tokenCounter(model))(tamil), model).toBe(o200k);
    for (const model of ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo"])
      expect((await tokenCounter(model))(tamil), model).toBe(cl100k);
  });

  test("a model gpt-tokenizer does not know counts UTF-8 bytes, an upper bound", async () => {
    const count = await tokenCounter("llama-3.1-70b-instruct");
    expect(count("héllo 😀")).toBe(bytes("héllo 😀"));
  });

  test("never throws, and never counts more than the bytes, on adversarial text", async () => {
    const counters = await Promise.all(["gpt-4o-mini", "gpt-4-turbo"].map(tokenCounter));
    fc.assert(
      fc.property(adversarial, (s) => counters.every((count) => count(s) <= bytes(s))),
      { numRuns: 200 },
    );
  });
});
