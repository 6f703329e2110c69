import { describe, expect, test } from "vitest";
import { FAILURE_REASONS } from "../../lib/jobs.ts";
import type { Job } from "../../lib/view.ts";
import {
  boundCancelWarning,
  costSentence,
  errorSentence,
  failureSentence,
  isActive,
  periodWord,
  phaseSentence,
  usageSentence,
} from "../../public/status.js";
import { BOTH_KINDS, viewJob, viewUsage } from "../support/page-fixtures.ts";

const tokyo = { locale: "en-GB", timeZone: "Asia/Tokyo" };
const now = new Date("2026-11-30T05:00:00Z"); // 14:00 in Tokyo

const job = (over: Partial<Job>): Job =>
  viewJob({ kind: "document", input: { prompt: "a prompt" }, ...over });

/** A job that has reached `phase` (its status too), with `over` on top. */
const jobIn = (phase: "running" | "succeeded" | "failed" | "canceled", over: Partial<Job> = {}) =>
  job({ status: phase, phase, ...over });

const freeUsage = viewUsage({
  plan: "free",
  used: 1,
  limit: 1,
  periodStart: "2026-11-30T00:00:00Z",
  maxActive: 1,
  kinds: [{ kind: "document", units: 1 }],
});
const proUsage = viewUsage({
  used: 100,
  active: 3,
  kinds: BOTH_KINDS,
});

describe("phase → sentence: only what the API knows, no progress estimate", () => {
  test("queued", () => {
    expect(phaseSentence(job({}), now, tokyo)).toBe(
      "Queued. It starts as soon as a worker is free.",
    );
  });

  test.each([
    {
      name: "waiting for the provider names the resume time in local time and says the page may close",
      phase: "waiting_for_provider",
      timed: "Waiting for the AI provider, resumes around 14:42. You can close this page.",
      untimed: "Waiting for the AI provider. You can close this page.",
    },
    {
      name: "waiting for cheaper capacity (flex) names when it tries again, and is still active",
      phase: "waiting_for_capacity",
      timed: "Waiting for cheaper capacity, tries again around 14:42. You can close this page.",
      untimed: "Waiting for cheaper capacity. You can close this page.",
    },
  ] as const)("$name", ({ phase, timed, untimed }) => {
    const j = job({ phase, resumeAt: "2026-11-30T05:42:10Z" });
    expect(phaseSentence(j, now, tokyo)).toBe(timed);
    expect(phaseSentence({ ...j, resumeAt: null }, now, tokyo)).toBe(untimed);
    expect(isActive(j)).toBe(true);
  });

  test("a running job that reasons says Thinking…, with the reasoning tokens once reported", () => {
    const j = jobIn("running", { startedAt: "2026-11-30T04:59:50Z", thinking: true });
    expect(phaseSentence(j, now, tokyo)).toBe("Thinking…, running for 10 s.");
    expect(phaseSentence({ ...j, reasoningTokens: 1234 }, now, tokyo)).toBe(
      "Thinking… 1,234 reasoning tokens so far, running for 10 s.",
    );
  });

  test("running shows the time elapsed since startedAt", () => {
    const j = jobIn("running", { startedAt: "2026-11-30T04:58:55Z" });
    expect(phaseSentence(j, now, tokyo)).toBe("Generating now, running for 1 min 5 s.");
  });

  test("succeeded says when", () => {
    const j = jobIn("succeeded", { finishedAt: "2026-11-30T04:59:30Z", output: "text" });
    expect(phaseSentence(j, now, tokyo)).toBe("Done at 13:59.");
  });

  test("failed gives the reason in words and the refund", () => {
    const j = jobIn("failed", { failureReason: "provider_quota_exhausted", quotaRefunded: true });
    expect(phaseSentence(j, now, tokyo)).toBe(
      "Failed: the AI provider stayed unavailable for too long. Your generation was refunded.",
    );
    expect(phaseSentence({ ...j, quotaRefunded: false }, now, tokyo)).toBe(
      "Failed: the AI provider stayed unavailable for too long.",
    );
  });

  test("a provider that refuses our configuration: the page says it is our fault, not the prompt, and refunded", () => {
    const j = jobIn("failed", { failureReason: "provider_misconfigured", quotaRefunded: true });
    expect(phaseSentence(j, now, tokyo)).toBe(
      "Failed: the service is misconfigured on our side, not because of your prompt. Your generation was refunded.",
    );
  });

  test("canceled says it was refunded", () => {
    const j = jobIn("canceled", { quotaRefunded: true });
    expect(phaseSentence(j, now, tokyo)).toBe("Canceled. Your generation was refunded.");
  });

  test("every failure reason of the API has words of its own", () => {
    const sentences = FAILURE_REASONS.map(failureSentence);
    expect(new Set(sentences).size).toBe(FAILURE_REASONS.length);
    for (const s of sentences) expect(s).not.toMatch(/_/);
    expect(failureSentence(null)).toMatch(/went wrong/);
  });

  test("only queued, waiting and running jobs are active", () => {
    expect(isActive(job({ phase: "waiting_for_provider" }))).toBe(true);
    expect(isActive(job({ phase: "running" }))).toBe(true);
    expect(isActive(job({ phase: "succeeded" }))).toBe(false);
    expect(isActive(job({ phase: "canceled" }))).toBe(false);
  });
});

