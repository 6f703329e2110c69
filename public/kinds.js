// @ts-check
/**
 * The kinds of job the page offers, as pure functions of the API's data. The page knows no kind
 * by name: `GET /api/usage` sends every kind's declaration (its `catalog`: names, form fields,
 * output; lib/kinds) and the kinds the user's plan offers (its `kinds`). From them come the
 * choices and their notes, a form's values read and checked, and the API's refusals of a
 * submission placed next to the field they name.
 */
import { formatCount, formatWhen } from "./format.js";

/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("./status.js").Problem} Problem */
/** @typedef {import("./format.js").Clock} Clock */
/** @typedef {import("../lib/kinds/kind.ts").KindDeclaration} KindDeclaration */
/** @typedef {import("../lib/kinds/kind.ts").KindField} KindField */

/**
 * The usage's declarations of every kind, or undefined (an answer that carries none: a job's
 * POST answer, a refusal's usage).
 * @param {Usage | null | undefined} usage
 * @returns {KindDeclaration[] | undefined}
 */
export function catalogOf(usage) {
  const catalog = /** @type {{ catalog?: unknown } | null | undefined} */ (usage)?.catalog;
  return Array.isArray(catalog) ? catalog : undefined;
}

/**
 * @typedef {object} Offer
 * @property {KindDeclaration} kind
 * @property {boolean} offered  whether the user's plan offers it
 * @property {string} note  its cost on this plan, or why it is not offered
 */

/**
 * What the plan offers, kind by kind: every declared kind is listed, the ones the plan does not
 * offer with the reason (the page shows them disabled, not hidden).
 * @param {KindDeclaration[]} catalog
 * @param {Usage} usage
 * @returns {Offer[]}
 */
export function offers(catalog, usage) {
  const plan = usage.plan.charAt(0).toUpperCase() + usage.plan.slice(1);
  // A team's pool: its plan is the team's, not the user's own.
  const team = usage.organizationId !== undefined;
  const whose = team ? "your team's pool" : "your plan";
  return catalog.map((kind) => {
    const entry = usage.kinds?.find((k) => k.kind === kind.id);
    if (!entry) {
      const refusal = team
        ? `Your team's plan does not include ${kind.nouns}.`
        : `Your ${plan} plan does not include ${kind.nouns}.`;
      return { kind, offered: false, note: refusal };
    }
    if (usage.meter === "tokens")
      return { kind, offered: true, note: `Counted in tokens, like every job on ${whose}.` };
    return {
      kind,
      offered: true,
      note: `Each ${kind.noun} uses ${units(entry.units)} of ${whose}.`,
    };
  });
}

/** @param {number} n */
const units = (n) => (n === 1 ? "1 unit" : `${formatCount(n)} units`);

/**
 * What a field's help says of its limits: "Up to {maxChars} characters.", then the kind's own help.
 * @param {KindField} field
 */
export function fieldHelp(field) {
  const limit =
    field.type === "text"
      ? `Up to ${formatCount(field.maxChars)} characters.`
      : field.type === "json"
        ? `At most ${formatCount(Math.round(field.maxBytes / 1024))} KB.`
        : `A whole number from ${formatCount(field.min)} to ${formatCount(field.max)}.`;
  return field.help ? `${limit} ${field.help}` : limit;
}

/**
 * A form's values (each field's text, by name) read as the kind's input, or the problems that
 * keep it from being sent, by field name: an empty field, a text too long, JSON that does not
 * parse. An empty whole number is left out (the kind's default applies).
 * @param {KindDeclaration} kind
 * @param {Record<string, string>} values
 * @returns {{ ok: true, input: Record<string, unknown> } | { ok: false, problems: Record<string, string> }}
 */
