/**
 * The API's view of a job and of a user's usage (docs/DESIGN.md#http-api): what the edges answer
 * and the page reads, made from the rows the SQL functions return (lib/jobs.ts), and what each
 * kind declares of itself (lib/kinds: its output; its names and form, for the page). No I/O.
 */

import type {
  FailureReason,
  JobRow,
  JobStatus,
  Meter,
  PlanKind,
  RefundWithheld,
  UsageRow,
} from "./jobs.ts";
import { declarationFor, declarations } from "./kinds/index.ts";
import type { KindDeclaration } from "./kinds/kind.ts";

/**
 * The honest word for the UI: `waiting_for_provider` is a queued job with a resume time ahead
 * (a provider quota 429, or the shared gate); `waiting_for_capacity` one that waits because the
 * flex tier had no capacity (an economy plan's 429 resource unavailable).
 */
export type Phase =
  | "queued"
  | "waiting_for_provider"
  | "waiting_for_capacity"
  | "running"
  | "succeeded"
  | "failed"
  | "canceled";

/** A job as the HTTP API shows it (docs/DESIGN.md#http-api). */
export interface Job {
  id: string;
  /** What the job does: one of lib/kinds's ids (docs/DESIGN.md#job-kinds). */
  kind: string;
  /** The owner's own prompt, or the text the kind reads (the API only ever shows a job to its owner). */
  prompt: string;
  /** The whole input as the owner sent it and its kind stored it: `{prompt}`, `{text, schema}`… */
  input: Record<string, unknown>;
  status: JobStatus;
  phase: Phase;
  createdAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  attempts: number;
  providerQuotaHits: number;
  resumeAt: string | null;
  failureReason: FailureReason | null;
  quotaRefunded: boolean;
  /**
   * Past the plan's bound of refunds after provider spend: `running_cancel_limit` (canceled while
   * running) or `paid_refund_limit` (failed, or canceled while queued, after a consumed attempt).
   */
  refundWithheld: RefundWithheld | null;
  /** Whether a cancel now would give the unit back (always false for a final job). */
  cancelRefunds: boolean;
  /**
   * On a token or money plan, what a cancel now keeps of the hold: `nothing` (queued, no attempt
   * consumed), `consumed` (what SQL knows the attempts consumed), or `bound` (the whole hold: the
   * running call reasons, and hidden reasoning cut short is billed by the provider and reported
   * by no one). Null on a job plan (its rule is `cancelRefunds`) and once final.
   */
  cancelCharges: "nothing" | "consumed" | "bound" | null;
  /** The model the job runs on; null on rows older than the price book. */
  model: string | null;
  /** Its model reasons: an attempt cut short is charged its bound (docs/DESIGN.md#metering-hold-and-capture). */
  reasons: boolean;
  /**
   * The output as its kind declares it: the text (a document's markdown), or for a kind whose
   * output is JSON the value, parsed; null until it succeeded.
   */
  output: unknown;
  /**
   * While running: the output streamed so far (for an extraction too: the JSON text as the model
   * has sent it so far) (null before the first progress write), and its
   * completion tokens. Null and 0 in every other state.
   */
  partialOutput: string | null;
  partialTokens: number;
  /**
   * While running: the model is reasoning and has streamed no visible text yet (false in every
   * other state), and the reasoning tokens the provider reported so far (null: none reported).
   * Reasoning tokens are billed output: they are inside `partialTokens`.
   */
  thinking: boolean;
  reasoningTokens: number | null;
  /** What the job is charged in: the plan's meter when it was enqueued. */
  meter: Meter;
  /** The most this job can cost: what it holds while active (units, tokens or micro-dollars). */
  hold: number;
  /** Null while active; once final, what it kept of the hold (the rest went back). */
  captured: number | null;
}

