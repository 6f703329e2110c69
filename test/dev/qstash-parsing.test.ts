import { expect, test } from "vitest";
import { defaultBackoffMs, parseDuration, parseRetryAfter } from "../../dev/qstash/durations.ts";
import { compileExpression, ExpressionError } from "../../dev/qstash/expression.ts";

test("Upstash-Delay durations: single and compound units", () => {
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

test("retry-delay expressions evaluate over `retried` with the documented functions", () => {
  const cases: Array<[string, number, number]> = [
    ["pow(2, retried) * 1000", 3, 8000],
    ["1000 * (1 + retried)", 2, 3000],
    ["min(max(retried * 500, 100), 1000)", 0, 100],
    ["sqrt(16) + abs(-1) + floor(1.7) + ceil(1.2) + round(2.5)", 0, 4 + 1 + 1 + 2 + 3],
    ["exp(0) * 10 - -5", 0, 15],
    ["2 ^ 3 ^ 2", 0, 512],
    ["10 % 4 / 2", 0, 1],
  ];
  for (const [source, retried, expected] of cases)
    expect(compileExpression(source)(retried)).toBe(expected);
});

test("retry-delay expressions reject anything outside the grammar instead of evaluating it", () => {
  for (const bad of [
    "",
    "process.exit(1)",
    "retried;1",
    "pow(2,",
    "foo(1)",
    "1 +",
    "(1",
    "constructor",
  ]) {
    expect(() => compileExpression(bad), bad).toThrow(ExpressionError);
  }
});
