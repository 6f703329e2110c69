// @ts-check
/**
 * The page: sign-in, usage, the prompt form and the job cards. Pure decisions live in the
 * modules beside it (status.js: words; poll.js: when to look; submission.js: which
 * Idempotency-Key); this file only wires them to the DOM and the API.
 */
import { ApiError, createApi } from "./api.js";
import { AuthError, authErrorSentence, createAuth, devPlan, discover } from "./auth.js";
import { createCard } from "./cards.js";
import { formatClock } from "./format.js";
import {
  EXAMPLES,
  fieldProblems,
  offers,
  readSchema,
  shortOfUnitsSentence,
  unitsOf,
} from "./kinds.js";
import { createPoller, paceOf } from "./poll.js";
import {
  boundCancelWarning,
  cancelWarning,
  errorSentence,
  isActive,
  phaseLabel,
  phaseSentence,
  usageSentence,
} from "./status.js";
import { createSubmission } from "./submission.js";

/** @typedef {import("./status.js").Job} Job */
/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("./cards.js").Card} Card */
/** @typedef {import("./poll.js").Poller} Poller */

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @returns {T}
 */
function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`#${id} is missing`);
  return /** @type {T} */ (node);
}

const ui = {
  loading: byId("loading"),
  account: byId("account"),
  who: byId("who"),
  signOut: /** @type {HTMLButtonElement} */ (byId("sign-out")),
  signIn: byId("sign-in"),
  signInNotice: byId("sign-in-notice"),
  signInError: byId("sign-in-error"),
  passwordForm: /** @type {HTMLFormElement} */ (byId("password-form")),
  newPasswordTemplate: /** @type {HTMLTemplateElement} */ (byId("new-password-template")),
  devForm: /** @type {HTMLFormElement} */ (byId("dev-form")),
  noSignIn: byId("no-sign-in"),
  app: byId("app"),
  usage: byId("usage"),
  form: /** @type {HTMLFormElement} */ (byId("prompt-form")),
  prompt: /** @type {HTMLTextAreaElement} */ (byId("prompt")),
  generate: /** @type {HTMLButtonElement} */ (byId("generate")),
  sending: byId("sending"),
  formError: byId("form-error"),
  kinds: /** @type {HTMLFieldSetElement} */ (byId("kinds")),
  kindError: byId("kind-error"),
  extractForm: /** @type {HTMLFormElement} */ (byId("extract-form")),
  extractText: /** @type {HTMLTextAreaElement} */ (byId("extract-text")),
  extractTextError: byId("extract-text-error"),
  extractSchema: /** @type {HTMLTextAreaElement} */ (byId("extract-schema")),
  extractSchemaError: byId("extract-schema-error"),
  examples: byId("examples"),
  extract: /** @type {HTMLButtonElement} */ (byId("extract")),
  extractSending: byId("extract-sending"),
  extractError: byId("extract-error"),
  jobs: byId("jobs"),
  jobsEmpty: byId("jobs-empty"),
  more: /** @type {HTMLButtonElement} */ (byId("more")),
  announcer: byId("announcer"),
};

const now = () => new Date();

/** @param {string} text */
function announce(text) {
  // Clearing first makes a repeated sentence be read again.
  ui.announcer.textContent = "";
  setTimeout(() => {
    ui.announcer.textContent = text;
  }, 50);
}

/** What an emailed link brought back in the fragment (auth-js reads and clears it). */
function landing() {
  const hash = new URLSearchParams(location.hash.slice(1));
  return { type: hash.get("type"), failed: hash.has("error_code") || hash.has("error") };
}

