/**
 * Token arithmetic: the bound enqueue holds for a prompt (no tokenizer), and the worker's counter
 * of what streamed (one that never throws).
 */

/**
 * What the provider adds around one user message (role and separators, and the priming of the
 * reply): OpenAI bills about 3 tokens per message plus 3; 8 leaves a margin, so a succeeded
 * job's reported prompt tokens stay within its hold.
 */
export const CHAT_FRAMING_TOKENS = 8;

/** The length of `text` in UTF-8 (a lone surrogate counts as the 3 bytes of U+FFFD it is sent as). */
export const utf8Bytes = (text: string): number => Buffer.byteLength(text, "utf8");

/*
 * Why the hold counts bytes, not tokens.
 *
 * The hold must be the most the prompt can cost, whatever tokenizer the configured model uses,
 * and cost nothing to compute: a tokenizer at enqueue costs its encoding's load (600-700 ms on
 * an instance's first enqueue) and up to a second of CPU on an adversarial 8,000-character
 * prompt, before the database may refuse it anyway; and it counts with one encoding while the
 * provider may bill another (cl100k_base makes twice as many tokens of some scripts as
 * o200k_base).
 *
 * The bound. A byte-level BPE (o200k_base, cl100k_base, and any tokenizer whose every token
 * covers at least one byte of the input's UTF-8) encodes a string by first turning it into its
 * UTF-8 bytes, then splitting those bytes into pieces, and each token of the output is a
 * non-empty run of consecutive bytes of one piece: the tokens partition the bytes. A partition
 * of n bytes into non-empty runs has at most n runs, so tokens(prompt) <= utf8Bytes(prompt).
 * Special-token strings (`<|endoftext|>`, `<|im_start|>`, ...) in user content are encoded as
 * plain text (OpenAI does not let a user message emit a control token), so they are bytes like
 * any other. The provider then adds the chat framing around the one message, at most
 * CHAT_FRAMING_TOKENS. Hence billed prompt tokens <= utf8Bytes(prompt) + CHAT_FRAMING_TOKENS.
 * test/unit/tokens.test.ts checks it on adversarial strings with two independent
 * implementations of both encodings.
 *
 * The price: the prompt part of the hold is about 4x the real count for English (about 4 bytes
 * a token), less for other scripts; capture stays exact, so a user pays only what was consumed,
 * but a user near their limit can be refused (quota_exceeded) a job that would have fit.
 */

/**
 * The prompt's part of a token plan's hold: its UTF-8 bytes plus the chat framing, an upper
 * bound on what any byte-level BPE tokenizer bills for it (see above). No tokenizer is loaded.
 * @example
 * promptHoldTokens("Write a haiku about queues"); // 26 + 8 = 34
 */
export const promptHoldTokens = (prompt: string): number => utf8Bytes(prompt) + CHAT_FRAMING_TOKENS;

/** Counts tokens; never throws. */
export type TokenCounter = (text: string) => number;

/** The byte count: the counter for a model whose tokenizer we do not know (an upper bound). */
export const countBytes: TokenCounter = utf8Bytes;

type Encoding = "o200k_base" | "cl100k_base";
type CountTokens = (
  text: string,
  options: { allowedSpecial: Set<string>; disallowedSpecial: Set<string> },
) => number;

const loads = new Map<Encoding, Promise<CountTokens>>();

function loadEncoding(encoding: Encoding): Promise<CountTokens> {
  let load = loads.get(encoding);
  if (!load) {
    load = (
      encoding === "cl100k_base"
        ? import("gpt-tokenizer/encoding/cl100k_base")
        : import("gpt-tokenizer/encoding/o200k_base")
    ).then((m) => m.countTokens as CountTokens);
    // A failed load is retried on the next call, not cached.
    load.catch(() => loads.delete(encoding));
    loads.set(encoding, load);
  }
  return load;
}

/**
 * The encoding gpt-tokenizer gives a model it knows: the cl100k_base models (gpt-4,
 * gpt-4-turbo, gpt-3.5) by its model map; every other model it lists (gpt-4o, gpt-4.1, gpt-5,
 * the o-series) uses o200k_base, its default. Null for a model it does not list, or one of an
 * encoding we do not load.
 */
