/**
 * The streamed text as the progress writes send it: each write carries only what arrived since
 * the text the database says it stores (record_progress appends it to the attempt's chunks), so
 * a write costs the same at the end of a long answer as at its start.
 */

/**
 * The text as Postgres can take it: a NUL or a lone surrogate (which a model can stream, or a
 * proxy cut in half) makes the json of the call invalid, and a write that fails every time
 * would never tell the worker of a cancel. Each becomes U+FFFD (one code unit for one, so
 * lengths and offsets stay those of the text); the count is of what streamed.
 */
export const storable = (text: string): string =>
  // biome-ignore lint/suspicious/noControlCharactersInRegex: NUL is one of what Postgres refuses
  text.replace(/[\u0000\uD800-\uDFFF]/gu, "\uFFFD");

/** A piece of text to send: `text` follows the `offset` characters already stored. */
export interface Delta {
  /** Characters (code points, as Postgres counts them) of the attempt's text before `text`. */
  offset: number;
  text: string;
}

/**
 * What of an attempt's growing text is stored, and what to send next. `next(textSoFar)` gives the
 * part after what is stored; `stored(textSoFar, sent, n)` takes the database's answer to it (`n`
 * characters stored), which is the truth whatever happened to earlier writes (a lost answer, a retry), so
 * the next write starts from there. A trailing high surrogate waits for its pair, so a character
 * is never stored split in two.
 *
 * @example
 * const cursor = textCursor();
 * const d = cursor.next(text);
 * const r = await jobs.progress(id, { attempt, offset: d.offset, text: d.text, ... });
 * if (r.outcome === "recorded") cursor.stored(text, d, r.stored);
 */
export function textCursor() {
  // The stored prefix: its length in UTF-16 code units (JS) and in characters (Postgres).
  let units = 0;
  let chars = 0;
  return {
    next(text: string): Delta {
      let end = text.length;
      const last = text.charCodeAt(end - 1);
      if (last >= 0xd800 && last <= 0xdbff) end--;
      return { offset: chars, text: storable(text.slice(units, Math.max(units, end))) };
    },
    stored(text: string, sent: Delta, n: number): void {
      if (sent.offset === chars && n === chars + codePoints(sent.text)) {
        units += sent.text.length;
      } else {
        units = unitsOf(text, n);
      }
      chars = n;
    },
  };
}

const codePoints = (s: string): number => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

/** The code units of the first `n` characters of `text` (all of it, when shorter). */
function unitsOf(text: string, n: number): number {
  let units = 0;
  let seen = 0;
  for (const ch of text) {
    if (seen === n) break;
    units += ch.length;
    seen++;
  }
  return units;
}
