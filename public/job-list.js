// @ts-check
/**
 * The list of the user's jobs: a card per job (cards.js), each active one followed by the typed
 * client's `watch` (client.js) with the live channel (live.js) as its push source: while the
 * channel is joined the card changes by pushes alone, else (and after a missed push) `watch`
 * polls at the page's pace; its phase changes announced, older pages on demand, and cancel,
 * asking first when a cancel will not give the unit back.
 *
 * A push is applied only when it follows what the card shows: a state message (`seq` above the
 * last seen) that the card does not show yet is read once, after a wait for the worker's own
 * view when the worker sends one (a claim, a success); an answer delta applies at its offset,
 * and one past the text the card has (a missed message) is read once instead. Every rejoin, and
 * every return to the tab, reads each active job once: what was sent while nobody listened is
 * not sent again. No poll while the tab is hidden.
 */
import { ApiError } from "./api.js";
import { createCard } from "./cards.js";
import { formatClock } from "./format.js";
import { progressApplied, stateNews, viewApplied } from "./live-apply.js";
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
/** @typedef {import("./api.js").Api} Api */
/** @typedef {import("../lib/kinds/kind.ts").KindDeclaration} KindDeclaration */
/** @typedef {import("./live.js").LiveMessage} LiveMessage */
/** @typedef {import("./client.js").WatchSource} WatchSource */
/**
 * A card and what follows it: its watch (aborted when the job ends or the list stops), the
 * newest state the database broadcast of it, the watch's push handlers, the job as the pushes
 * left it (`latest`: pushes build on each other before the watch has shown them) and a read
 * waiting for the worker's view.
 * @typedef {{
 *   card: Card,
 *   watching: AbortController | null,
 *   seq: number,
 *   lastState: string | null,
 *   push: { onState: (job: Job) => void, onStale: () => void } | null,
 *   latest: Job,
 *   pending: ReturnType<typeof setTimeout> | null,
 * }} Entry
 */

/**
 * How long a state message waits for the worker's view of it before the job is read: the
 * worker sends the view of a claim and of a success (lib/live.ts, 1.5 s at most a push); any
 * other state (a requeue, a cancel from elsewhere, a failure) is read at once.
 */
export const VIEW_GRACE_MS = 2000;
/** @param {unknown} state */
const graceFor = (state) => (state === "running" || state === "succeeded" ? VIEW_GRACE_MS : 0);
/** How long a watch that ended on an error (not a sign-out, not a gone job) waits to start over. */
const REWATCH_MS = 10_000;

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
 * The live channel as `watch`'s push source, over the cards: each push is applied to the job
 * as the pushes left it, and handed to that card's watch; what cannot be applied makes the
 * watch read. Quiet (no polling) while the channel is joined or the tab is hidden.
 * @param {Map<string, Entry>} cards
 * @param {() => boolean} joined
 */
function createLiveSource(cards, joined) {
  /** @param {Entry} entry */
  const stale = (entry) => {
    if (entry.pending !== null) clearTimeout(entry.pending);
    entry.pending = null;
    entry.push?.onStale();
  };
  /** @param {Entry} entry @param {Job} job */
  const show = (entry, job) => {
    if (entry.pending !== null) clearTimeout(entry.pending);
    entry.pending = null;
    entry.latest = job;
    entry.push?.onState(job);
  };

  /** @type {WatchSource} */
  const source = {
    quiet: () => joined() || document.hidden,
    subscribe(id, onState, onStale = () => {}) {
      const entry = cards.get(id);
      const push = { onState, onStale };
      if (entry) entry.push = push;
      return () => {
        const now = cards.get(id);
        if (now?.push === push) now.push = null;
      };
    },
  };

  return {
    source,
    stale,
    /** @param {LiveMessage} message */
    pushed({ event, payload }) {
      const view = /** @type {Partial<Job> | undefined} */ (payload.job);
      const id = event === "job_view" ? view?.id : payload.job_id;
      const entry = typeof id === "string" ? cards.get(id) : undefined;
      if (!entry) return;
      const current = entry.latest;
      if (event === "job_view" && view) {
        const next = viewApplied(current, view, entry.lastState);
        if (next) show(entry, next);
      } else if (event === "job_state") {
        const news = stateNews(current, entry.seq, payload);
        if (!news) return;
        entry.seq = news.seq;
        entry.lastState = typeof payload.state === "string" ? payload.state : null;
        if (!news.read) return;
        if (entry.pending !== null) clearTimeout(entry.pending);
        entry.pending = setTimeout(() => stale(entry), graceFor(payload.state));
      } else if (event === "job_progress") {
        const next = progressApplied(current, payload);
        if (next === "read") stale(entry);
        else if (next) show(entry, next);
      }
    },
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
  const channel = createLiveSource(cards, () => live);

  /** @param {Entry} entry */
  function unwatch(entry) {
    entry.watching?.abort();
    entry.watching = null;
    entry.push = null;
    if (entry.pending !== null) clearTimeout(entry.pending);
    entry.pending = null;
  }

  /**
   * Show a job (new or updated); follow it while it is active; announce a phase change.
   * @param {Job} job
   * @param {{ atTop: boolean }} where
   */
  function upsert(job, where) {
    const t = now();
    const known = cards.get(job.id);
    if (known) {
      const before = known.card.job;
      known.card.update(job, t);
      known.latest = job;
      if (before.phase !== job.phase) {
        deps.announce(announcement(job));
        if (!isActive(job)) {
          unwatch(known);
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
    /** @type {Entry} */
    const entry = {
      card,
      watching: null,
      seq: -1,
      lastState: null,
      push: null,
      latest: job,
      pending: null,
    };
    cards.set(job.id, entry);
    if (isActive(job)) watch(entry);
    ui.empty.hidden = true;
  }

  /**
   * Follow an active card's job with the client's `watch` until it ends: pushes while the
   * channel is joined, polling otherwise. An error ends the watch: a sign-out or a gone job for
   * good, anything else (a 500) starts it over after a while, from what the card shows.
   * @param {Entry} entry
   */
  function watch(entry) {
    const controller = new AbortController();
    entry.watching = controller;
    const id = entry.card.job.id;
    const { signal } = controller;
    const follow = async () => {
      try {
        const from = entry.card.job;
        for await (const job of api.client.watch(id, { signal, source: channel.source, from }))
          upsert(job, { atTop: false });
      } catch (e) {
        if (signal.aborted || deps.authFailed(e)) return;
        if (e instanceof ApiError && e.problem.code === "not_found") return;
        setTimeout(() => {
          if (entry.watching === controller && isActive(entry.card.job)) void follow();
        }, REWATCH_MS);
      }
    };
    void follow();
  }

  /**
   * The channel joined or lost: polling stops while it is joined, and takes over (with one
   * read now) when it is lost; a join reads every active job once.
   * @param {boolean} joined
   */
  function liveChanged(joined) {
    live = joined;
    for (const entry of cards.values()) if (isActive(entry.card.job)) channel.stale(entry);
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
    // back: what was pushed while the tab slept may be lost, and no poll ran
    if (document.hidden) return;
    for (const entry of cards.values()) if (isActive(entry.card.job)) channel.stale(entry);
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
    pushed: channel.pushed,
    /** The live channel joined (true) or lost (false). */
    liveChanged,
    /** Every card gone, every watch stopped (signed out). */
    stop() {
      live = false;
      for (const entry of cards.values()) unwatch(entry);
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
