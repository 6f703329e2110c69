/**
 * The prompt's tokens, counted at enqueue with the model's own tokenizer (o200k_base, the
 * encoding of the gpt-4o family; the worker counts a cut stream with the same one), so a token
 * plan's hold is the prompt plus the plan's output bound (docs/DESIGN.md#enqueue).
 *
 * Loaded lazily: the encoding is a few megabytes of ranks whose import costs hundreds of
 * milliseconds (docs/BENCHMARKS.md), which every cold start of the enqueue function would pay
 * even for a GET. Imported on the first count instead, once per instance.
 */

/**
 * What the provider adds around one user message (role and separators, and the priming of the
 * reply): OpenAI bills about 3 tokens per message plus 3; 8 leaves a margin, so a succeeded
 * job's reported prompt tokens stay within its hold.
 */
export const CHAT_FRAMING_TOKENS = 8;

let tokenizer: Promise<{ countTokens: (text: string) => number }> | null = null;

/**
 * @returns the tokens the model will be billed for this prompt as the one user message.
 * @example
 * await countPromptTokens("Write a haiku about queues"); // 14
 */
export async function countPromptTokens(prompt: string): Promise<number> {
  tokenizer ??= import("gpt-tokenizer/encoding/o200k_base").catch((error: unknown) => {
    tokenizer = null; // a failed load is retried on the next call, not cached
    throw error;
  });
  const { countTokens } = await tokenizer;
  return countTokens(prompt) + CHAT_FRAMING_TOKENS;
}
