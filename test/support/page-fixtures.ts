/**
 * What the API answers, as the page's modules (public/*.js) read it, for their unit tests: one
 * job and one usage, each with `over` on top.
 */
import type { Job, Usage } from "../../lib/view.ts";

/** A queued job that has not run, from before kinds existed (no `kind`, no `input`). */
export const viewJob = (over: object = {}): Job =>
  ({
    id: "7b0c2f0e-1d7e-4a55-9d2a-0c7d1f1f0a01",
    prompt: "a prompt",
    status: "queued",
    phase: "queued",
    createdAt: "2026-11-30T04:59:00Z",
    startedAt: null,
    finishedAt: null,
    attempts: 0,
    providerQuotaHits: 0,
    resumeAt: null,
    failureReason: null,
    quotaRefunded: false,
    refundWithheld: null,
    cancelRefunds: true,
    output: null,
    partialOutput: null,
    partialTokens: 0,
    thinking: false,
    reasoningTokens: null,
    meter: "jobs",
    hold: 1,
    captured: null,
    ...over,
  }) as Job;

/** A pro plan's usage in November, nothing used, from before kinds existed (no `kinds`). */
export const viewUsage = (over: object = {}): Usage =>
  ({
    plan: "pro",
    meter: "jobs",
    used: 0,
    limit: 100,
    periodStart: "2026-11-01T00:00:00Z",
    resetsAt: "2026-12-01T00:00:00Z",
    active: 0,
    maxActive: 3,
    ...over,
  }) as Usage;

/** A usage's `kinds` on a plan that offers documents and extractions. */
export const BOTH_KINDS = [
  { kind: "document", units: 1 },
  { kind: "extract", units: 2 },
];
