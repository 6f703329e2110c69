// @ts-check
/**
 * The page's teams (docs/flows/organizations.md): the switch between the user's own plan and
 * each organization they belong to, the invitation a mailed link brought, and, for an owner or
 * admin, the team's panel: each member's usage and cap, the invitations waiting, an invitation
 * form and removal. Nothing here can show another member's job, prompt or output: the API never
 * sends one. Every refusal is said in words (status.js's errorSentence).
 */
import { ApiError } from "./api.js";
import { amountOf, errorSentence, poolSentence } from "./status.js";

/** @typedef {import("./api.js").Api} Api */
/** @typedef {import("./api.js").Organization} Organization */
/** @typedef {import("../lib/organizations.ts").Member} Member */
/** @typedef {import("./status.js").Usage} Usage */

/** Where the choice and a mailed invitation's token wait (this tab only, like the session). */
const CHOICE_KEY = "quota-jobs.draw-on";
export const INVITATION_KEY = "quota-jobs.invitation";

/**
 * Keeps the token of the invitation link the page was opened with (`?invitation=`) until it is
 * accepted (the invitee may have to sign in first), and takes it out of the address bar and the
 * history at once. The session in the fragment stays for auth-js.
 * @param {Storage} storage
 */
export function keepInvitation(storage) {
  const url = new URL(location.href);
  const token = url.searchParams.get("invitation");
  if (token === null) return;
  url.searchParams.delete("invitation");
  history.replaceState(history.state, "", url.pathname + url.search + url.hash);
  if (token) storage.setItem(INVITATION_KEY, token);
}

/**
 * @param {string} tag
 * @param {Record<string, string>} [attrs]
 * @param {string} [text]
 */
function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

const ROLES = { owner: "Owner", admin: "Admin", member: "Member" };
const AS_ROLE = { owner: "an owner", admin: "an admin", member: "a member" };

/**
 * What a cap field means in the plan's meter: generations and tokens as whole numbers, money
 * in dollars (the API counts micro-dollars). Empty: no cap. NaN: not a cap.
 * @param {string} text
 * @param {Usage["meter"]} meter
 * @returns {number | null}
 */
export function capFromField(text, meter) {
  const t = text.trim().replace(/^\$/, "").replaceAll(",", "");
  if (t === "") return null;
  if (!/^\d+(\.\d+)?$/.test(t)) return Number.NaN;
  const n = Number(t);
  if (meter === "money") return Math.round(n * 1_000_000);
  return Number.isInteger(n) ? n : Number.NaN;
}

/**
 * A cap as its field shows it.
 * @param {number | null} cap
 * @param {Usage["meter"]} meter
 */
export function capToField(cap, meter) {
  if (cap === null) return "";
  return meter === "money" ? String(cap / 1_000_000) : String(cap);
}

/** @param {Usage["meter"]} meter */
const capUnit = (meter) =>
  meter === "money" ? "in dollars" : meter === "tokens" ? "in tokens" : "in generations";

/**
 * The page's elements for the teams, by their ids in index.html.
 * @param {<T extends HTMLElement>(id: string) => T} byId
 */
export function teamsUi(byId) {
  return {
    field: byId("draw-on-field"),
    select: /** @type {HTMLSelectElement} */ (byId("draw-on")),
    notice: byId("team-notice"),
    error: byId("team-error"),
    panel: byId("team"),
    title: byId("team-title"),
    summary: byId("team-summary"),
    admin: byId("team-admin"),
    members: byId("team-members"),
    invitations: byId("team-invitations"),
    inviteForm: /** @type {HTMLFormElement} */ (byId("invite-form")),
    capHelp: byId("invite-cap-label"),
    leave: /** @type {HTMLButtonElement} */ (byId("team-leave")),
    remove: /** @type {HTMLButtonElement} */ (byId("team-delete")),
    panelNotice: byId("team-panel-notice"),
    panelError: byId("team-panel-error"),
  };
}

/** @typedef {ReturnType<typeof teamsUi>} TeamsUi */

/**
 * @typedef {object} TeamsDeps
 * @property {Api} api
 * @property {TeamsUi} ui
 * @property {Storage} storage
 * @property {() => string | null} userId
 * @property {(text: string) => void} announce
 * @property {(e: unknown) => boolean} authFailed
 * @property {() => void} changed  what new jobs draw on, or the team, changed: read the usage again
 */

/**
 * The sentence for a refusal, put in `where` (unless it signed the user out).
 * @param {TeamsDeps} deps
 * @param {HTMLElement} where
 * @param {unknown} e
 */
function refused(deps, where, e) {
  if (deps.authFailed(e)) return;
  where.textContent = errorSentence(
    e instanceof ApiError ? e.problem : { code: "network" },
    new Date(),
  );
}

/** @param {{ canceledJobs: number, refundedJobs: number }} r */
function removalSentence(r) {
  if (r.canceledJobs === 0) return "No job of theirs was active in this team.";
  const jobs = r.canceledJobs === 1 ? "1 active job" : `${r.canceledJobs} active jobs`;
  return `${jobs} canceled; ${r.refundedJobs} refunded to the pool by the cancel rules.`;
}

