// @ts-check
/**
 * The page: it finds its elements and wires the parts together. Each part is a module of its
 * own: sign-in.js (the sign-in section), kind-forms.js (the kind choice and a form per kind,
 * built from the kinds' declarations), job-list.js (the job cards, each followed by the
 * client's watch with the live channel, live.js, as its push source), organizations.js (the
 * switch between the user's plan and their teams' pools, a team's panel, a mailed invitation),
 * and the pure decisions
 * beside them (status.js: words; kinds.js: a kind's offer and form; live-apply.js: what a push
 * does to a card; submission.js: which Idempotency-Key).
 */
import { ApiError, createApi } from "./api.js";
import { AuthError, authErrorSentence, createAuth, discover } from "./auth.js";
import { createJobList } from "./job-list.js";
import { createKindForms } from "./kind-forms.js";
import { catalogOf } from "./kinds.js";
import { createLive } from "./live.js";
import { createTeams, keepInvitation, teamsUi } from "./organizations.js";
import { createSignIn } from "./sign-in.js";
import { errorSentence, usageSentence } from "./status.js";

/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("../lib/kinds/kind.ts").KindDeclaration} KindDeclaration */

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
  app: byId("app"),
  usage: byId("usage"),
  announcer: byId("announcer"),
};

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
  keepInvitation(sessionStorage);
  const offer = await discover();
  const auth = createAuth({ supabase: offer.supabase, storage: sessionStorage });
  let linkNotice = "";
  try {
    await auth.ready();
  } catch (e) {
    linkNotice = authErrorSentence(e instanceof AuthError ? e.code : "unavailable");
  }
  const api = createApi({ token: auth.accessToken, refresh: auth.refresh });
  /** @type {Usage | null} */
  let lastUsage = null;
  /** The kinds' declarations, from the last usage that carried them (GET /api/usage). */
  /** @type {KindDeclaration[]} */
  let catalog = [];

  /** @param {unknown} e */
  function authFailed(e) {
    if (e instanceof ApiError && e.problem.code === "unauthorized") {
      void auth.signOut().then(() => showSignIn(errorSentence(e.problem, new Date())));
      return true;
    }
    return false;
  }

  /**
   * The usage of what new jobs draw on: the user's plan or the chosen team's pool. A usage of
   * the other (an answer that arrived after the switch) is not shown as this one's.
   * @param {Usage} usage
   */
  function renderUsage(usage) {
    catalog = catalogOf(usage) ?? catalog;
    if ((usage.organizationId ?? null) !== teams.current()) return;
    lastUsage = usage;
    const now = new Date();
    ui.usage.textContent = teams.usageLine(usage, now) ?? usageSentence(usage, now);
    forms.render(usage, catalog);
  }

  async function refreshUsage() {
    try {
      // The kinds' declarations come with the user's own usage: read it once at least.
      const own = catalog.length === 0 || !teams.current() ? await api.usage() : null;
      if (own) catalog = catalogOf(own) ?? catalog;
      const team = await teams.refresh();
      renderUsage(team ? team.usage : (own ?? (await api.usage())));
    } catch (e) {
      if (!authFailed(e)) ui.usage.textContent = "Your usage could not be loaded just now.";
    }
  }

  const forms = createKindForms({
    api,
    choices: byId("kinds"),
    choiceError: byId("kind-error"),
    forms: byId("kind-forms"),
    usage: () => lastUsage,
    accepted(job, usage) {
      renderUsage(usage);
      jobs.accepted(job);
    },
    usageSeen: renderUsage,
    authFailed,
    drawOn: () => teams.current(),
  });
  const teams = createTeams({
    api,
    ui: teamsUi(byId),
    storage: sessionStorage,
    userId: () => auth.session()?.userId ?? null,
    announce,
    authFailed,
    changed: () => void refreshUsage(),
  });
  const jobs = createJobList({
    api,
    ui: { jobs: byId("jobs"), empty: byId("jobs-empty"), more: byId("more") },
    kind: (id) => catalog.find((k) => k.id === id),
    announce,
    finished: () => void refreshUsage(),
    usageSeen: renderUsage,
    authFailed,
  });
  const signIn = createSignIn({
    ui: {
      section: byId("sign-in"),
      notice: byId("sign-in-notice"),
      error: byId("sign-in-error"),
      passwordForm: byId("password-form"),
      newPasswordTemplate: byId("new-password-template"),
      devForm: byId("dev-form"),
      noSignIn: byId("no-sign-in"),
    },
    auth,
    offer,
    signedIn: showApp,
    announce,
  });

  /** The live channel of the signed-in user (none without a Supabase project: polling only). */
  /** @type {import("./live.js").Live | null} */
  let live = null;
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) live?.wake();
  });

  /** @param {string} userId */
  function startLive(userId) {
    live?.close();
    document.body.dataset.live = "polling";
    live = offer.supabase
      ? createLive({
          url: offer.supabase.url,
          apikey: offer.supabase.anonKey,
          userId,
          token: auth.accessToken,
          onMessage: (m) => jobs.pushed(m),
          onJoined: (joined) => {
            document.body.dataset.live = joined ? "joined" : "polling";
            jobs.liveChanged(joined);
          },
        })
      : null;
  }

  /** @param {string} [notice] */
  function showSignIn(notice = "") {
    live?.close();
    live = null;
    jobs.stop();
    teams.stop();
    ui.loading.hidden = true;
    ui.app.hidden = true;
    ui.account.hidden = true;
    signIn.show(notice);
  }

  async function showApp() {
    const s = auth.session();
    if (!s) return showSignIn();
    ui.loading.hidden = true;
    signIn.hide();
    ui.app.hidden = false;
    ui.account.hidden = false;
    ui.who.textContent = s.email
      ? `Signed in as ${s.email}`
      : `Signed in (local user ${s.userId.slice(0, 8)})`;
    // The teams (a mailed invitation accepted first), then the usage: its kinds' declarations
    // build the forms and name the job cards.
    await teams.start();
    await refreshUsage();
    forms.focus();
    startLive(s.userId);
    await jobs.start();
  }

  ui.signOut.addEventListener("click", () => {
    void auth.signOut();
  });
  auth.onChange((s) => {
    if (!s) showSignIn("You are signed out.");
    else live?.tokenChanged();
  });

  if (auth.session() && arrived.type === "recovery" && !arrived.failed) {
    // the reset link signed them in: ask for the new password before anything else
    showSignIn();
    signIn.askNewPassword();
  } else if (auth.session()) await showApp();
  else {
    showSignIn(
      teams.pending()
        ? "Sign in with the address the invitation was sent to, and you join the team."
        : "",
    );
    signIn.showError(linkNotice);
  }
}

main().catch(() => {
  ui.loading.textContent = "The page could not start. Reload to try again.";
});