export function readForm(kind, values) {
  /** @type {Record<string, unknown>} */
  const input = {};
  /** @type {Record<string, string>} */
  const problems = {};
  for (const field of kind.fields) {
    const value = values[field.name] ?? "";
    if (field.type === "integer") {
      if (value.trim() !== "") input[field.name] = Number(value);
    } else if (value.trim() === "") {
      problems[field.name] = "This field is empty.";
    } else if (field.type === "text") {
      if ([...value].length > field.maxChars)
        problems[field.name] = `Keep it to ${formatCount(field.maxChars)} characters.`;
      else input[field.name] = value;
    } else {
      try {
        input[field.name] = JSON.parse(value);
      } catch (e) {
        problems[field.name] = `This is not valid JSON: ${/** @type {Error} */ (e).message}.`;
      }
    }
  }
  return Object.keys(problems).length > 0 ? { ok: false, problems } : { ok: true, input };
}

/**
 * @typedef {{ kind: string[], fields: Record<string, string[]>, form: string[] }} FieldProblems
 */

/**
 * An API refusal of a kind's submission, placed next to the field it names: `invalid_input`'s
 * `details[]` by path (`input.text`, `input.schema.properties…`), `unknown_kind` and
 * `kind_not_in_plan` on the kind choice. Anything else (quota, rate limit, network) is for the
 * whole form: null.
 * @param {Problem} problem
 * @param {KindDeclaration} kind
 * @returns {FieldProblems | null}
 */
export function fieldProblems(problem, kind) {
  /** @type {FieldProblems} */
  const out = { kind: [], fields: {}, form: [] };
  for (const field of kind.fields) out.fields[field.name] = [];
  switch (problem.code) {
    case "unknown_kind":
      out.kind.push("This service does not know this kind of job. Reload the page and try again.");
      return out;
    case "kind_not_in_plan":
      // The server's message names what the plan offers; say what matters here.
      out.kind.push(
        `Your plan does not include ${kind.nouns} (it may have changed since this page loaded).`,
      );
      return out;
    case "invalid_input":
      for (const d of problem.details ?? [])
        place(out, kind, String(d.path ?? ""), String(d.message ?? ""));
      if (!out.kind.length && !out.form.length && Object.values(out.fields).every((f) => !f.length))
        out.form.push(problem.message ?? `This ${kind.noun} cannot be sent.`);
      return out;
    case "payload_too_large":
      out.form.push(
        `This ${kind.noun} is too large to send: keep each field within the limit its help gives.`,
      );
      return out;
    default:
      return null;
  }
}

/**
 * One problem of `invalid_input` where it belongs: a field's (inside a JSON field, with where),
 * the kind choice's, or the whole form's.
 * @param {FieldProblems} out @param {KindDeclaration} kind @param {string} path @param {string} message
 */
function place(out, kind, path, message) {
  if (path === "kind") return void out.kind.push(message);
  for (const field of kind.fields) {
    const at = `input.${field.name}`;
    const list = out.fields[field.name] ?? [];
    if (path === at) return void list.push(message);
    if (path.startsWith(`${at}.`) || path.startsWith(`${at}[`))
      return void list.push(
        field.type === "json"
          ? `At ${path.slice(at.length).replace(/^\./, "")}: ${message}`
          : message,
      );
  }
  out.form.push(message);
}

/**
 * A job plan's quota refusal of a job that costs more than what is left: "Each extraction uses
 * 2 units; 1 of your 100 is left. They come back on 1 Jan at 09:00." Null when the general
 * sentence (status.js) is the true one: nothing left, a token plan, or a one-unit kind.
 * @param {Problem} problem
 * @param {KindDeclaration} kind
 * @param {number} cost  what a job of the kind costs on this plan, in units
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function shortOfUnitsSentence(problem, kind, cost, now, clock = {}) {
  const usage = problem.usage;
  if (problem.code !== "quota_exceeded" || !usage || usage.meter === "tokens") return null;
  const left = Math.max(usage.limit - usage.used, 0);
  if (left === 0 || cost <= left) return null;
  return `Each ${kind.noun} uses ${units(cost)}; ${formatCount(left)} of your ${formatCount(usage.limit)} ${left === 1 ? "is" : "are"} left. They come back ${formatWhen(usage.resetsAt, now, clock)}.`;
}

/**
 * What an offered kind costs on a job plan, in units (1 when the usage does not say).
 * @param {Usage | null | undefined} usage
 * @param {string} kind  its id
 */
export function unitsOf(usage, kind) {
  return usage?.kinds?.find((k) => k.kind === kind)?.units ?? 1;
}
