// @ts-check
/**
 * One job card. What a person wrote (the prompt, the text a kind reads) goes in with
 * `textContent`, never `innerHTML`: markup in it is shown as text and never runs. A finished
 * output is shown as what its kind declares it is: a text as markdown rendered through render.js
 * (marked, then DOMPurify, inserted as DOM nodes), a JSON value as indented text in a <pre>;
 * either can be copied or downloaded as a file.
 * While the job runs, the output region shows what the model has written so far, as the API
 * reports it (the worker records it about once a second): no estimate, no progress bar. That
 * partial text stays plain text, for every kind: a half-written answer is often half a markdown
 * construct (an open code fence, half a table, half a JSON object) whose rendering would jump
 * around at each poll, and it is shown as exactly what the model has sent so far.
 */
import { formatClock } from "./format.js";
import { outputFile } from "./outputs.js";
import { renderMarkdown } from "./render.js";
import { isActive, phaseLabel, phaseSentence } from "./status.js";

/** @typedef {import("./status.js").Job} Job */
/** @typedef {import("./format.js").Clock} Clock */
/** @typedef {import("./outputs.js").OutputFile} OutputFile */
/** @typedef {import("../lib/kinds/kind.ts").KindDeclaration} KindDeclaration */

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
 * @param {{ prompt: string | null, kind?: KindDeclaration | undefined, now: Date, clock?: Clock, onCancel: (job: Job) => void }} o
 *   `kind`: the job's kind's declaration, which names the card ("Extraction from 09:00") and
 *   says what its output is; without it, "Job from 09:00".
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
  const noun = o.kind?.noun ?? "job";
  const name = `${noun.charAt(0).toUpperCase()}${noun.slice(1)} from ${formatClock(job.createdAt, clock)}`;
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

  // Copy and download, once there is a finished output.
  const actions = el("div", "output-actions row");
  const copy = el("button", "secondary copy");
  copy.type = "button";
  const download = el("button", "secondary download");
  download.type = "button";
  const copied = el("span", "muted");
  copied.setAttribute("role", "status");
  actions.append(copy, download, copied);
  /** @type {OutputFile | null} */
  let file = null;
  copy.addEventListener("click", () => {
    if (!file) return;
    navigator.clipboard.writeText(file.text).then(
      () => {
        copied.textContent = "Copied.";
      },
      () => {
        copied.textContent = "This browser did not let the page copy: select the text instead.";
      },
    );
  });
  download.addEventListener("click", () => {
    if (file) save(file);
  });

  li.append(h3, prompt, phase, output, actions, cancel, confirm);

  /** What the output region shows now, so an unchanged job is not rendered again. */
  let shown = "";

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
      file = outputFile(next, o.kind?.output);
      const key = file ? `${file.format}\0${file.text}` : `text\0${partial ?? ""}`;
      if (key !== shown) {
        shown = key;
        showOutput(file, partial);
      }
      output.hidden = !file && (partial === null || partial === "");
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
  /**
   * @param {OutputFile | null} finished
   * @param {string | null} partial
   */
  function showOutput(finished, partial) {
    output.classList.toggle("markdown", finished?.format === "markdown");
    actions.hidden = !finished;
    copied.textContent = "";
    if (!finished) {
      output.textContent = partial ?? "";
      return;
    }
    const what = finished.format === "markdown" ? "markdown" : "JSON";
    const of = `of the ${name.toLowerCase()}`;
    copy.textContent = `Copy ${what}`;
    copy.setAttribute("aria-label", `Copy ${what} ${of}`);
    const extension = finished.name.slice(finished.name.lastIndexOf("."));
    download.textContent = `Download ${extension}`;
    download.setAttribute("aria-label", `Download ${extension} ${of}`);
    if (finished.format === "markdown") output.replaceChildren(renderMarkdown(finished.text));
    else output.replaceChildren(el("pre", "json", finished.text));
  }

  card.update(job, o.now);
  return card;
}

/**
 * Saves a file the way a download link does: a Blob URL on an `a[download]`, clicked, then let go.
 * @param {OutputFile} file
 */
function save(file) {
  const url = URL.createObjectURL(new Blob([file.text], { type: file.type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = file.name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  // The browser has read the URL once the download starts; free it a little later.
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