describe("usage", () => {
  test("the period is named from its length", () => {
    expect(periodWord(freeUsage)).toBe("today's");
    expect(periodWord(proUsage)).toBe("this month's");
  });

  test("plan, used of limit, and the reset in local time", () => {
    expect(usageSentence({ ...freeUsage, used: 0 }, now, tokyo)).toBe(
      "Free plan: 0 of 1 generation used. Resets tomorrow at 09:00.",
    );
    expect(usageSentence(proUsage, now, tokyo)).toBe(
      "Pro plan: 100 of 100 generations used. Resets tomorrow at 09:00.",
    );
  });
});

describe("error code → sentence", () => {
  test("quota_exceeded on the free plan: today's generation, back at the reset time", () => {
    const late = new Date("2026-11-30T23:30:00Z"); // 08:30 on 1 Dec in Tokyo
    expect(
      errorSentence(
        { code: "quota_exceeded", usage: freeUsage, retryAfterSeconds: 1800 },
        late,
        tokyo,
      ),
    ).toBe("You have used today's generation. It comes back at 09:00.");
    expect(errorSentence({ code: "quota_exceeded", usage: freeUsage }, now, tokyo)).toBe(
      "You have used today's generation. It comes back tomorrow at 09:00.",
    );
  });

  test("quota_exceeded on a monthly plan, and from Retry-After alone", () => {
    expect(
      errorSentence(
        { code: "quota_exceeded", usage: proUsage },
        new Date("2026-11-20T00:00:00Z"),
        tokyo,
      ),
    ).toBe("You have used all 100 of this month's generations. They come back on 1 Dec at 09:00.");
    expect(errorSentence({ code: "quota_exceeded", retryAfterSeconds: 3600 }, now, tokyo)).toBe(
      "You have used this period's generation. It comes back at 15:00.",
    );
  });

  test("too_many_active_jobs names the plan's limit", () => {
    expect(errorSentence({ code: "too_many_active_jobs", usage: freeUsage }, now)).toBe(
      "Your plan runs one job at a time. Wait for it to finish, or cancel it, then try again.",
    );
    expect(errorSentence({ code: "too_many_active_jobs", usage: proUsage }, now)).toBe(
      "Your plan runs 3 jobs at a time. Wait for one to finish, or cancel one, then try again.",
    );
  });

  test("rate_limited and unavailable say when to retry, from Retry-After", () => {
    expect(errorSentence({ code: "rate_limited", retryAfterSeconds: 20 }, now)).toBe(
      "You are sending requests too quickly. Try again in 20 seconds.",
    );
    expect(errorSentence({ code: "unavailable", retryAfterSeconds: 5 }, now)).toBe(
      "The service is busy right now, and nothing was charged. Try again in 5 seconds.",
    );
    expect(errorSentence({ code: "unavailable" }, now)).toBe(
      "The service is busy right now, and nothing was charged. Try again in a moment.",
    );
  });

  test("invalid_prompt keeps the server's reason; unauthorized asks to sign in again", () => {
    expect(errorSentence({ code: "invalid_prompt", message: "The prompt is empty." }, now)).toBe(
      "This prompt cannot be sent. The prompt is empty.",
    );
    expect(errorSentence({ code: "unauthorized" }, now)).toBe(
      "Your session has ended. Please sign in again.",
    );
  });

  test("no answer at all says retrying is safe; unknown codes get a plain apology", () => {
    expect(errorSentence({ code: "network" }, now)).toMatch(/will not charge you twice/);
    expect(errorSentence({ code: "internal", status: 500 }, now)).toBe(
      "Something went wrong on our side. Please try again in a moment.",
    );
  });

  test("no sentence leaks a machine code", () => {
    for (const code of [
      "quota_exceeded",
      "too_many_active_jobs",
      "rate_limited",
      "unavailable",
      "invalid_prompt",
      "payload_too_large",
      "unauthorized",
      "idempotency_key_reused",
      "not_found",
      "already_finished",
      "network",
      "internal",
      "invalid_json",
    ]) {
      expect(errorSentence({ code }, now, tokyo)).not.toMatch(/[a-z]+_[a-z]+/);
    }
  });
});

