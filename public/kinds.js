// @ts-check
/**
 * The kinds of job the page offers, as pure functions of the API's data: which kinds the user's
 * plan offers (the usage's `kinds`), the example schemas of the extraction form, a pasted schema
 * read as JSON, and the API's refusals of a submission placed next to the field they name.
 */
import { formatCount, formatWhen } from "./format.js";

/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("./status.js").Problem} Problem */
/** @typedef {import("./format.js").Clock} Clock */

/**
 * The usage's `kinds` (what the plan offers), undefined from a server before kinds.
 * @param {Usage | null} usage
 * @returns {{ kind: string, units: number }[] | undefined}
 */
function kindsOf(usage) {
  const kinds = /** @type {{ kinds?: unknown }} */ (usage)?.kinds;
  return Array.isArray(kinds) ? kinds : undefined;
}

/** Every kind the page has a form for, in the order it lists them. */
export const KINDS = /** @type {const} */ (["document", "extract"]);
/** @typedef {(typeof KINDS)[number]} Kind */

/** @type {Record<Kind, { one: string, many: string }>} */
const NAMES = {
  document: { one: "document", many: "documents" },
  extract: { one: "extraction", many: "extractions" },
};

/**
 * @typedef {object} Offer
 * @property {Kind} kind
 * @property {boolean} offered  whether the user's plan offers it
 * @property {string} note  its cost on this plan, or why it is not offered
 */

/**
 * What the plan offers, kind by kind: every kind the page knows is listed, the ones the plan does
 * not offer with the reason (the page shows them disabled, not hidden). A usage without `kinds`
 * (a server from before kinds) offers documents only.
 * @param {Usage | null} usage
 * @returns {Offer[]}
 */
export function offers(usage) {
  const kinds = kindsOf(usage);
  const plan = usage ? usage.plan.charAt(0).toUpperCase() + usage.plan.slice(1) : "";
  return KINDS.map((kind) => {
    const entry = kinds ? kinds.find((k) => k.kind === kind) : kind === "document" ? {} : null;
    if (!usage) return { kind, offered: kind === "document", note: "" };
    if (!entry)
      return {
        kind,
        offered: false,
        note: kinds
          ? `Your ${plan} plan does not include ${NAMES[kind].many}.`
          : `This service does not offer ${NAMES[kind].many} yet.`,
      };
    if (usage.meter === "tokens")
      return { kind, offered: true, note: "Counted in tokens, like every job on your plan." };
    const units = "units" in entry && typeof entry.units === "number" ? entry.units : 1;
    return {
      kind,
      offered: true,
      note: `Each ${NAMES[kind].one} uses ${units === 1 ? "1 unit" : `${formatCount(units)} units`} of your plan.`,
    };
  });
}

/**
 * @typedef {object} Example
 * @property {string} id
 * @property {string} name  what its button says: "Contact card"
 * @property {string} text  a sample text it extracts from
 * @property {Record<string, unknown>} schema  inside OpenAI's strict Structured Outputs subset
 */

/** @param {Record<string, unknown>} properties */
const object = (properties) => ({
  type: "object",
  properties,
  required: Object.keys(properties),
  additionalProperties: false,
});
const text = { type: "string" };
const maybe = (/** @type {string} */ type) => ({ type: [type, "null"] });

/**
 * Example schemas for the extraction form. Each is strict (every property required,
 * `additionalProperties: false`, a value the text may not give is nullable), so it is sent as is.
 * @type {Example[]}
 */
export const EXAMPLES = [
  {
    id: "contact",
    name: "Contact card",
    text: "Hi, I'm Ada Lovelace, head of research at Analytical Engines Ltd. Write to ada@engines.example or call +44 20 7946 0018.",
    schema: object({
      name: text,
      organization: maybe("string"),
      role: maybe("string"),
      emails: { type: "array", items: text },
      phones: { type: "array", items: text },
    }),
  },
  {
    id: "invoice",
    name: "Invoice lines",
    text: "Invoice 2026-118 from Northwind Paper, due 15 January. 3 reams of A4 paper at 4.50 EUR, 2 boxes of staples at 1.20 EUR, delivery 7.00 EUR. Total 23.90 EUR.",
    schema: object({
      invoiceNumber: maybe("string"),
      seller: maybe("string"),
      currency: maybe("string"),
      lines: {
        type: "array",
        items: object({
          description: text,
          quantity: maybe("number"),
          unitPrice: maybe("number"),
          amount: { type: "number" },
        }),
      },
      total: maybe("number"),
    }),
  },
  {
    id: "event",
    name: "Event",
    text: "Team offsite: Thursday 12 March 2026, 09:30 to 17:00 at the Harbour Loft, 4 Quay Street. Bring a laptop; lunch is provided.",
    schema: object({
      title: text,
      date: maybe("string"),
      start: maybe("string"),
      end: maybe("string"),
      location: maybe("string"),
      notes: { type: "array", items: text },
    }),
  },
];

