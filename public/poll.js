// @ts-check
/**
 * The page's polling schedule as a poller of its own. The page follows its jobs with the typed
 * client's `watch` (public/client.js), which waits by the same numbers (test/unit/
 * public-client.test.ts holds them equal); the benches drive this poller on a virtual clock to
 * count what the page's polling costs (bench/support/poll-cost.ts, bench/first-request.ts).
 *
 * Polling one active job, at a pace set by what the job is doing:
 * - `fast` while it is queued or starting (running with no output yet): the next change is
 *   the one the person waits for (the worker's claim, the first token), so the first look is
 *   after 250 ms;
 * - `streaming` while its output grows: the worker writes its progress about once a second
 *   (PROGRESS_INTERVAL_MS), so looking faster than that would find nothing new;
 * - `slow` otherwise (waiting for the AI provider: nothing moves before its time).
 * Each look that finds nothing changed waits half as long again, up to 10 s, so a job that does
 * not move costs a few requests a minute whatever its pace; a change starts over at its pace's
 * first wait. Paused while the tab is hidden (a hidden tab polling for hours is what drains a
 * quota of requests), resumed with an immediate look.
 */

/** @typedef {"fast" | "streaming" | "slow"} Pace */

/** The first wait of each pace, in ms. */
export const POLL_FIRST_MS = { fast: 250, streaming: 1000, slow: 1500 };
export const POLL_MAX_MS = 10_000;
export const POLL_GROWTH = 1.5;

/**
 * The wait before poll number `attempt` (0-based) since the last change, at `pace`.
 * fast: 250, 375, 563, 844, 1266, ... 10000; slow: 1500, 2250, 3375, 5063, 7594, 10000, ...
 * @param {number} attempt
 * @param {Pace} [pace]
 */
export function pollDelay(attempt, pace = "slow") {
  const first = POLL_FIRST_MS[pace];
  return Math.min(POLL_MAX_MS, Math.round(first * POLL_GROWTH ** Math.max(0, attempt)));
}

/**
 * The pace for a job as the page last saw it.
 * @param {{ phase: string, partialOutput?: string | null } | undefined} job
 * @returns {Pace}
 */
export function paceOf(job) {
  if (!job) return "slow";
  if (job.phase === "queued") return "fast";
  if (job.phase === "running") return job.partialOutput ? "streaming" : "fast";
  return "slow";
}

/** @typedef {"changed" | "same" | "stop"} TickResult */

/**
 * @typedef {object} Timers
 * @property {(fn: () => void, ms: number) => unknown} setTimeout
 * @property {(id: unknown) => void} clearTimeout
 */

/**
 * @typedef {object} Poller
 * @property {() => void} start   first look after the first delay
 * @property {() => void} pause   no request while paused (tab hidden)
 * @property {() => void} resume  look now, then carry on with the backoff
 * @property {() => void} stop    never again
 * @property {() => boolean} stopped
 */

/**
 * @param {{ tick: () => Promise<TickResult>, pace?: () => Pace, timers?: Timers, delay?: (attempt: number, pace: Pace) => number }} options
 *   `tick` looks once and says whether the job changed, stayed the same, or needs no more
 *   polling; a thrown error counts as "same" (a network blip only slows polling down).
 *   `pace` says what the job is doing now (asked before each wait; default `slow`).
 * @returns {Poller}
 */
export function createPoller({
  tick,
  pace = () => "slow",
  timers = defaultTimers(),
  delay = pollDelay,
}) {
  let attempt = 0;
  /** @type {unknown} */
  let timer = null;
  let paused = false;
  let done = false;
  let inFlight = false;

  const clear = () => {
    if (timer !== null) timers.clearTimeout(timer);
    timer = null;
  };
  const schedule = () => {
    clear();
    if (done || paused) return;
    timer = timers.setTimeout(run, delay(attempt, pace()));
  };
  const run = async () => {
    timer = null;
    if (done || paused || inFlight) return;
    inFlight = true;
    /** @type {TickResult} */
    let result;
    try {
      result = await tick();
    } catch {
      result = "same";
    } finally {
      inFlight = false;
    }
    if (result === "stop") {
      done = true;
      return;
    }
    attempt = result === "changed" ? 0 : attempt + 1;
    schedule();
  };

  return {
    start: schedule,
    pause() {
      paused = true;
      clear();
    },
    resume() {
      if (done || !paused) return;
      paused = false;
      void run();
    },
    stop() {
      done = true;
      clear();
    },
    stopped: () => done,
  };
}

/** @returns {Timers} */
function defaultTimers() {
  return {
    setTimeout: (fn, ms) => globalThis.setTimeout(fn, ms),
    clearTimeout: (id) => globalThis.clearTimeout(/** @type {number} */ (id)),
  };
}
