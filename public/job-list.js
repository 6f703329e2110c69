// @ts-check
/**
 * The list of the user's jobs: a card per job (cards.js), kept current while it is active by
 * the pushes of the live channel (live.js) while it is joined, else by polling (poll.js); its
 * phase changes announced, older pages on demand, and cancel, asking first when a cancel will
 * not give the unit back.
 *
 * A push is applied only when it follows what the card shows: a state message (`seq` above the
 * last seen) that the card does not show yet is read once (after a short wait for the worker's
 * own view of it); an answer delta applies at its offset, and one past the text the card has (a
 * missed message) is read once instead. Every rejoin, and every return to the tab, reads each
 * active job once: what was sent while nobody listened is not sent again.
 */
import { ApiError } from "./api.js";
import { createCard } from "./cards.js";
import { formatClock } from "./format.js";
import { progressApplied, stateNews, viewApplied } from "./live-apply.js";
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
/** @typedef {import("./live.js").LiveMessage} LiveMessage */
/** @typedef {{ card: Card, poller: Poller | null, seq: number, reading: boolean, pending: ReturnType<typeof setTimeout> | null }} Entry */

/** How long a state message waits for the worker's view of it before the job is read. */
export const VIEW_GRACE_MS = 400;

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

/**
 * One read of a job that a push said moved (or that may have moved while nobody listened); a
 * read already under way for it is enough.
 * @param {ListDeps} deps
 * @param {Map<string, Entry>} cards
 * @param {(job: Job, where: { atTop: boolean }) => void} upsert
 */
function createReadOnce(deps, cards, upsert) {
  /** @param {string} id */
  return async (id) => {
    const entry = cards.get(id);
    if (!entry || entry.reading || !isActive(entry.card.job)) return;
    entry.reading = true;
    try {
      upsert(await deps.api.getJob(id), { atTop: false });
    } catch (e) {
      // Not read: the poller takes over if the channel is lost; else the next push reads again.
      deps.authFailed(e);
    } finally {
      entry.reading = false;
    }
  };
}

/** @param {ListDeps} deps */
export function createJobList(deps) {
  const { api, ui } = deps;
  /** @type {Map<string, Entry>} */
  const cards = new Map();
  /** Whether the live channel is joined: no polling while it is. */
  let live = false;
  /** @type {string | null} */
  let cursor = null;
  /** @type {ReturnType<typeof setInterval> | null} */
  let clockTimer = null;
  const cancel = createCancel(deps, cards, (job, where) => upsert(job, where));
  const readOnce = createReadOnce(deps, cards, (job, where) => upsert(job, where));

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
          if (known.pending !== null) clearTimeout(known.pending);
          known.pending = null;
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
    cards.set(job.id, {
      card,
      poller: isActive(job) ? startPolling(job.id) : null,
      seq: -1,
      reading: false,
      pending: null,
    });
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
    if (document.hidden || live) poller.pause();
    poller.start();
    return poller;
  }

  /** @param {LiveMessage} message */
  function pushed({ event, payload }) {
    const view = /** @type {Partial<Job> | undefined} */ (payload.job);
    const id = event === "job_view" ? view?.id : payload.job_id;
    const entry = typeof id === "string" ? cards.get(id) : undefined;
    if (!entry || typeof id !== "string") return;
    const current = entry.card.job;
    if (event === "job_view" && view) {
      const next = viewApplied(current, view);
      if (!next) return;
      if (entry.pending !== null) clearTimeout(entry.pending);
      entry.pending = null;
      upsert(next, { atTop: false });
    } else if (event === "job_state") {
      const news = stateNews(current, entry.seq, payload);
      if (!news) return;
      entry.seq = news.seq;
      if (!news.read) return;
      // The worker pushes an ended job's view itself; anything else (a claim, a requeue, a
      // cancel from elsewhere, a failure callback) is read once.
      if (entry.pending !== null) clearTimeout(entry.pending);
      entry.pending = setTimeout(() => {
        entry.pending = null;
        void readOnce(id);
      }, VIEW_GRACE_MS);
    } else if (event === "job_progress") {
      const next = progressApplied(current, payload);
      if (next === "read") void readOnce(id);
      else if (next) upsert(next, { atTop: false });
    }
  }

  /**
   * The channel joined or lost: polling stops while it is joined, and takes over (with one
   * read now) when it is lost. A join after the first reads every active job once.
   * @param {boolean} joined
   */
  function liveChanged(joined) {
    live = joined;
    for (const [id, entry] of cards) {
      if (!isActive(entry.card.job)) continue;
      if (joined) {
        entry.poller?.pause();
        void readOnce(id);
      } else if (!document.hidden) entry.poller?.resume();
    }
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
    for (const [id, { poller, card }] of cards) {
      if (document.hidden) poller?.pause();
      else if (!live) poller?.resume();
      // back while joined: what was pushed while the tab slept may be lost
      else if (isActive(card.job)) void readOnce(id);
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
    /** A message of the live channel. */
    pushed,
    /** The live channel joined (true) or lost (false). */
    liveChanged,
    /** Every card gone, every poll stopped (signed out). */
    stop() {
      live = false;
      for (const { poller, pending } of cards.values()) {
        poller?.stop();
        if (pending !== null) clearTimeout(pending);
      }
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
