// @ts-check
/**
 * Polling one active job: about 1.5 s at first, growing by half each time nothing changed, up
 * to 10 s; back to 1.5 s when something changed; paused while the tab is hidden (a hidden tab
 * polling for hours is what drains a quota of requests), resumed with an immediate look.
 */

export const POLL_FIRST_MS = 1500;
export const POLL_MAX_MS = 10_000;
export const POLL_GROWTH = 1.5;

/**
 * The wait before poll number `attempt` (0-based) since the last change.
 * 1500, 2250, 3375, 5063, 7594, 10000, 10000, ...
 * @param {number} attempt
 */
export function pollDelay(attempt) {
  return Math.min(POLL_MAX_MS, Math.round(POLL_FIRST_MS * POLL_GROWTH ** Math.max(0, attempt)));
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
 * @param {{ tick: () => Promise<TickResult>, timers?: Timers, delay?: (attempt: number) => number }} options
 *   `tick` looks once and says whether the job changed, stayed the same, or needs no more
 *   polling; a thrown error counts as "same" (a network blip only slows polling down).
 * @returns {Poller}
 */
export function createPoller({ tick, timers = defaultTimers(), delay = pollDelay }) {
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
    timer = timers.setTimeout(run, delay(attempt));
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
