/**
 * `document`: a prompt in, markdown out. The model gets the prompt alone (no instructions, no
 * format); a `length` finish is kept (the output is cut at the plan's bound, and says so).
 */
import { CHAT_FRAMING_TOKENS, promptHoldTokens } from "../tokens.ts";
import { isObject, type Kind, textProblem, unknownKeys } from "./kind.ts";

export interface DocumentInput {
  prompt: string;
}

export const document: Kind<DocumentInput> = {
  id: "document",
  noun: "A document",
  async parse(input) {
    if (!isObject(input))
      return { ok: false, problems: [{ path: "input", message: "Must be an object." }] };
    const { prompt } = input;
    if (typeof prompt !== "string")
      return {
        ok: false,
        problems: [
          { path: "input.prompt", message: "Must be a string." },
          ...unknownKeys(input, ["prompt"]),
        ],
      };
    const problem = textProblem(prompt, "The prompt");
    const problems = [
      ...(problem ? [{ path: "input.prompt", message: problem }] : []),
      ...unknownKeys(input, ["prompt"]),
    ];
    return problems.length > 0 ? { ok: false, problems } : { ok: true, input: { prompt } };
  },
  text: (input) => input.prompt,
  request: (input) => ({ prompt: input.prompt }),
  holdTokens: (input) => promptHoldTokens(input.prompt),
  countedPromptTokens: (request, count) => count(request.prompt) + CHAT_FRAMING_TOKENS,
  async readOutput(text) {
    return { ok: true, output: text };
  },
};