/** @param {Usage["meter"]} meter */
const capProblem = (meter) => `A cap is a whole number ${capUnit(meter)}, or empty for none.`;

/**
 * The switch between the user's own plan and each team's pool, the invitation a link brought,
 * and the chosen team's panel.
 * @param {TeamsDeps} deps
 */
export function createTeams(deps) {
  const { api, ui, storage } = deps;
  /** @type {Organization[]} */
  let teams = [];

  function current() {
    const id = storage.getItem(CHOICE_KEY);
    return id && teams.some((t) => t.id === id) ? id : null;
  }

  /** @param {string | null} id */
  function choose(id) {
    if (id) storage.setItem(CHOICE_KEY, id);
    else storage.removeItem(CHOICE_KEY);
    ui.select.value = id ?? "";
  }

  function renderSwitch() {
    ui.field.hidden = teams.length === 0;
    ui.select.replaceChildren(el("option", { value: "" }, "My own plan"));
    for (const t of teams) ui.select.append(el("option", { value: t.id }, `${t.name}'s pool`));
    ui.select.value = current() ?? "";
  }

  /** @param {string} id */
  function forget(id) {
    teams = teams.filter((t) => t.id !== id);
    choose(null);
    renderSwitch();
  }

  ui.select.addEventListener("change", () => {
    choose(ui.select.value || null);
    ui.error.textContent = "";
    ui.notice.textContent = "";
    deps.changed();
  });

  const panel = createTeamPanel(deps, forget);

  async function acceptWaiting() {
    const token = storage.getItem(INVITATION_KEY);
    if (!token) return;
    try {
      const org = await api.acceptInvitation(token);
      storage.removeItem(INVITATION_KEY);
      choose(org.id);
      const said = `You joined ${org.name} as ${AS_ROLE[org.role]}. New jobs now draw on its pool; choose "My own plan" to use yours.`;
      ui.notice.textContent = said;
      deps.announce(said);
    } catch (e) {
      if (!(e instanceof ApiError && e.code === "network")) storage.removeItem(INVITATION_KEY);
      refused(deps, ui.error, e);
    }
  }

  return {
    /** The organization a new job draws on; null: the user's own plan. */
    current,
    /** Whether an invitation link's token waits for the invitee to be signed in. */
    pending: () => storage.getItem(INVITATION_KEY) !== null,
    /** Reads the user's teams, after accepting a waiting invitation. */
    async start() {
      await acceptWaiting();
      try {
        teams = await api.organizations();
      } catch (e) {
        refused(deps, ui.error, e);
      }
      renderSwitch();
    },
    /**
     * The chosen team as its member sees it now (its panel drawn), or null on the user's plan.
     * @returns {Promise<Organization | null>}
     */
    async refresh() {
      const id = current();
      if (!id) {
        panel.hide();
        return null;
      }
      try {
        const org = await api.organization(id);
        panel.render(org);
        return org;
      } catch (e) {
        // No longer a member (removed, or the team is gone): back to the user's own plan.
        if (!(e instanceof ApiError && e.code === "not_found")) throw e;
        forget(id);
        panel.hide();
        ui.error.textContent = errorSentence({ code: "not_a_member" }, new Date());
        return null;
      }
    },
    /**
     * The usage line for `usage`: the pool's when it is a team's, else null.
     * @param {Usage} usage
     * @param {Date} now
     */
    usageLine(usage, now) {
      const team = teams.find((t) => t.id === usage.organizationId);
      return team ? poolSentence(usage, team.name, now) : null;
    },
    stop() {
      teams = [];
      panel.hide();
      ui.field.hidden = true;
    },
  };
}

/**
 * A team's panel: the member's role and a way to leave; for an owner or admin every member's
 * usage and cap (a cap to set, a member to remove), the invitations waiting, and a form to invite.
 * @param {TeamsDeps} deps
 * @param {(id: string) => void} left  the user is no longer in team `id`
 */
