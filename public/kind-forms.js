// @ts-check
/**
 * The kind choice and one form per kind, built from the kinds' declarations (`GET /api/usage`'s
 * `catalog`; the words and checks are kinds.js's): a radio per kind, its note saying what it
 * costs on the plan or why the plan does not offer it, and a form of the kind's fields. A
 * submission sends `{kind, input}` with one Idempotency-Key per intended job (submission.js).
 * Element ids follow the kind's and its fields' names: `<kind>-form`, `<kind>-<field>`,
 * `<kind>-<field>-error`, `<kind>-submit`, `<kind>-error`, `kind-note-<kind>`.
 */
import { ApiError } from "./api.js";
import {
  fieldHelp,
  fieldProblems,
  offers,
  readForm,
  shortOfUnitsSentence,
  unitsOf,
} from "./kinds.js";
import { errorSentence } from "./status.js";
import { createSubmission } from "./submission.js";

/** @typedef {import("./status.js").Job} Job */
/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("./api.js").Api} Api */
/** @typedef {import("../lib/kinds/kind.ts").KindDeclaration} KindDeclaration */
/** @typedef {import("../lib/kinds/kind.ts").KindField} KindField */

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Record<string, string>} [attrs]
 * @param {string} [text]
 */
function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * @typedef {object} FormsDeps
 * @property {Api} api
 * @property {HTMLFieldSetElement} choices  the fieldset the kind radios go in (after its legend)
 * @property {HTMLElement} choiceError  under the choices: a refusal of the kind itself
 * @property {HTMLElement} forms  where the forms go
 * @property {() => Usage | null} usage  the last usage the page saw
 * @property {(job: Job, usage: Usage) => void} accepted  a job was made (or replayed)
 * @property {(usage: Usage) => void} usageSeen  a refusal carried the usage
 * @property {(e: unknown) => boolean} authFailed  true when the error signed the user out
 * @property {() => string | null} drawOn  the organization whose pool a job draws on; null: the user's plan
 */

/** @param {FormsDeps} deps */
export function createKindForms(deps) {
  /** @type {Map<string, { kind: KindDeclaration, radio: HTMLInputElement, note: HTMLElement, form: KindForm }>} */
  const kinds = new Map();
  let built = "";
  let busy = false;

  /** Builds the choices and forms once per catalog: a usage update only changes the notes. */
  function build(/** @type {KindDeclaration[]} */ catalog) {
    const ids = JSON.stringify(catalog);
    if (ids === built) return;
    built = ids;
    kinds.clear();
    deps.choices.querySelectorAll("label.choice").forEach((n) => {
      n.remove();
    });
    deps.forms.replaceChildren();
    for (const kind of catalog) {
      const radio = el("input", {
        type: "radio",
        name: "kind",
        value: kind.id,
        "aria-describedby": `kind-note-${kind.id}`,
      });
      const note = el("span", { id: `kind-note-${kind.id}`, class: "muted kind-note" });
      const label = el("label", { class: "choice" });
      label.append(radio, el("span", {}, `${kind.label} `));
      label.lastElementChild?.append(note);
      deps.choices.append(label);
      const form = createKindForm(kind, { ...deps, busy: () => busy, setBusy: (b) => (busy = b) });
      deps.forms.append(form.el);
      kinds.set(kind.id, { kind, radio, note, form });
    }
  }

  /** Shows the form of the checked kind. */
  function show() {
    for (const { radio, form } of kinds.values()) form.el.hidden = !radio.checked;
    deps.choiceError.textContent = "";
  }
  deps.choices.addEventListener("change", show);

  return {
    /**
     * The plan's offer, kind by kind: a kind it does not offer stays listed, disabled, with why.
     * @param {Usage} usage
     * @param {KindDeclaration[]} catalog
     */
    render(usage, catalog) {
      build(catalog);
      for (const offer of offers(catalog, usage)) {
        const entry = kinds.get(offer.kind.id);
        if (!entry) continue;
        entry.radio.disabled = !offer.offered;
        entry.note.textContent = offer.note;
        if (!offer.offered) entry.radio.checked = false;
      }
      const checked = [...kinds.values()].some((k) => k.radio.checked);
      if (!checked) {
        const first = [...kinds.values()].find((k) => !k.radio.disabled);
        if (first) first.radio.checked = true;
      }
      show();
    },
    /** Keyboard focus on the shown form's first field. */
    focus() {
      for (const { radio, form } of kinds.values()) if (radio.checked) form.focus();
    },
  };
}

/**
 * The kind's examples as buttons, each filling the form (`fill`).
 * @param {KindDeclaration} kind
 * @param {(example: import("../lib/kinds/kind.ts").KindExample) => void} fill
 */
function exampleButtons(kind, fill) {
  const set = el("fieldset", { class: "examples" });
  set.append(el("legend", {}, "Start from an example"));
  const row = el("div", { class: "row" });
  for (const example of kind.examples ?? []) {
    const b = el("button", { type: "button", class: "secondary" }, example.name);
    b.addEventListener("click", () => fill(example));
    row.append(b);
  }
  set.append(row);
  return set;
}

/**
 * @typedef {object} KindForm
 * @property {HTMLFormElement} el
 * @property {() => void} focus
 */

/**
 * One kind's form: a field per declared field, the kind's examples as buttons, its submit.
 * @param {KindDeclaration} kind
 * @param {FormsDeps & { busy: () => boolean, setBusy: (busy: boolean) => void }} deps
 * @returns {KindForm}
 */