async function main() {
  const arrived = landing();
  const offer = await discover();
  const auth = createAuth({ supabase: offer.supabase, storage: sessionStorage });
  /** @type {string} */
  let linkNotice = "";
  try {
    await auth.ready();
  } catch (e) {
    linkNotice = authErrorSentence(e instanceof AuthError ? e.code : "unavailable");
  }
  const api = createApi({ token: auth.accessToken, refresh: auth.refresh });
  const submission = createSubmission();
  const extraction = createSubmission();
  /** @type {Usage | null} */
  let lastUsage = null;

  /** @type {Map<string, { card: Card, poller: Poller | null }>} */
  const cards = new Map();
  /** @type {string | null} */
  let cursor = null;
  let busy = false;
  /** @type {ReturnType<typeof setInterval> | null} */
  let clockTimer = null;

  // ---- sign-in --------------------------------------------------------------------------

  /** @param {string} [notice] */
  function showSignIn(notice = "") {
    stopAll();
    ui.loading.hidden = true;
    ui.app.hidden = true;
    ui.account.hidden = true;
    ui.signIn.hidden = false;
    ui.signInNotice.textContent = notice;
    ui.signInError.textContent = "";
    document.getElementById("new-password-form")?.remove();
    ui.passwordForm.hidden = !offer.supabase;
    // `npm run dev`: its one-click local sign-in first, the local Auth stand-in's forms after it
    if (offer.dev) ui.passwordForm.before(ui.devForm);
    ui.devForm.hidden = !offer.dev;
    ui.noSignIn.hidden = Boolean(offer.supabase || offer.dev);
    const first = /** @type {HTMLElement | null} */ (
      ui.signIn.querySelector("form:not([hidden]) input")
    );
    first?.focus();
  }

  /** @param {() => Promise<void>} signIn @param {HTMLFormElement} form */
  async function trySignIn(signIn, form) {
    const button = /** @type {HTMLButtonElement} */ (form.querySelector("button[type=submit]"));
    if (button.getAttribute("aria-disabled") === "true") return;
    button.setAttribute("aria-disabled", "true");
    ui.signInError.textContent = "";
    try {
      await signIn();
      await showApp();
    } catch (e) {
      ui.signInError.textContent = authErrorSentence(
        e instanceof AuthError ? e.code : "unavailable",
      );
    } finally {
      button.removeAttribute("aria-disabled");
    }
  }

  /** Where an emailed link lands: this page, without any fragment. */
  const back = () => `${location.origin}${location.pathname}`;

  /**
   * Sends a mail (sign-up confirmation, magic link, reset) and says where to look.
   * @param {() => Promise<unknown>} send
   * @param {HTMLButtonElement} button
   * @param {string} sentence
   */
  async function trySend(send, button, sentence) {
    if (button.getAttribute("aria-disabled") === "true") return;
    button.setAttribute("aria-disabled", "true");
    ui.signInError.textContent = "";
    ui.signInNotice.textContent = "";
    try {
      const outcome = await send();
      if (outcome === "signed_in") return await showApp();
      ui.signInNotice.textContent = sentence;
      announce(sentence);
    } catch (e) {
      ui.signInError.textContent = authErrorSentence(
        e instanceof AuthError ? e.code : "unavailable",
      );
    } finally {
      button.removeAttribute("aria-disabled");
    }
  }

  ui.passwordForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const data = new FormData(ui.passwordForm);
    const email = String(data.get("email") ?? "").trim();
    const password = String(data.get("password") ?? "");
    const submitter = /** @type {SubmitEvent} */ (e).submitter;
    const button = /** @type {HTMLButtonElement} */ (
      submitter instanceof HTMLButtonElement ? submitter : ui.passwordForm.querySelector("button")
    );
    const action = button.value;
    if ((action === "sign-in" || action === "sign-up") && !password) {
      ui.signInError.textContent = "Enter a password (or ask for a sign-in link).";
      return;
    }
    if (action === "sign-up")
      void trySend(
        () => auth.signUp(email, password, back()),
        button,
        `Check your email: we sent a link to ${email}. Open it to confirm your account.`,
      );
    else if (action === "magic-link")
      void trySend(
        () => auth.sendMagicLink(email, back()),
        button,
        `Check your email: we sent a sign-in link to ${email}.`,
      );
    else if (action === "reset")
      void trySend(
        () => auth.sendPasswordReset(email, back()),
        button,
        `If ${email} has an account, we sent it a link to choose a new password.`,
      );
    else void trySignIn(() => auth.signInWithPassword(email, password), ui.passwordForm);
  });
  /** After a reset link: the form for the new password, in place of the sign-in form. */
  function askNewPassword() {
    showSignIn("Choose a new password for your account.");
    ui.passwordForm.hidden = true;
    const form = /** @type {HTMLFormElement} */ (
      /** @type {DocumentFragment} */ (ui.newPasswordTemplate.content.cloneNode(true))
        .firstElementChild
    );
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const password = String(new FormData(form).get("password") ?? "");
      void trySignIn(() => auth.updatePassword(password), form);
    });
    ui.passwordForm.after(form);
    form.querySelector("input")?.focus();
  }
  ui.devForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const plan = devPlan(new FormData(ui.devForm).get("plan"));
    void trySignIn(() => auth.devSignIn(plan), ui.devForm);
  });
  ui.signOut.addEventListener("click", () => {
    void auth.signOut();
  });
  auth.onChange((s) => {
    if (!s) showSignIn("You are signed out.");
  });

  // ---- the signed-in page ---------------------------------------------------------------

  async function showApp() {
    const s = auth.session();
    if (!s) return showSignIn();
    ui.loading.hidden = true;
    ui.signIn.hidden = true;
    ui.app.hidden = false;
    ui.account.hidden = false;
    ui.who.textContent = s.email
      ? `Signed in as ${s.email}`
      : `Signed in (local user ${s.userId.slice(0, 8)})`;
    ui.formError.textContent = "";
    ui.prompt.focus();
    clockTimer ??= setInterval(() => {
      const t = now();
      for (const { card } of cards.values()) card.tick(t);
    }, 1000);
    await Promise.all([refreshUsage(), loadJobs(null)]);
  }

  /** @param {unknown} e */
  function handleAuthFailure(e) {
    if (e instanceof ApiError && e.problem.code === "unauthorized") {
      void auth.signOut().then(() => showSignIn(errorSentence(e.problem, now())));
      return true;
    }
    return false;
  }

  /** @param {Usage} usage */
  function renderUsage(usage) {
    lastUsage = usage;
    ui.usage.textContent = usageSentence(usage, now());
    renderKinds(usage);
  }

  async function refreshUsage() {
    try {
      renderUsage(await api.usage());
    } catch (e) {
      if (!handleAuthFailure(e)) ui.usage.textContent = "Your usage could not be loaded just now.";
    }
  }

  /** @param {string | null} from */
  async function loadJobs(from) {
    try {
      const page = await api.listJobs(from);
      for (const job of page.jobs) upsert(job, { atTop: false });
      cursor = page.nextCursor;
      ui.more.hidden = cursor === null;
    } catch (e) {
      if (!handleAuthFailure(e))
        ui.jobsEmpty.textContent = "Your jobs could not be loaded just now.";
    }
    ui.jobsEmpty.hidden = cards.size > 0;
  }

  ui.more.addEventListener("click", () => {
    if (cursor) void loadJobs(cursor);
  });

  /**
   * Show a job (new or updated); start or stop polling it; announce a phase change.
   * @param {Job} job
   * @param {{ atTop: boolean }} where
   */
  function upsert(job, where) {
    const t = now();
    const known = cards.get(job.id);
    if (known) {
      const before = known.card.job;
      known.card.update(job, t);
      if (before.phase !== job.phase) {
        announce(announcement(job));
        if (!isActive(job)) {
          known.poller?.stop();
          known.poller = null;
          void refreshUsage();
        }
      }
      return;
    }
    const card = createCard(job, { prompt: job.prompt, now: t, onCancel: cancel });
    if (where.atTop) ui.jobs.prepend(card.el);
    else ui.jobs.append(card.el);
    cards.set(job.id, { card, poller: isActive(job) ? startPolling(job.id) : null });
    ui.jobsEmpty.hidden = true;
  }

  /** @param {Job} job */
  function announcement(job) {
    const name = `Job from ${formatClock(job.createdAt)}`;
    return job.phase === "running"
      ? `${name}: ${phaseLabel(job.phase)}.`
      : `${name}: ${phaseSentence(job, now())}`;
  }

  /** @param {string} id */
  function startPolling(id) {
    const poller = createPoller({
      tick: async () => {
        const entry = cards.get(id);
        if (!entry) return "stop";
        let job;
        try {
          job = await api.getJob(id);
        } catch (e) {
          if (handleAuthFailure(e)) return "stop";
          if (e instanceof ApiError && e.problem.code === "not_found") return "stop";
          throw e;
        }
        const before = entry.card.job;
        const changed =
          before.phase !== job.phase ||
          before.attempts !== job.attempts ||
          before.resumeAt !== job.resumeAt ||
          before.startedAt !== job.startedAt ||
          // The output streaming in: keep looking at the first pace while it grows.
          before.partialOutput !== job.partialOutput;
        upsert(job, { atTop: false });
        if (!isActive(job)) return "stop";
        return changed ? "changed" : "same";
      },
      pace: () => paceOf(cards.get(id)?.card.job),
    });
    if (document.hidden) poller.pause();
    poller.start();
    return poller;
  }

  function stopAll() {
    for (const { poller } of cards.values()) poller?.stop();
    cards.clear();
    ui.jobs.replaceChildren();
    if (clockTimer !== null) clearInterval(clockTimer);
    clockTimer = null;
  }

  document.addEventListener("visibilitychange", () => {
    for (const { poller } of cards.values()) {
      if (document.hidden) poller?.pause();
      else poller?.resume();
    }
  });

  /**
   * Cancel, but ask first when it will not refund: the job is read again (it may have started
   * since the card's last poll) and, if `cancelRefunds` is false, the card asks with the honest
   * sentence before the DELETE is sent.
   * @param {Job} job
   */
  async function cancel(job) {
    const entry = cards.get(job.id);
    try {
      const fresh = await api.getJob(job.id);
      upsert(fresh, { atTop: false });
      if (!isActive(fresh)) return;
      if (fresh.cancelCharges === "bound") {
        entry?.card.confirmCancel(boundCancelWarning(fresh), () => void cancelNow(job));
        return;
      }
      if (!fresh.cancelRefunds) {
        const usage = await api.usage();
        renderUsage(usage);
        entry?.card.confirmCancel(cancelWarning(usage), () => void cancelNow(job));
        return;
      }
    } catch (e) {
      if (handleAuthFailure(e)) return;
      if (e instanceof ApiError) announce(errorSentence(e.problem, now()));
      return;
    }
    await cancelNow(job);
  }

  /** @param {Job} job */
  async function cancelNow(job) {
    const entry = cards.get(job.id);
    try {
      const updated = await api.cancelJob(job.id);
      upsert(updated, { atTop: false });
      // the Cancel button is gone now: keep keyboard focus on this card
      entry?.card.el.querySelector("h3")?.focus();
    } catch (e) {
      if (handleAuthFailure(e)) return;
      if (e instanceof ApiError) announce(errorSentence(e.problem, now()));
    }
  }

  // ---- the kind of job ------------------------------------------------------------------

  /** @param {string} kind */
  const kindRadio = (kind) =>
    /** @type {HTMLInputElement | null} */ (
      ui.kinds.querySelector(`input[name="kind"][value="${kind}"]`)
    );

  /** The plan's offer, kind by kind: a kind it does not offer stays listed, disabled, with why. */
  /** @param {Usage} usage */
  function renderKinds(usage) {
    for (const offer of offers(usage)) {
      const radio = kindRadio(offer.kind);
      if (radio) radio.disabled = !offer.offered;
      const note = document.getElementById(`kind-note-${offer.kind}`);
      if (note) note.textContent = offer.note;
      if (!offer.offered && radio?.checked) kindRadio("document")?.click();
    }
  }

  function showKind() {
    const extract = kindRadio("extract")?.checked === true;
    ui.form.hidden = extract;
    ui.extractForm.hidden = !extract;
    ui.kindError.textContent = "";
  }
  ui.kinds.addEventListener("change", showKind);

  for (const example of EXAMPLES) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "secondary";
    button.textContent = example.name;
    button.addEventListener("click", () => {
      ui.extractSchema.value = JSON.stringify(example.schema, null, 2);
      if (ui.extractText.value.trim() === "") ui.extractText.value = example.text;
      clearExtractErrors();
      extraction.edited(extractIdentity());
    });
    ui.examples.append(button);
  }

  function clearExtractErrors() {
    ui.kindError.textContent = "";
    ui.extractTextError.textContent = "";
    ui.extractSchemaError.replaceChildren();
    ui.extractError.textContent = "";
    ui.extractText.removeAttribute("aria-invalid");
    ui.extractSchema.removeAttribute("aria-invalid");
  }

  /** The submission as the Idempotency-Key sees it: the same text and schema, the same key. */
  const extractIdentity = () => `${ui.extractText.value}\u0000${ui.extractSchema.value}`;

  /** @param {string[]} problems */
  function showSchemaProblems(problems) {
    if (problems.length === 1) {
      ui.extractSchemaError.replaceChildren(problems[0] ?? "");
    } else {
      const list = document.createElement("ul");
      for (const text of problems) {
        const li = document.createElement("li");
        li.textContent = text;
        list.append(li);
      }
      ui.extractSchemaError.replaceChildren(list);
    }
    ui.extractSchema.setAttribute("aria-invalid", "true");
  }

  for (const field of [ui.extractText, ui.extractSchema])
    field.addEventListener("input", () => {
      extraction.edited(extractIdentity());
      clearExtractErrors();
    });

  /**
   * An accepted job (new, or an Idempotency-Key replay's) on top, announced only when new.
   * @param {Job} job
   * @param {Usage} usage
   */
  function showAccepted(job, usage) {
    renderUsage(usage);
    const known = cards.has(job.id);
    upsert(job, { atTop: true });
    if (!known) announce(announcement(job));
  }

  ui.extractForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (busy) return;
    clearExtractErrors();
    const text = ui.extractText.value;
    const schema = readSchema(ui.extractSchema.value);
    if (text.trim() === "") {
      ui.extractTextError.textContent = "Write or paste the text to extract from.";
      ui.extractText.setAttribute("aria-invalid", "true");
    }
    if (!schema.ok) showSchemaProblems([schema.message]);
    if (text.trim() === "" || !schema.ok) {
      (text.trim() === "" ? ui.extractText : ui.extractSchema).focus();
      return;
    }
    busy = true;
    ui.extract.setAttribute("aria-disabled", "true");
    ui.extractSending.textContent = "Sending…";
    try {
      const { job, usage } = await api.submit(
        { kind: "extract", input: { text, schema: schema.schema } },
        extraction.keyFor(extractIdentity()),
      );
      extraction.succeeded();
      ui.extractText.value = "";
      showAccepted(job, usage);
    } catch (e) {
      if (handleAuthFailure(e)) return;
      const problem = e instanceof ApiError ? e.problem : { code: "network" };
      const placed = fieldProblems(problem);
      if (placed) {
        ui.kindError.textContent = placed.kind.join(" ");
        ui.extractTextError.textContent = placed.text.join(" ");
        if (placed.text.length) ui.extractText.setAttribute("aria-invalid", "true");
        if (placed.schema.length) showSchemaProblems(placed.schema);
        ui.extractError.textContent = placed.form.join(" ");
        if (placed.text.length) ui.extractText.focus();
        else if (placed.schema.length) ui.extractSchema.focus();
      } else {
        ui.extractError.textContent =
          shortOfUnitsSentence(problem, unitsOf(problem.usage ?? lastUsage, "extract"), now()) ??
          errorSentence(problem, now());
      }
      if (problem.usage) renderUsage(problem.usage);
    } finally {
      busy = false;
      ui.extract.removeAttribute("aria-disabled");
      ui.extractSending.textContent = "";
    }
  });

  // ---- submitting -----------------------------------------------------------------------

  ui.prompt.addEventListener("input", () => {
    submission.edited(ui.prompt.value);
    ui.formError.textContent = "";
  });

  ui.form.addEventListener("submit", async (e) => {
    e.preventDefault();
    // A second click while the first is on its way does nothing; a retry after a lost
    // answer reuses the same Idempotency-Key (submission.js), so neither spends twice.
    if (busy) return;
    const prompt = ui.prompt.value;
    if (prompt.trim() === "") {
      ui.formError.textContent = "Write a prompt first.";
      ui.prompt.focus();
      return;
    }
    busy = true;
    ui.generate.setAttribute("aria-disabled", "true");
    ui.formError.textContent = "";
    ui.sending.textContent = "Sending…";
    try {
      const { job, usage } = await api.submit(prompt, submission.keyFor(prompt));
      submission.succeeded();
      ui.prompt.value = "";
      showAccepted(job, usage);
    } catch (e) {
      if (handleAuthFailure(e)) return;
      const problem = e instanceof ApiError ? e.problem : { code: "network" };
      ui.formError.textContent = errorSentence(problem, now());
      if (problem.usage) renderUsage(problem.usage);
    } finally {
      busy = false;
      ui.generate.removeAttribute("aria-disabled");
      ui.sending.textContent = "";
    }
  });

  if (auth.session() && arrived.type === "recovery" && !arrived.failed) {
    // the reset link signed them in: ask for the new password before anything else
    askNewPassword();
  } else if (auth.session()) await showApp();
  else {
    showSignIn();
    ui.signInError.textContent = linkNotice;
  }
}

main().catch(() => {
  ui.loading.textContent = "The page could not start. Reload to try again.";
});
