// @ts-check
/**
 * The list of the user's jobs: a card per job (cards.js), polled while it is active (poll.js),
 * its phase changes announced, older pages on demand, and cancel, asking first when a cancel
 * will not give the unit back.
 */
import { ApiError } from "./api.js";
import { createCard } from "./cards.js";
import { formatClock } from "./format.js";
import { createPoller, paceOf } from "./poll.js";
import {
  boundCancelWarning,
  cancelWarning,
  errorSentence,
  isActive,
  phaseLabel,
  phaseSentence,
} from "./status.js";

/** @typedef {import("./status.js").Job} Job */
/** @typedef {import("./status.js").Usage} Usage */
/** @typedef {import("./cards.js").Card} Card */
/** @typedef {import("./poll.js").Poller} Poller */
/** @typedef {import("./api.js").Api} Api */
/** @typedef {import("../lib/kinds/kind.ts").KindDeclaration} KindDeclaration */

/**
 * @typedef {object} ListDeps
 * @property {Api} api
 * @property {{ jobs: HTMLElement, empty: HTMLElement, more: HTMLButtonElement }} ui
 * @property {(id: string) => KindDeclaration | undefined} kind  a kind's declaration, by id
 * @property {(text: string) => void} announce
 * @property {() => void} finished  a job ended: its unit may have come back
 * @property {(usage: Usage) => void} usageSeen
 * @property {(e: unknown) => boolean} authFailed  true when the error signed the user out
 */

const now = () => new Date();

/**
 * Whether a poll saw the job move: it keeps polling at the first pace while it does.
 * @param {Job} before @param {Job} job
 */
const changedSince = (before, job) =>
  before.phase !== job.phase ||
  before.attempts !== job.attempts ||
  before.resumeAt !== job.resumeAt ||
  before.startedAt !== job.startedAt ||
  // The output streaming in: keep looking at the first pace while it grows.
  before.partialOutput !== job.partialOutput;

/** @param {Job} job */
function announcement(job) {
  const name = `Job from ${formatClock(job.createdAt)}`;
  return job.phase === "running"
    ? `${name}: ${phaseLabel(job.phase)}.`
    : `${name}: ${phaseSentence(job, now())}`;
}

/**
 * The card's Cancel: `upsert` shows the job as the API answers it.
 * @param {ListDeps} deps
 * @param {Map<string, { card: Card }>} cards
 * @param {(job: Job, where: { atTop: boolean }) => void} upsert
 */
function createCancel(deps, cards, upsert) {
  const { api } = deps;
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
        deps.usageSeen(usage);
        entry?.card.confirmCancel(cancelWarning(usage), () => void cancelNow(job));
        return;
      }
    } catch (e) {
      if (deps.authFailed(e)) return;
      if (e instanceof ApiError) deps.announce(errorSentence(e.problem, now()));
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
      if (deps.authFailed(e)) return;
      if (e instanceof ApiError) deps.announce(errorSentence(e.problem, now()));
    }
  }

  return cancel;
}

/** @param {ListDeps} deps */
export function createJobList(deps) {
  const { api, ui } = deps;
  /** @type {Map<string, { card: Card, poller: Poller | null }>} */
  const cards = new Map();
  /** @type {string | null} */
  let cursor = null;
  /** @type {ReturnType<typeof setInterval> | null} */
  let clockTimer = null;
  const cancel = createCancel(deps, cards, (job, where) => upsert(job, where));

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
        deps.announce(announcement(job));
        if (!isActive(job)) {
          known.poller?.stop();
          known.poller = null;
          deps.finished();
        }
      }
      return;
    }
    const card = createCard(job, {
      prompt: job.prompt,
      kind: deps.kind(job.kind),
      now: t,
      onCancel: (job) => void cancel(job),
    });
    if (where.atTop) ui.jobs.prepend(card.el);
    else ui.jobs.append(card.el);
    cards.set(job.id, { card, poller: isActive(job) ? startPolling(job.id) : null });
    ui.empty.hidden = true;
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
          if (deps.authFailed(e)) return "stop";
          if (e instanceof ApiError && e.problem.code === "not_found") return "stop";
          throw e;
        }
        const changed = changedSince(entry.card.job, job);
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

  /** @param {string | null} from */
  async function load(from) {
    try {
      const page = await api.listJobs(from);
      for (const job of page.jobs) upsert(job, { atTop: false });
      cursor = page.nextCursor;
      ui.more.hidden = cursor === null;
    } catch (e) {
      if (!deps.authFailed(e)) ui.empty.textContent = "Your jobs could not be loaded just now.";
    }
    ui.empty.hidden = cards.size > 0;
  }

  ui.more.addEventListener("click", () => {
    if (cursor) void load(cursor);
  });
  document.addEventListener("visibilitychange", () => {
    for (const { poller } of cards.values()) {
      if (document.hidden) poller?.pause();
      else poller?.resume();
    }
  });

  return {
    /** The first page of jobs, and the running clocks ticking. */
    async start() {
      clockTimer ??= setInterval(() => {
        const t = now();
        for (const { card } of cards.values()) card.tick(t);
      }, 1000);
      await load(null);
    },
    /** Every card gone, every poll stopped (signed out). */
    stop() {
      for (const { poller } of cards.values()) poller?.stop();
      cards.clear();
      ui.jobs.replaceChildren();
      if (clockTimer !== null) clearInterval(clockTimer);
      clockTimer = null;
    },
    /**
     * An accepted job (new, or an Idempotency-Key replay's) on top, announced only when new.
     * @param {Job} job
     */
    accepted(job) {
      const known = cards.has(job.id);
      upsert(job, { atTop: true });
      if (!known) deps.announce(announcement(job));
    },
  };
}