function createTeamPanel(deps, left) {
  const { api, ui } = deps;
  /** @type {Organization | null} */
  let shown = null;

  /**
   * An owner's or admin's action: its result said, then the panel and the usage read again.
   * @param {() => Promise<string>} run
   */
  async function act(run) {
    ui.panelError.textContent = "";
    ui.panelNotice.textContent = "";
    try {
      const said = await run();
      ui.panelNotice.textContent = said;
      deps.announce(said);
    } catch (e) {
      refused(deps, ui.panelError, e);
    }
    deps.changed();
  }

  /**
   * One member as an owner or admin sees them: usage, cap, active jobs; never a job itself.
   * @param {Organization} org
   * @param {Member} m
   */
  function memberItem(org, m) {
    const meter = org.usage.meter;
    const self = m.userId === deps.userId();
    const who = self ? "You" : (m.email ?? "A member with no address");
    const cap = m.cap === null ? "no cap" : `cap ${amountOf(org.usage, m.cap)}`;
    const active = m.active === 1 ? "1 active job" : `${m.active} active jobs`;
    const li = el("li", { class: "member", "data-user-id": m.userId });
    li.append(
      el("p", { class: "member-name" }, `${who}: ${ROLES[m.role]}`),
      el("p", {}, `Used ${amountOf(org.usage, m.used)} this period (${cap}); ${active}.`),
    );
    const form = el("form", { class: "row member-cap" });
    const label = `Cap for ${self ? "you" : who}, ${capUnit(meter)} (empty: no cap)`;
    const input = /** @type {HTMLInputElement} */ (
      el("input", { type: "text", inputmode: "decimal", "aria-label": label })
    );
    input.value = capToField(m.cap, meter);
    form.append(input, el("button", { type: "submit", class: "secondary" }, "Save cap"));
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const cap = capFromField(input.value, meter);
      if (Number.isNaN(cap)) {
        ui.panelError.textContent = capProblem(meter);
        return;
      }
      void act(async () => {
        await api.setCap(org.id, m.userId, cap);
        const now = cap === null ? "no cap now" : `capped at ${amountOf(org.usage, cap)}`;
        return `${who}: ${now}.`;
      });
    });
    li.append(form);
    if (!self) {
      const remove = el("button", { type: "button", class: "secondary" }, `Remove ${who}`);
      remove.addEventListener("click", () =>
        act(async () => {
          const r = await api.removeMember(org.id, m.userId);
          return `${who} was removed. ${removalSentence(r)}`;
        }),
      );
      li.append(remove);
    }
    return li;
  }

  ui.inviteForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const org = shown;
    if (!org) return;
    const data = new FormData(ui.inviteForm);
    const email = String(data.get("email") ?? "").trim();
    const role = data.get("role") === "admin" ? "admin" : "member";
    const cap = capFromField(String(data.get("cap") ?? ""), org.usage.meter);
    if (Number.isNaN(cap)) {
      ui.panelError.textContent = capProblem(org.usage.meter);
      return;
    }
    void act(async () => {
      await api.invite(org.id, { email, role, cap });
      ui.inviteForm.reset();
      return `Invitation sent to ${email}. Its link joins that address only, once.`;
    });
  });

  ui.leave.addEventListener("click", () => {
    const org = shown;
    const me = deps.userId();
    if (!org || !me) return;
    void act(async () => {
      const r = await api.removeMember(org.id, me);
      left(org.id);
      const jobs = r.canceledJobs === 0 ? "" : `${removalSentence(r)} `;
      return `You left ${org.name}. ${jobs}New jobs draw on your own plan.`;
    });
  });

  // Deleting takes two presses: the first says what it does, the second does it.
  let armed = "";
  ui.remove.addEventListener("click", () => {
    const org = shown;
    if (!org) return;
    if (armed !== org.id) {
      armed = org.id;
      ui.remove.textContent = `Press again to delete ${org.name}`;
      ui.panelNotice.textContent = `Deleting ${org.name} cancels its active jobs and deletes every member's jobs in it, prompts and answers included. Their own plans and jobs stay.`;
      return;
    }
    armed = "";
    void act(async () => {
      const r = await api.deleteOrganization(org.id);
      left(org.id);
      const jobs = r.erasedJobs === 1 ? "1 job" : `${r.erasedJobs} jobs`;
      return `${org.name} was deleted, with its ${jobs}. New jobs draw on your own plan.`;
    });
  });

  return {
    /** @param {Organization} org */
    render(org) {
      if (armed !== org.id) {
        armed = "";
        ui.remove.textContent = "Delete this team";
      }
      ui.remove.hidden = org.role !== "owner";
      shown = org;
      ui.panel.hidden = false;
      ui.title.textContent = `Team: ${org.name}`;
      ui.summary.textContent = `You are ${AS_ROLE[org.role]} of ${org.name}. Jobs you start while "${org.name}'s pool" is chosen draw on the team's plan.`;
      ui.admin.hidden = org.members === undefined;
      if (org.members === undefined) return;
      ui.capHelp.textContent = `Cap per period, ${capUnit(org.usage.meter)} (empty: no cap)`;
      ui.members.replaceChildren(...org.members.map((m) => memberItem(org, m)));
      const waiting = org.invitations ?? [];
      ui.invitations.replaceChildren(
        ...(waiting.length === 0
          ? [el("li", { class: "muted" }, "No invitation is waiting.")]
          : waiting.map((i) => {
              const cap = i.cap === null ? "" : `, capped at ${amountOf(org.usage, i.cap)}`;
              const until = new Date(i.expiresAt).toLocaleString();
              return el(
                "li",
                {},
                `${i.email ?? "An address"}: ${AS_ROLE[i.role]}${cap}, until ${until}.`,
              );
            })),
      );
    },
    hide() {
      shown = null;
      ui.panel.hidden = true;
    },
  };
}
