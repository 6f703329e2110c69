/**
 * What the page says about teams (public/status.js, public/organizations.js): the pool's usage
 * line, every organization refusal in words, and a cap field read in the plan's meter.
 */
import { describe, expect, test } from "vitest";
import { capFromField, capToField } from "../../public/organizations.js";
import { errorSentence, poolSentence } from "../../public/status.js";
import { viewUsage } from "../support/page-fixtures.ts";

const tokyo = { locale: "en-GB", timeZone: "Asia/Tokyo" };
const now = new Date("2026-12-31T05:00:00Z"); // 14:00 in Tokyo, 31 Dec

const pool = (over: object = {}) =>
  viewUsage({
    plan: "team_pool",
    used: 10,
    limit: 10,
    periodStart: "2026-12-01T00:00:00Z",
    resetsAt: "2027-01-01T00:00:00Z",
    organizationId: "5b0f8c3e-1f7e-4c1a-9d0e-2a6b1c9e4f00",
    memberUsed: 2,
    memberCap: null,
    ...over,
  });

describe("the pool's usage line", () => {
  test("the pool's count, the member's cap when an admin set one, when it resets", () => {
    expect(poolSentence(pool({ used: 3 }), "Acme", now, tokyo)).toBe(
      "Acme's pool: 3 of 10 generations used. Resets tomorrow at 09:00.",
    );
    expect(poolSentence(pool({ used: 3, memberCap: 1, memberUsed: 1 }), "Acme", now, tokyo)).toBe(
      "Acme's pool: 3 of 10 generations used. Your cap: 1 generation (1 generation used). Resets tomorrow at 09:00.",
    );
    const tokens = pool({ meter: "tokens", used: 2_500, limit: 100_000, memberCap: 10_000 });
    expect(poolSentence(tokens, "Acme", now, tokyo)).toBe(
      "Acme's pool: 2,500 of 100,000 tokens used. Your cap: 10,000 tokens (2 tokens used). Resets tomorrow at 09:00.",
    );
    const money = pool({ meter: "money", used: 250_000, limit: 5_000_000, memberCap: null });
    expect(poolSentence(money, "Acme", now, tokyo)).toBe(
      "Acme's pool: $0.25 of $5.00 used. Resets tomorrow at 09:00.",
    );
  });
});

describe("an organization's refusals, in words", () => {
  test("the pool used up says until when, and that the user's own plan is still there", () => {
    expect(errorSentence({ code: "pool_exhausted", usage: pool() }, now, tokyo)).toBe(
      "Your team's pool is used up until tomorrow at 09:00: 10 of 10 generations used. You can still use your own plan.",
    );
    const later = new Date("2026-12-20T05:00:00Z");
    expect(errorSentence({ code: "pool_exhausted", usage: pool() }, later, tokyo)).toBe(
      "Your team's pool is used up until 1 Jan at 09:00: 10 of 10 generations used. You can still use your own plan.",
    );
    // No usage came (an older server): the Retry-After says when.
    expect(errorSentence({ code: "pool_exhausted", retryAfterSeconds: 3600 }, now, tokyo)).toBe(
      "Your team's pool is used up until 15:00. You can still use your own plan.",
    );
  });

  test("the member's cap: the cap, what they used, when it resets", () => {
    const capped = pool({ used: 4, memberCap: 2, memberUsed: 2 });
    expect(errorSentence({ code: "member_cap_reached", usage: capped }, now, tokyo)).toBe(
      "You have reached the cap your admin set (2 generations a period; you have used 2 generations). It resets tomorrow at 09:00.",
    );
  });

  test("every organization and invitation code has a sentence of its own, never the fallback", () => {
    const fallback = errorSentence({ code: "internal" }, now);
    for (const code of [
      "not_a_member",
      "forbidden",
      "invitation_used",
      "invitation_expired",
      "invitation_not_found",
      "wrong_recipient",
      "already_member",
      "invalid_invitation",
      "invalid_cap",
      "no_such_member",
      "last_owner",
      "mail_rate_limited",
      "mail_failed",
    ])
      expect([code, errorSentence({ code }, now)]).not.toEqual([code, fallback]);
  });
});

describe("a cap field", () => {
  test("whole generations and tokens, dollars for money; empty is no cap; anything else is not a cap", () => {
    expect(capFromField("", "jobs")).toBeNull();
    expect(capFromField(" 12 ", "jobs")).toBe(12);
    expect(capFromField("10,000", "tokens")).toBe(10_000);
    expect(capFromField("$2.50", "money")).toBe(2_500_000);
    for (const bad of ["1.5", "-1", "two", "1e3"])
      expect([bad, capFromField(bad, "jobs")]).toEqual([bad, Number.NaN]);
    expect(capToField(2_500_000, "money")).toBe("2.5");
    expect(capToField(null, "tokens")).toBe("");
  });
});