export interface Usage {
  plan: string;
  /** `used` and `limit` count jobs or tokens. */
  meter: Meter;
  /** Of `used`, what active jobs hold (the most they can still cost); GET /api/usage only. */
  held?: number;
  used: number;
  limit: number;
  periodStart: string;
  resetsAt: string;
  active: number;
  maxActive: number;
  /**
   * Jobs refunded this period after provider spend (running cancels, failures and queued cancels
   * after a consumed attempt), and how many may be (GET /api/usage, job plans only: a token plan
   * has no such bound). The name is older than what it counts (the database's paid_refunds) and
   * is kept: a client reading it must not find it gone, which would read as a token plan's "no
   * bound" rather than an error.
   */
  runningCancelRefunds?: { used: number; limit: number };
  /** The kinds the plan offers and what each costs on a job plan: `[{kind, units}]`. */
  kinds: PlanKind[];
  /**
   * An organization's job (docs/DESIGN.md#organizations): `used` and `limit` are the pool's;
   * `memberUsed` and `memberCap` the caller's own row there and the cap an admin set (null: none).
   */
  organizationId?: string;
  memberUsed?: number;
  memberCap?: number | null;
  /**
   * Every kind's declaration: its names, its form's fields and its output (GET /api/usage only:
   * the page builds its choices and forms from it, and lists a kind the plan does not offer).
   */
  catalog?: KindDeclaration[];
}

const iso = (t: string | null): string | null => (t === null ? null : new Date(t).toISOString());

export async function toJob(row: JobRow, now: Date = new Date()): Promise<Job> {
  const waiting =
    row.status === "queued" && row.resume_at !== null && new Date(row.resume_at) > now;
  return {
    id: row.id,
    kind: row.kind ?? "document",
    prompt: row.prompt,
    input: row.input ?? { prompt: row.prompt },
    status: row.status,
    phase: waiting
      ? row.waiting_for === "capacity"
        ? "waiting_for_capacity"
        : "waiting_for_provider"
      : row.status,
    createdAt: new Date(row.created_at).toISOString(),
    startedAt: iso(row.started_at),
    finishedAt: iso(row.finished_at),
    attempts: row.attempts,
    providerQuotaHits: row.provider_quota_hits,
    resumeAt: iso(row.resume_at),
    failureReason: row.failure_reason,
    quotaRefunded: row.refunded_at !== null,
    refundWithheld: row.refund_withheld ?? null,
    // Rows from other functions than get_job/list_jobs do not say; a queued job always refunds.
    cancelRefunds: row.cancel_refunds ?? row.status === "queued",
    cancelCharges: cancelCharges(row),
    model: row.model ?? null,
    reasons: row.reasons === true,
    output: outputOf(row, await declarationFor(row.kind ?? "document")),
    partialOutput: row.status === "running" ? (row.partial_output ?? null) : null,
    partialTokens: row.status === "running" ? (row.partial_tokens ?? 0) : 0,
    thinking: row.status === "running" && row.thinking === true,
    reasoningTokens: row.status === "running" ? (row.reasoning_tokens ?? null) : null,
    meter: row.meter ?? "jobs",
    hold: row.hold ?? 1,
    captured: row.captured ?? null,
  };
}

function cancelCharges(row: JobRow): Job["cancelCharges"] {
  if (row.meter !== "tokens" && row.meter !== "money") return null;
  if (row.status === "running") return row.reasons ? "bound" : "consumed";
  if (row.status === "queued") return row.consumed > 0 ? "consumed" : "nothing";
  return null;
}

/** A JSON kind's stored output is JSON the worker validated: the value, not its text. */
function outputOf(row: JobRow, kind: KindDeclaration | null): unknown {
  if (row.output === null || kind?.output !== "json") return row.output;
  try {
    return JSON.parse(row.output);
  } catch {
    return row.output;
  }
}

export function toUsage(row: UsageRow): Usage {
  // A database before the rename still says refunded_running_cancels: the code deploys first.
  const used = row.paid_refunds ?? row.refunded_running_cancels;
  const limit = row.max_paid_refunds ?? row.max_refunded_running_cancels;
  const cancels = used == null || limit == null ? {} : { runningCancelRefunds: { used, limit } };
  return {
    plan: row.plan,
    meter: row.meter ?? "jobs",
    ...(row.held === undefined ? {} : { held: row.held }),
    used: row.used,
    limit: row.limit,
    periodStart: new Date(row.period_start).toISOString(),
    resetsAt: new Date(row.resets_at).toISOString(),
    active: row.active,
    maxActive: row.max_active,
    ...cancels,
    kinds: row.kinds ?? [{ kind: "document", units: 1 }],
    ...(row.organization_id === undefined
      ? {}
      : {
          organizationId: row.organization_id,
          memberUsed: row.member_used ?? 0,
          memberCap: row.member_cap ?? null,
        }),
  };
}

/** The usage with every kind's declaration: what GET /api/usage answers. */
export async function toUsageWithCatalog(row: UsageRow): Promise<Usage> {
  return { ...toUsage(row), catalog: await declarations() };
}
