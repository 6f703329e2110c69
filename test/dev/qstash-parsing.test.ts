import { expect, test } from "vitest";
import { defaultBackoffMs, parseDuration, parseRetryAfter } from "../../dev/qstash/durations.ts";

test("Upstash-Timeout durations: single and compound units", () => {
  expect(parseDuration("50s")).toBe(50_000);
  expect(parseDuration("1d10h30m")).toBe(86_400_000 + 10 * 3_600_000 + 30 * 60_000);
  expect(parseDuration("250ms")).toBe(250);
  expect(parseDuration("7")).toBe(7000);
  for (const bad of ["", "10x", "s", "1h-5m", "ten"]) expect(parseDuration(bad)).toBeUndefined();
});

test("Retry-After: seconds, HTTP date, duration; above one day it is ignored", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  const h = (value: string) => new Headers({ "Retry-After": value });
  expect(parseRetryAfter(h("30"), now)).toBe(30_000);
  expect(parseRetryAfter(h("Thu, 01 Jan 2026 00:02:00 GMT"), now)).toBe(120_000);
  expect(parseRetryAfter(h("6m5s"), now)).toBe(365_000);
  expect(parseRetryAfter(h("86401"), now)).toBeUndefined();
  expect(parseRetryAfter(new Headers({ "X-RateLimit-Reset-Tokens": "2s" }), now)).toBe(2000);
  expect(parseRetryAfter(new Headers(), now)).toBeUndefined();
});

test("default backoff follows the documented table and caps at one day", () => {
  expect(Math.round(defaultBackoffMs(1) / 1000)).toBe(12);
  expect(Math.round(defaultBackoffMs(2) / 1000)).toBe(148); // 2m28s
  expect(Math.round(defaultBackoffMs(3) / 1000)).toBe(1808); // 30m8s
  expect(defaultBackoffMs(5)).toBe(86_400_000);
});
