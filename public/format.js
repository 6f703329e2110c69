// @ts-check
/**
 * Times and durations in the user's own clock. Every function takes `{ locale, timeZone }` so
 * tests pin them; the page passes nothing and gets the browser's locale and time zone.
 */

/** @typedef {{ locale?: string | undefined, timeZone?: string | undefined }} Clock */

/**
 * "09:00": hours and minutes in the user's local time (24 h unless the locale says otherwise).
 * @param {string | Date} at
 * @param {Clock} [clock]
 */
export function formatClock(at, clock = {}) {
  return new Intl.DateTimeFormat(clock.locale, {
    hour: "2-digit",
    minute: "2-digit",
    timeZone: clock.timeZone,
  }).format(new Date(at));
}

/**
 * The local calendar day of an instant, as a whole number of days since 1970-01-01.
 * @param {Date} at
 * @param {Clock} clock
 */
function localDay(at, clock) {
  const parts = new Intl.DateTimeFormat("en-CA", {
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    timeZone: clock.timeZone,
  }).formatToParts(at);
  /** @param {string} type */
  const part = (type) => Number(parts.find((p) => p.type === type)?.value);
  return Math.round(Date.UTC(part("year"), part("month") - 1, part("day")) / 86_400_000);
}

/**
 * When something happens, relative to the user's today: "at 09:00", "tomorrow at 09:00",
 * "on 1 Dec at 09:00".
 * @param {string | Date} at
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function formatWhen(at, now, clock = {}) {
  const when = new Date(at);
  const time = formatClock(when, clock);
  const days = localDay(when, clock) - localDay(now, clock);
  if (days === 0) return `at ${time}`;
  if (days === 1) return `tomorrow at ${time}`;
  const date = new Intl.DateTimeFormat(clock.locale, {
    day: "numeric",
    month: "short",
    timeZone: clock.timeZone,
  }).format(when);
  return `on ${date} at ${time}`;
}

/**
 * "8 s", "2 min 5 s", "1 h 4 min": a duration a person reads at a glance.
 * @param {number} ms
 */
export function formatDuration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

/**
 * "20 seconds", "1 minute", "3 minutes": a wait in words.
 * @param {number} seconds
 */
export function formatWait(seconds) {
  const s = Math.max(1, Math.ceil(seconds));
  if (s < 60) return s === 1 ? "1 second" : `${s} seconds`;
  const m = Math.ceil(s / 60);
  return m === 1 ? "1 minute" : `${m} minutes`;
}

/**
 * A count with thousands separators, always in en-US so the page reads the same everywhere:
 * 2310 → "2,310".
 * @param {number} n
 */
export function formatCount(n) {
  return new Intl.NumberFormat("en-US").format(n);
}
