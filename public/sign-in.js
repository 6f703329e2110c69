// @ts-check
/**
 * The sign-in section: the password form (sign in, sign up, a magic link, a reset), the new
 * password form a reset link brings, and `npm run dev`'s one-click local sign-in. The words
 * of Auth's refusals are auth.js's.
 */
import { AuthError, authErrorSentence, devPlan } from "./auth.js";
import { formatCount } from "./format.js";

/** @typedef {import("./auth.js").Auth} Auth */
/** @typedef {import("./auth.js").DevPlanOffer} DevPlanOffer */

/**
 * How the local sign-in names a plan: "Free plan (1 generation a day)".
 * @param {DevPlanOffer} plan
 */
export function devPlanLabel(plan) {
  const amount =
    plan.meter === "tokens"
      ? `${formatCount(plan.units)} tokens`
      : plan.meter === "money"
        ? `$${formatCount(plan.units / 1_000_000)}`
        : `${formatCount(plan.units)} ${plan.units === 1 ? "generation" : "generations"}`;
  return `${plan.name} plan (${amount} a ${plan.period})`;
}

/**
 * The local sign-in's choice of plan, one radio per plan of the dev database, the first checked.
 * @param {HTMLFormElement} form @param {DevPlanOffer[]} plans
 */
function devChoices(form, plans) {
  const fieldset = form.querySelector("fieldset");
  plans.forEach((plan, i) => {
    const input = document.createElement("input");
    input.type = "radio";
    input.name = "plan";
    input.value = plan.id;
    input.checked = i === 0;
    const label = document.createElement("label");
    label.className = "choice";
    label.append(input, ` ${devPlanLabel(plan)}`);
    fieldset?.append(label);
  });
}

/**
 * @typedef {object} SignInUi
 * @property {HTMLElement} section
 * @property {HTMLElement} notice
 * @property {HTMLElement} error
 * @property {HTMLFormElement} passwordForm
 * @property {HTMLTemplateElement} newPasswordTemplate
 * @property {HTMLFormElement} devForm
 * @property {HTMLElement} noSignIn
 */

/**
 * @param {{
 *   ui: SignInUi,
 *   auth: Auth,
 *   offer: { supabase: unknown, dev: boolean, devPlans: DevPlanOffer[] },
 *   signedIn: () => Promise<void>,
 *   announce: (text: string) => void,
 * }} deps
 */
export function createSignIn({ ui, auth, offer, signedIn, announce }) {
  /** @param {unknown} e */
  const sentence = (e) => authErrorSentence(e instanceof AuthError ? e.code : "unavailable");

  /** @param {string} [notice] */
  function show(notice = "") {
    ui.section.hidden = false;
    ui.notice.textContent = notice;
    ui.error.textContent = "";
    document.getElementById("new-password-form")?.remove();
    ui.passwordForm.hidden = !offer.supabase;
    // `npm run dev`: its one-click local sign-in first, the local Auth stand-in's forms after it
    if (offer.dev) ui.passwordForm.before(ui.devForm);
    ui.devForm.hidden = !offer.dev;
    ui.noSignIn.hidden = Boolean(offer.supabase || offer.dev);
    const first = /** @type {HTMLElement | null} */ (
      ui.section.querySelector("form:not([hidden]) input")
    );
    first?.focus();
  }

  /**
   * Runs a button's action once at a time, its refusal in words.
   * @param {HTMLButtonElement} button @param {() => Promise<void>} action
   */
  async function once(button, action) {
    if (button.getAttribute("aria-disabled") === "true") return;
    button.setAttribute("aria-disabled", "true");
    ui.error.textContent = "";
    try {
      await action();
    } catch (e) {
      ui.error.textContent = sentence(e);
    } finally {
      button.removeAttribute("aria-disabled");
    }
  }

  /** @param {() => Promise<void>} signIn @param {HTMLFormElement} form */
  const trySignIn = (signIn, form) =>
    once(/** @type {HTMLButtonElement} */ (form.querySelector("button[type=submit]")), async () => {
      await signIn();
      await signedIn();
    });

  /** Where an emailed link lands: this page, without any fragment. */
  const back = () => `${location.origin}${location.pathname}`;

  /**
   * Sends a mail (sign-up confirmation, magic link, reset) and says where to look.
   * @param {() => Promise<unknown>} send @param {HTMLButtonElement} button @param {string} said
   */
  const trySend = (send, button, said) =>
    once(button, async () => {
      ui.notice.textContent = "";
      if ((await send()) === "signed_in") return await signedIn();
      ui.notice.textContent = said;
      announce(said);
    });

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
      ui.error.textContent = "Enter a password (or ask for a sign-in link).";
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

  devChoices(ui.devForm, offer.devPlans);
  ui.devForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const plan = devPlan(new FormData(ui.devForm).get("plan"));
    void trySignIn(() => auth.devSignIn(plan), ui.devForm);
  });

  return {
    show,
    /** @param {string} text */
    showError(text) {
      ui.error.textContent = text;
    },
    hide() {
      ui.section.hidden = true;
    },
    /** After a reset link: the form for the new password, in place of the sign-in form. */
    askNewPassword() {
      show("Choose a new password for your account.");
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
    },
  };
}
