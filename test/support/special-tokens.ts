/**
 * The special-token strings of OpenAI's encodings (o200k_base, cl100k_base): text that a prompt
 * or a model's output may hold, and that every count must treat as plain text.
 */
export const SPECIAL_TOKENS = [
  "<|endoftext|>",
  "<|im_start|>",
  "<|im_end|>",
  "<|im_sep|>",
  "<|fim_prefix|>",
  "<|fim_middle|>",
  "<|fim_suffix|>",
  "<|endofprompt|>",
];