function createKindForm(kind, deps) {
  const id = kind.id;
  const form = el("form", { id: `${id}-form`, novalidate: "", "aria-labelledby": `${id}-title` });
  form.hidden = true;
  form.append(el("h3", { id: `${id}-title` }, `New ${kind.noun}`));
  /** @type {Map<string, { field: KindField, input: HTMLTextAreaElement | HTMLInputElement, error: HTMLElement }>} */
  const fields = new Map();
  for (const field of kind.fields) {
    const fid = `${id}-${field.name}`;
    const input =
      field.type === "integer"
        ? el("input", { type: "number", min: String(field.min), max: String(field.max), step: "1" })
        : el("textarea", { rows: field.type === "json" ? "10" : "5", required: "" });
    input.id = fid;
    input.name = field.name;
    input.setAttribute("aria-describedby", `${fid}-help ${fid}-error`);
    if (field.type === "integer") input.value = String(field.default);
    if (field.type === "json") {
      input.className = "code";
      input.setAttribute("spellcheck", "false");
      input.setAttribute("autocomplete", "off");
    }
    const error = el("div", { id: `${fid}-error`, class: "error", role: "alert" });
    form.append(
      el("label", { for: fid }, field.label),
      input,
      el("p", { id: `${fid}-help`, class: "muted" }, fieldHelp(field)),
      error,
    );
    fields.set(field.name, { field, input, error });
  }
  // the examples go before the first JSON field (the schema they fill), else at the end
  const json = form.querySelector(".code")?.previousElementSibling ?? null;
  if (kind.examples?.length)
    form.insertBefore(
      exampleButtons(kind, (e) => fill(e)),
      json,
    );
  const button = el("button", { type: "submit", id: `${id}-submit` }, kind.action);
  const sending = el("span", { id: `${id}-sending`, class: "muted", role: "status" });
  const row = el("div", { class: "row" });
  row.append(button, sending);
  const formError = el("p", { id: `${id}-error`, class: "error", role: "alert" });
  form.append(row, formError);

  const submission = createSubmission();
  /** The values as the Idempotency-Key sees them: the same values, the same key. */
  // What the key stands for: the fields and the pool it draws on (another pool is another job).
  const identity = () =>
    [deps.drawOn() ?? "", ...[...fields.values()].map((f) => f.input.value)].join("\u0000");
  const values = () => Object.fromEntries([...fields].map(([name, f]) => [name, f.input.value]));

  /** An example's values in the form: its text only where there is none (the user's stays). */
  function fill(/** @type {import("../lib/kinds/kind.ts").KindExample} */ example) {
    for (const [name, value] of Object.entries(example.input)) {
      const f = fields.get(name);
      if (!f || (f.field.type === "text" && f.input.value.trim() !== "")) continue;
      f.input.value = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    }
    clearErrors();
    submission.edited(identity());
  }

  function clearErrors() {
    deps.choiceError.textContent = "";
    formError.textContent = "";
    for (const f of fields.values()) {
      f.error.replaceChildren();
      f.input.removeAttribute("aria-invalid");
    }
  }

  /** @param {Record<string, string[]>} problems  by field name */
  function showProblems(problems) {
    let first = null;
    for (const [name, list] of Object.entries(problems)) {
      const f = fields.get(name);
      if (!f || list.length === 0) continue;
      if (list.length === 1) f.error.replaceChildren(list[0] ?? "");
      else {
        const ul = el("ul");
        for (const text of list) ul.append(el("li", {}, text));
        f.error.replaceChildren(ul);
      }
      f.input.setAttribute("aria-invalid", "true");
      first ??= f.input;
    }
    first?.focus();
  }

  for (const f of fields.values())
    f.input.addEventListener("input", () => {
      submission.edited(identity());
      clearErrors();
    });

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // A second click while the first is on its way does nothing; a retry after a lost
    // answer reuses the same Idempotency-Key (submission.js), so neither spends twice.
    if (deps.busy()) return;
    clearErrors();
    const read = readForm(kind, values());
    if (!read.ok) {
      showProblems(Object.fromEntries(Object.entries(read.problems).map(([k, v]) => [k, [v]])));
      return;
    }
    deps.setBusy(true);
    button.setAttribute("aria-disabled", "true");
    sending.textContent = "Sending…";
    try {
      const { job, usage } = await deps.api.submit(
        { kind: id, input: read.input },
        submission.keyFor(identity()),
        deps.drawOn(),
      );
      submission.succeeded();
      for (const f of fields.values()) if (f.field.type === "text") f.input.value = "";
      deps.accepted(job, usage);
    } catch (e) {
      if (deps.authFailed(e)) return;
      refused(e instanceof ApiError ? e.problem : { code: "network" });
    } finally {
      deps.setBusy(false);
      button.removeAttribute("aria-disabled");
      sending.textContent = "";
    }
  });

  /** @param {import("./status.js").Problem} problem */
  function refused(problem) {
    const placed = fieldProblems(problem, kind);
    if (placed) {
      deps.choiceError.textContent = placed.kind.join(" ");
      formError.textContent = placed.form.join(" ");
      showProblems(placed.fields);
    } else {
      const now = new Date();
      const cost = unitsOf(problem.usage ?? deps.usage(), id);
      formError.textContent =
        shortOfUnitsSentence(problem, kind, cost, now) ?? errorSentence(problem, now);
    }
    if (problem.usage) deps.usageSeen(problem.usage);
  }

  return {
    el: form,
    focus: () => [...fields.values()][0]?.input.focus(),
  };
}