/**
 * A pasted schema: a JSON object, or the sentence saying why not.
 * @param {string} source
 * @returns {{ ok: true, schema: Record<string, unknown> } | { ok: false, message: string }}
 */
export function readSchema(source) {
  if (source.trim() === "")
    return { ok: false, message: "Paste a JSON Schema, or start from an example." };
  let value;
  try {
    value = JSON.parse(source);
  } catch (e) {
    return {
      ok: false,
      message: `The schema is not valid JSON: ${/** @type {Error} */ (e).message}.`,
    };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value))
    return { ok: false, message: "The schema must be a JSON object, like the examples." };
  return { ok: true, schema: value };
}

/**
 * @typedef {{ kind: string[], text: string[], schema: string[], form: string[] }} FieldProblems
 */

/**
 * An API refusal of an extraction, placed next to the field it names: `invalid_input`'s
 * `details[]` by path (`input.text`, `input.schema…`), `unknown_kind` and `kind_not_in_plan` on
 * the kind choice. Anything else (quota, rate limit, network) is for the whole form: null.
 * @param {Problem} problem
 * @returns {FieldProblems | null}
 */
export function fieldProblems(problem) {
  /** @type {FieldProblems} */
  const out = { kind: [], text: [], schema: [], form: [] };
  switch (problem.code) {
    case "unknown_kind":
      out.kind.push("This service does not know this kind of job. Reload the page and try again.");
      return out;
    case "kind_not_in_plan":
      // The server's message names the kinds in its own terms ("extract jobs"): say it in ours.
      out.kind.push(
        "Your plan does not include extractions (it may have changed since this page loaded).",
      );
      return out;
    case "invalid_input": {
      for (const d of problem.details ?? []) {
        const path = String(d.path ?? "");
        const message = String(d.message ?? "");
        if (path === "input.text" || path.startsWith("input.text.")) out.text.push(message);
        else if (path === "input.schema") out.schema.push(message);
        else if (path.startsWith("input.schema"))
          out.schema.push(`At ${path.slice("input.schema".length).replace(/^\./, "")}: ${message}`);
        else if (path === "kind") out.kind.push(message);
        else out.form.push(message);
      }
      if (!out.text.length && !out.schema.length && !out.kind.length && !out.form.length)
        out.form.push(problem.message ?? "This extraction cannot be sent.");
      return out;
    }
    case "invalid_prompt":
      out.text.push(problem.message ?? "Write 1 to 8,000 characters of text.");
      return out;
    case "payload_too_large":
      out.form.push(
        "The text and schema are too large together. Keep the text under 8,000 characters and the schema under 16 KB.",
      );
      return out;
    default:
      return null;
  }
}

/**
 * A job plan's quota refusal of an extraction that costs more than what is left: "An extraction
 * uses 2 units; 1 of your 100 is left. They come back on 1 Jan at 09:00." Null when the general
 * sentence (status.js) is the true one: nothing left, a token plan, or a one-unit kind.
 * @param {Problem} problem
 * @param {number} units  what the extraction costs on this plan
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function shortOfUnitsSentence(problem, units, now, clock = {}) {
  const usage = problem.usage;
  if (problem.code !== "quota_exceeded" || !usage || usage.meter === "tokens") return null;
  const left = Math.max(usage.limit - usage.used, 0);
  if (left === 0 || units <= left) return null;
  return `An extraction uses ${formatCount(units)} units; ${formatCount(left)} of your ${formatCount(usage.limit)} ${left === 1 ? "is" : "are"} left. They come back ${formatWhen(usage.resetsAt, now, clock)}.`;
}

/**
 * What an offered kind costs on a job plan, in units (1 when the usage does not say).
 * @param {Usage | null} usage
 * @param {Kind} kind
 */
export function unitsOf(usage, kind) {
  return kindsOf(usage)?.find((k) => k.kind === kind)?.units ?? 1;
}