describe("a token plan shows the cost honestly", () => {
  const team = viewUsage({
    plan: "team",
    meter: "tokens",
    held: 4400,
    used: 6710,
    limit: 2_000_000,
    active: 2,
    kinds: BOTH_KINDS,
  });

  test("a token plan's refusal says how many tokens are left, not generations", () => {
    const problem = { code: "quota_exceeded", usage: { ...team, used: 1_999_000 } };
    expect(errorSentence(problem, now, tokyo)).toMatch(
      /^Not enough tokens left for this prompt: 1,000 of 2,000,000 remain, and a job holds its prompt plus its longest answer\. They come back /,
    );
  });

  test("usage: tokens used of the limit, and what active jobs hold", () => {
    expect(usageSentence(team, now, tokyo)).toMatch(
      /^Team plan: 6,710 tokens used of 2,000,000 \(4,400 of them held by active jobs\)\. Resets /,
    );
    expect(usageSentence({ ...team, held: 0, used: 2310 }, now, tokyo)).toMatch(
      /^Team plan: 2,310 tokens used of 2,000,000\. Resets /,
    );
  });

  test("an active job says what it holds; a finished one what it used and what went back", () => {
    const active = job({ meter: "tokens", hold: 4400 });
    expect(phaseSentence(active, now, tokyo)).toBe(
      "Queued. It starts as soon as a worker is free. This job holds up to 4,400 tokens of your quota.",
    );
    const canceled = jobIn("canceled", {
      meter: "tokens",
      hold: 4400,
      captured: 160,
      quotaRefunded: true,
    });
    expect(phaseSentence(canceled, now, tokyo)).toBe(
      "Canceled. It used 160 tokens; the other 4,240 it held went back.",
    );
    expect(costSentence({ meter: "tokens", hold: 600, captured: 600, status: "succeeded" })).toBe(
      "It used 600 tokens.",
    );
    expect(costSentence({ meter: "jobs", hold: 1, captured: 1, status: "succeeded" })).toBe("");
  });
});

describe("money plans and reasoning calls", () => {
  test("a money plan's hold and capture read as dollars", () => {
    expect(costSentence({ meter: "money", hold: 4650, captured: null, status: "running" })).toBe(
      "This job holds up to $0.00465 of your quota.",
    );
    expect(costSentence({ meter: "money", hold: 4650, captured: 1384, status: "succeeded" })).toBe(
      "It used $0.001384; the other $0.003266 it held went back.",
    );
  });

  test("an ending that kept a reasoning call's whole hold says why; a success does not", () => {
    expect(
      costSentence({
        meter: "tokens",
        hold: 2100,
        captured: 2100,
        status: "canceled",
        reasons: true,
      }),
    ).toBe(
      "It used 2,100 tokens, its whole hold: the model's hidden reasoning is billed by the provider and not reported when a call is cut short.",
    );
    expect(
      costSentence({
        meter: "tokens",
        hold: 2100,
        captured: 2100,
        status: "succeeded",
        reasons: true,
      }),
    ).toBe("It used 2,100 tokens.");
  });

  test("the question before canceling a reasoning call names the hold it keeps", () => {
    expect(boundCancelWarning({ meter: "tokens", hold: 2100 })).toBe(
      "Canceling now stops the generation but keeps this job's whole hold (2,100 tokens): the model may be reasoning, which the provider bills and does not report when a call is cut short.",
    );
  });

  test("a money plan's usage reads as dollars", () => {
    const usage = viewUsage({ plan: "wallet", meter: "money", used: 1_250_000, limit: 5_000_000 });
    expect(usageSentence(usage, now, tokyo)).toMatch(
      /^Wallet plan: \$1\.25 used of \$5\.00\. Resets /,
    );
  });
});
