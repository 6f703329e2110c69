/**
 * What a job kind is (docs/DESIGN.md#job-kinds): how its input is checked, what the model is asked,
 * what it may hold of a token plan, and how its output is read. The kinds are lib/kinds/index.ts's
 * list; each lives in a file of its own. No I/O.
 */
import type { OutputFormat } from "../model.ts";
import type { TokenCounter } from "../tokens.ts";

/** One thing wrong with a client's input, where: `input.schema.properties.age.type`. */
export interface InputProblem {
  path: string;
  message: string;
}

export type Parsed<I> = { ok: true; input: I } | { ok: false; problems: InputProblem[] };

/** The model call a job makes: its input text, and optionally instructions and an output format. */
export interface ModelRequest {
  prompt: string;
  instructions?: string | undefined;
  format?: OutputFormat | undefined;
}

/** Why a finished generation is no answer of the kind (a failure reason of lib/jobs.ts). */
export type OutputFailure = "output_invalid" | "output_truncated";

/**
 * What the worker stores (the output column's text), or why the attempt fails. `problem` is for
 * the job's last_error: where the output went wrong, never the output itself.
 */
export type OutputRead =
  | { ok: true; output: string }
  | { ok: false; reason: OutputFailure; problem: string };

/**
 * One field of a kind's input, as a form asks for it: the page builds its form from these and
 * the API's sentences name the kind by them, so neither keeps a copy of the kind's own words.
 * `text` is a text the model reads (at most `maxChars`), `json` a JSON value typed in as text
 * (at most `maxBytes`), `integer` a whole number from `min` to `max`.
 */
export type KindField =
  | { name: string; label: string; type: "text"; maxChars: number; help?: string }
  | { name: string; label: string; type: "json"; maxBytes: number; help?: string }
  | {
      name: string;
      label: string;
      type: "integer";
      min: number;
      max: number;
      default: number;
      help?: string;
    };

/** A start for the form: a name for its button and the input it fills in. */
export interface KindExample {
  name: string;
  input: Record<string, unknown>;
}

/**
 * What a kind says of itself, without running anything: its names, its form and what its
 * output is. `GET /api/usage` sends it (the page's choices and forms), the API's messages and
 * lib/view.ts read it.
 */
export interface KindDeclaration {
  readonly id: string;
  /** What the choice of it says: "Write a document". */
  readonly label: string;
  /** One job of it, and many, in a sentence: "extraction", "extractions". */
  readonly noun: string;
  readonly nouns: string;
  /** What the button that starts one says: "Generate", "Extract". */
  readonly action: string;
  readonly fields: readonly KindField[];
  readonly examples?: readonly KindExample[];
  /** `json`: the output is a JSON value (the view parses it); `text`: markdown or plain text. */
  readonly output: "text" | "json";
}

/** The declaration alone, as the API sends it (a kind's functions are not JSON). */
export const declarationOf = (kind: KindDeclaration): KindDeclaration => ({
  id: kind.id,
  label: kind.label,
  noun: kind.noun,
  nouns: kind.nouns,
  action: kind.action,
  fields: kind.fields,
  ...(kind.examples ? { examples: kind.examples } : {}),
  output: kind.output,
});

/** "An extraction", "A summary": one job of the kind, at the start of a sentence. */
export const aNoun = (kind: KindDeclaration): string =>
  `${/^[aeiou]/i.test(kind.noun) ? "An" : "A"} ${kind.noun}`;

/** A text field of at most {@link MAX_TEXT_CHARS} characters. */
export const textInput = (name: string, label: string, help?: string): KindField => ({
  name,
  label,
  type: "text",
  maxChars: MAX_TEXT_CHARS,
  ...(help ? { help } : {}),
});

