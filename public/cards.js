// @ts-check
/**
 * One job card. Everything that came from a person or a model (the prompt, the output) goes
 * in with `textContent`, never `innerHTML`: markup in it is shown as text and never runs.
 * While the job runs, the output region shows what the model has written so far, as the API
 * reports it (the worker records it about once a second): no estimate, no progress bar.
 */
import { formatClock } from "./format.js";
import { isActive, phaseLabel, phaseSentence } from "./status.js";

/** @typedef {import("./status.js").Job} Job */
/** @typedef {import("./format.js").Clock} Clock */

/**
 * @typedef {object} Card
 * @property {HTMLLIElement} el
 * @property {Job} job
 * @property {(job: Job, now: Date) => void} update
 * @property {(now: Date) => void} tick  refresh the running clock text only
 * @property {(sentence: string, onConfirm: () => void) => void} confirmCancel  ask before a
 *   cancel that will not refund: the sentence, "Cancel anyway" and "Keep generating"
 */

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} className
 * @param {string} [text]
 */
function el(tag, className, text) {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * @param {Job} job
 * @param {{ prompt: string | null, now: Date, clock?: Clock, onCancel: (job: Job) => void }} o
 * @returns {Card}
 */
export function createCard(job, o) {
  const clock = o.clock ?? {};
  const li = el("li", "job");
  li.dataset.jobId = job.id;
  const titleId = `job-${job.id}-title`;
  li.setAttribute("aria-labelledby", titleId);

  const h3 = el("h3", "");
  h3.id = titleId;
  h3.tabIndex = -1;
  const name = `Job from ${formatClock(job.createdAt, clock)}`;
  const title = el("span", "", name);
  const badge = el("span", "badge");
  h3.append(title, badge);

  const prompt = el("p", "job-prompt");
  const phase = el("p", "job-phase");
  const output = el("div", "job-output");
  output.setAttribute("role", "region");
  output.setAttribute("aria-label", `Output of the ${name.toLowerCase()}`);
  output.tabIndex = 0;
  const cancel = el("button", "cancel secondary", "Cancel");
  cancel.type = "button";
  cancel.setAttribute("aria-label", `Cancel the ${name.toLowerCase()}`);
  cancel.addEventListener("click", () => o.onCancel(card.job));

  // The question before a cancel that will not give the unit back.
  const confirm = el("div", "cancel-confirm");
  confirm.hidden = true;
  const question = el("p", "cancel-question");
  question.setAttribute("role", "alert");
  const yes = el("button", "cancel-anyway", "Cancel anyway");
  yes.type = "button";
  const no = el("button", "keep secondary", "Keep generating");
  no.type = "button";
  confirm.append(question, yes, no);
  /** @type {(() => void) | null} */
  let pending = null;
  const closeConfirm = () => {
    confirm.hidden = true;
    pending = null;
    cancel.disabled = false;
  };
  yes.addEventListener("click", () => {
    const go = pending;
    closeConfirm();
    go?.();
  });
  no.addEventListener("click", () => {
    closeConfirm();
    cancel.focus();
  });

  li.append(h3, prompt, phase, output, cancel, confirm);

  const promptText = job.prompt ?? o.prompt;

  /** @type {Card} */
  const card = {
    el: li,
    job,
    update(next, now) {
      card.job = next;
      li.dataset.phase = next.phase;
      badge.textContent = phaseLabel(next.phase);
      const p = next.prompt ?? promptText;
      prompt.textContent = p ? `“${p}”` : "";
      prompt.hidden = !p;
      phase.textContent = phaseSentence(next, now, clock);
      const partial = next.phase === "running" ? (next.partialOutput ?? null) : null;
      const text = next.phase === "succeeded" ? next.output : partial;
      output.textContent = text ?? "";
      output.hidden = text === null || text === "";
      output.classList.toggle("partial", partial !== null);
      output.setAttribute("aria-busy", String(partial !== null));
      cancel.hidden = !isActive(next);
      if (!isActive(next)) closeConfirm();
    },
    confirmCancel(sentence, onConfirm) {
      question.textContent = sentence;
      pending = onConfirm;
      cancel.disabled = true;
      confirm.hidden = false;
      no.focus();
    },
    tick(now) {
      if (card.job.phase === "running") phase.textContent = phaseSentence(card.job, now, clock);
    },
  };
  card.update(job, o.now);
  return card;
}
