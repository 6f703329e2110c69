import { MAX_RETRY_AFTER_MS } from "./constants.ts";

const unitMs: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * Parses QStash durations: "50s", "1d10h30m", "250ms". A bare number counts as seconds.
 * Returns undefined for anything else.
 */
export function parseDuration(text: string): number | undefined {
  const value = text.trim();
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  if (!/^(\d+(\.\d+)?(ms|s|m|h|d))+$/.test(value)) return undefined;
  let total = 0;
  for (const [, amount, , unit] of value.matchAll(/(\d+(\.\d+)?)(ms|s|m|h|d)/g)) {
    total += Number(amount) * (unitMs[unit ?? "s"] ?? 1000);
  }
  return total;
}

/**
 * A destination's own retry hint (Retry-After and the X-RateLimit-Reset family): seconds, an
 * HTTP date, or a duration like "6m5s". Above one day it is ignored, as QStash does.
 */
export function parseRetryAfter(headers: Headers, now: number): number | undefined {
  for (const name of [
    "retry-after",
    "x-ratelimit-reset",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
  ]) {
    const raw = headers.get(name)?.trim();
    if (!raw) continue;
    let ms: number | undefined;
    if (/^\d+(\.\d+)?$/.test(raw)) ms = Number(raw) * 1000;
    else ms = parseDuration(raw);
    if (ms === undefined) {
      const date = Date.parse(raw);
      if (!Number.isNaN(date)) ms = Math.max(0, date - now);
    }
    if (ms !== undefined && ms <= MAX_RETRY_AFTER_MS) return ms;
  }
  return undefined;
}

/** The documented default backoff: min(1 day, e^(2.5·n)) seconds, n = retries so far. */
export function defaultBackoffMs(retriesSoFar: number): number {
  return Math.min(86_400, Math.exp(2.5 * retriesSoFar)) * 1000;
}