export interface Kind<I extends object = object> extends KindDeclaration {
  /** The client's `input`, checked: every problem with its path, or the input as it is stored. */
  parse(input: unknown): Promise<Parsed<I>>;
  /** What the job's `prompt` column holds (1..8,000 characters): a prompt, a text. */
  text(input: I): string;
  /** The model call for a stored input (the database's `input`, checked at enqueue). */
  request(input: I): ModelRequest;
  /**
   * The most the model input can bill, in tokens, without a tokenizer: a token plan holds it plus
   * its output bound. Bytes are an upper bound on any byte-level BPE's tokens (lib/tokens.ts).
   */
  holdTokens(input: I): number;
  /** The model input as `count` counts it, with its framing: never above {@link holdTokens}. */
  countedPromptTokens(request: ModelRequest, count: TokenCounter): number;
  /**
   * The generation read as this kind's output, or the failure it is. A throw (or a rejection)
   * ends the attempt `output_invalid` with its usage, like a refusal: never a 500.
   */
  readOutput(text: string, finishReason: string | null, input: I): Promise<OutputRead>;
}

/** The longest prompt or text, in characters (code points). */
export const MAX_TEXT_CHARS = 8000;

// C0/C1 control characters other than tab, newline and carriage return have no place in a
// prompt; NUL cannot even be stored in a Postgres text column.
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is the point
const forbiddenControl = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/;

/**
 * What is wrong with a prompt or a text (`what`: "The prompt", "The text"), or null: not empty,
 * well-formed Unicode, at most {@link MAX_TEXT_CHARS} characters, no control characters.
 */
export function textProblem(text: string, what: string): string | null {
  if (text.trim().length === 0) return `${what} is empty.`;
  if (!text.isWellFormed()) return `${what} is not valid Unicode text.`;
  if ([...text].length > MAX_TEXT_CHARS)
    return `${what} is longer than ${MAX_TEXT_CHARS.toLocaleString("en-US")} characters.`;
  if (forbiddenControl.test(text)) return `${what} contains control characters.`;
  return null;
}

/** A plain JSON object (not null, not an array). */
export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A problem for each key of `input` that is not one of `known`. */
export function unknownKeys(input: Record<string, unknown>, known: string[]): InputProblem[] {
  return Object.keys(input)
    .filter((k) => !known.includes(k))
    .map((k) => ({ path: `input.${k}`, message: "Unknown field." }));
}

/**
 * A kind's `parse`: the input must be an object; `check` pushes a problem for each of its fields
 * that is wrong and returns the input as stored (null where a field is not even of its type); a
 * key not in `known` is a problem too. Every problem is answered, fields' first.
 */
export async function parseFields<I>(
  input: unknown,
  known: string[],
  check: (input: Record<string, unknown>, problems: InputProblem[]) => I | null | Promise<I | null>,
): Promise<Parsed<I>> {
  if (!isObject(input))
    return { ok: false, problems: [{ path: "input", message: "Must be an object." }] };
  const problems: InputProblem[] = [];
  const checked = await check(input, problems);
  problems.push(...unknownKeys(input, known));
  return problems.length > 0 || checked === null
    ? { ok: false, problems }
    : { ok: true, input: checked };
}

/**
 * The string at `input[key]` (`what`: "The prompt", "The text"), with a problem pushed where it
 * is no string (then null) or where {@link textProblem} finds one.
 */
export function textField(
  input: Record<string, unknown>,
  key: string,
  what: string,
  problems: InputProblem[],
): string | null {
  const value = input[key];
  if (typeof value !== "string") {
    problems.push({ path: `input.${key}`, message: "Must be a string." });
    return null;
  }
  const problem = textProblem(value, what);
  if (problem) problems.push({ path: `input.${key}`, message: problem });
  return value;
}

/** A generation cut at the plan's output bound (`what`: "output", "summary"): no answer of the kind. */
export const cutAtBound = (what: string): OutputRead => ({
  ok: false,
  reason: "output_truncated",
  problem: `the ${what} was cut at the plan's output bound`,
});