export async function encodingOf(model: string): Promise<Encoding | null> {
  const [{ modelToEncodingMap }, models] = await Promise.all([
    import("gpt-tokenizer/mapping"),
    import("gpt-tokenizer/models"),
  ]);
  const mapped = (modelToEncodingMap as Record<string, string | undefined>)[model];
  if (mapped === "cl100k_base" || mapped === "o200k_base") return mapped;
  if (mapped !== undefined) return null;
  return Object.hasOwn(models, model) ? "o200k_base" : null;
}

const counters = new Map<string, Promise<TokenCounter>>();

/**
 * A counter of `model`'s tokens that cannot throw: special-token strings count as the plain
 * text they are in a message; a model gpt-tokenizer does not know counts UTF-8 bytes (an upper
 * bound, see above); any exception while counting returns the byte count (conservative). Made
 * once per instance and model; a failed load gives the byte counter, and is tried again next time.
 * @example
 * const count = await tokenCounter("gpt-4o-mini");
 * count("Explain <|endoftext|> please"); // 9, where gpt-tokenizer's countTokens throws
 */
export function tokenCounter(model: string): Promise<TokenCounter> {
  let counter = counters.get(model);
  if (!counter) {
    counter = makeCounter(model);
    counters.set(model, counter);
    void counter.then((c) => {
      if (c === loadFailed) counters.delete(model);
    });
  }
  return counter;
}

const loadFailed: TokenCounter = (text) => utf8Bytes(text);

async function makeCounter(model: string): Promise<TokenCounter> {
  let countTokens: CountTokens;
  try {
    const encoding = await encodingOf(model);
    if (encoding === null) return countBytes;
    countTokens = await loadEncoding(encoding);
  } catch {
    return loadFailed;
  }
  const plainText = { allowedSpecial: new Set<string>(), disallowedSpecial: new Set<string>() };
  return (text) => {
    if (!text) return 0;
    try {
      return countTokens(text, plainText);
    } catch {
      return utf8Bytes(text);
    }
  };
}

/**
 * Past this many characters with no place to cut, a growing text is cut anyway (at a character)
 * and the pieces counted apart. BPE's cost grows faster than a word's length (gpt-tokenizer's
 * o200k_base: one unspaced word of 5,000 / 10,000 / 20,000 characters took 378 / 734 / 3,202
 * ms), so a model made to emit one endless word would otherwise hold the worker's event loop for
 * seconds at each progress write, the write that hears a cancel. A cut only keeps the merges
 * across it from happening: the pieces' sum is the whole's or a few tokens more. Not bytes: a
 * Japanese answer is one unspaced run between punctuation, and would be charged three times over.
 */
export const GROWING_TAIL_MAX = 1_024;

/** Before a space between two non-spaces: the tokenizers' pre-split never joins across it. */
const CUT = /(?<=\S) (?=\S)/g;

/**
 * A counter for a text that only grows (a streamed answer), for `count`: each call counts only
 * what arrived since the last cut point, so a stream's writes cost what they add, not the whole
 * answer each time. The parts are cut before a space between two non-spaces, where the
 * tokenizer's own pre-split cuts, so the sum is the whole text's count; an unspaced run longer
 * than {@link GROWING_TAIL_MAX} is cut at a character (the whole's count or a few more). A text that is not the
 * last one grown is counted afresh.
 */
export function growingTextCounter(count: TokenCounter): TokenCounter {
  let prefix = "";
  let total = 0;
  return (text) => {
    if (!text.startsWith(prefix)) {
      prefix = "";
      total = 0;
    }
    let start = prefix.length;
    for (;;) {
      CUT.lastIndex = start + 1;
      const found = CUT.exec(text);
      const end = found ? found.index : text.length;
      if (end - start > GROWING_TAIL_MAX) {
        // No cut within reach: cut here anyway, between two whole characters.
        let cut = start + GROWING_TAIL_MAX;
        if (/[\uDC00-\uDFFF]/.test(text[cut] ?? "")) cut -= 1;
        total += count(text.slice(start, cut));
        start = cut;
        continue;
      }
      if (!found) break;
      total += count(text.slice(start, end));
      start = end;
    }
    prefix = text.slice(0, start);
    return total + (start < text.length ? count(text.slice(start)) : 0);
  };
}
