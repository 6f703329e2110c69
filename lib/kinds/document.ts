/**
 * `document`: a prompt in, markdown out. The model gets the prompt alone (no instructions, no
 * format); a `length` finish is kept (the output is cut at the plan's bound, and says so).
 */
import { CHAT_FRAMING_TOKENS, promptHoldTokens } from "../tokens.ts";
import { type Kind, parseFields, textField, textInput } from "./kind.ts";

export interface DocumentInput {
  prompt: string;
}

export const document: Kind<DocumentInput> = {
  id: "document",
  label: "Write a document",
  noun: "document",
  nouns: "documents",
  action: "Generate",
  fields: [textInput("prompt", "What should it write?")],
  output: "text",
  parse: (input) =>
    parseFields(input, ["prompt"], (input, problems) => {
      const prompt = textField(input, "prompt", "The prompt", problems);
      return prompt === null ? null : { prompt };
    }),
  text: (input) => input.prompt,
  request: (input) => ({ prompt: input.prompt }),
  holdTokens: (input) => promptHoldTokens(input.prompt),
  countedPromptTokens: (request, count) => count(request.prompt) + CHAT_FRAMING_TOKENS,
  async readOutput(text) {
    return { ok: true, output: text };
  },
};
