/**
 * The worker's count of a streamed answer (lib/tokens.ts growingTextCounter): the same as the
 * whole text's count where the text has places to cut, never fewer where it has none, and a
 * write's cost bounded by what arrived, so a model made to emit one endless unspaced word
 * cannot hold the worker's event loop (its progress write is how it hears a cancel).
 */
import { performance } from "node:perf_hooks";
import { describe, expect, test } from "vitest";
import { GROWING_TAIL_MAX, growingTextCounter, tokenCounter } from "../../lib/tokens.ts";

const MODEL = "gpt-5-mini";

/** `text` in `n` chunks of pseudo-random sizes, as prefixes a stream would have grown to. */
function prefixes(text: string, n: number, seed = 7): string[] {
  const out: string[] = [];
  let at = 0;
  let x = seed;
  while (at < text.length) {
    x = (x * 48271) % 2147483647;
    at = Math.min(text.length, at + 1 + (x % Math.ceil((2 * text.length) / n)));
    // Never between the halves of a surrogate pair: a stream delivers whole characters.
    if (/[\uDC00-\uDFFF]/.test(text[at] ?? "")) at += 1;
    out.push(text.slice(0, at));
  }
  return out;
}

const words = [
  "quota",
  "résumé",
  "日本語の",
  "தமிழ்",
  "👩‍💻",
  "<|im_start|>",
  "x<|",
  "1234567",
  "—",
  "naïve",
];
const spaced = Array.from({ length: 3_000 }, (_, i) => words[(i * 7919) % words.length]).join(" ");

describe("a growing text's count", () => {
  test("equals the whole text's count at every step, where the text has spaces to cut at", async () => {
    const whole = await tokenCounter(MODEL);
    for (const seed of [1, 2, 3]) {
      const grow = growingTextCounter(whole);
      for (const p of prefixes(spaced, 40, seed)) expect(grow(p)).toBe(whole(p));
    }
  });

  test("is never below the true count on unspaced runs, and a text that did not grow is recounted", async () => {
    const whole = await tokenCounter(MODEL);
    for (const word of ["தமிழ்", "👩‍💻", "x<|", "a", "ab1"]) {
      const text = word.repeat(Math.ceil(3_000 / word.length));
      const grow = growingTextCounter(whole);
      for (const p of prefixes(text, 20)) expect(grow(p)).toBeGreaterThanOrEqual(whole(p));
      expect(grow("fresh start")).toBe(whole("fresh start"));
    }
  });

  test("a long unspaced Japanese answer is counted as tokens, not bytes (within 1 %)", async () => {
    const whole = await tokenCounter(MODEL);
    const text = "非同期のジョブは割り当てを先に確保してから実行されます".repeat(200);
    const grow = growingTextCounter(whole);
    let last = 0;
    for (const p of prefixes(text, 30)) last = grow(p);
    expect(last).toBeGreaterThanOrEqual(whole(text));
    expect(last).toBeLessThanOrEqual(Math.ceil(whole(text) * 1.01));
  });

  test("a 20,000-character unspaced word streamed in 50 writes: no write holds the loop", async () => {
    const whole = await tokenCounter(MODEL);
    const text = "தமிழ்".repeat(4_000);
    const grow = growingTextCounter(whole);
    let longest = 0;
    for (const p of prefixes(text, 50)) {
      const t0 = performance.now();
      grow(p);
      longest = Math.max(longest, performance.now() - t0);
    }
    // Whole-text counting took 3.2 s for the last write alone; a tail is at most this long.
    expect(GROWING_TAIL_MAX).toBeLessThanOrEqual(2_048);
    expect(longest).toBeLessThan(200);
  });
});
