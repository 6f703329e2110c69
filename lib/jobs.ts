/**
 * The job transitions, typed: one function per SQL function (what each does now:
 * supabase/schema.sql; when and why it changed: the migration that last re-created it), each one
 * round trip. Outcomes are data (a union on
 * `outcome`); a database failure is a thrown DatabaseError, never an outcome. What the API
 * shows of a job is lib/view.ts.
 */
import type { Rpc } from "./db.ts";

export type JobStatus = "queued" | "running" | "succeeded" | "failed" | "canceled";
/**
 * Why a job failed: the one list. The SQL check constraint (`generation_jobs_failure_reason_check`
 * in supabase/schema.sql) and the page's wording (public/status.js, typed by it) are held to it
 * by test/unit/one-source.test.ts and the type checker.
 */
export const FAILURE_REASONS = [
  "model_refused",
  "delivery_failed",
  "publish_failed",
  "provider_quota_exhausted",
  "lease_expired",
  "max_age_exceeded",
  "never_delivered",
  // A token plan's attempts reached 2 × hold (docs/DESIGN.md#metering-hold-and-capture).
  "attempt_budget_exhausted",
  // The provider refused our configuration (key, region, permission, model: lib/model.ts): the
  // operator's fault, so it captures nothing and is always refunded.
  "provider_misconfigured",
  // A flex-tier job waited for capacity (429 resource unavailable) until its max age: nothing
  // was billed for those waits, nobody must add credits; refunded like every failure by age.
  "capacity_unavailable",
  // An extraction's output did not parse as JSON or did not validate against its schema
  // (lib/kinds/extract.ts): the attempt's usage is charged by the usual refund rule.
  "output_invalid",
  // An extraction's output was cut at the plan's output bound (a `length` finish): an unfinished
  // JSON value is no answer.
  "output_truncated",
] as const;
export type FailureReason = (typeof FAILURE_REASONS)[number];

/**
 * Why a job plan's failed or canceled job kept its unit (docs/DESIGN.md#cancel): a running cancel
 * (`running_cancel_limit`), or a failure or queued cancel after its attempts consumed provider
 * tokens (`paid_refund_limit`), past the plan's bound of refunds after spend.
 */
export type RefundWithheld = "running_cancel_limit" | "paid_refund_limit";

/** A job row as the SQL functions return it (snake_case, ISO timestamps). Server side only. */
export interface JobRow {
  id: string;
  user_id: string;
  status: JobStatus;
  /** What the job does: one of lib/kinds/index.ts's ids. */
  kind: string;
  /** A document's prompt, an extraction's text. */
  prompt: string;
  /** The whole input as the client sent it, checked by its kind at enqueue. */
  input: Record<string, unknown>;
  idempotency_key: string | null;
  plan_id: string;
  period_start: string;
  output: string | null;
  failure_reason: FailureReason | null;
  last_error: string | null;
  attempts: number;
  provider_quota_hits: number;
  publish_seq: number;
  republish_count: number;
  resume_at: string | null;
  lease_expires_at: string | null;
  created_at: string;
  queued_at: string;
  started_at: string | null;
  finished_at: string | null;
  refunded_at: string | null;
  /** Why a failed or canceled job kept its unit spent (docs/DESIGN.md#cancel); else null. */
  refund_withheld: RefundWithheld | null;
  updated_at: string;
  /**
   * The running attempt's output so far (record_progress; read from its chunks, and kept on a
   * failed or canceled job as it ended).
   */
  partial_output: string | null;
  partial_tokens: number;
  progress_at: string | null;
  /** The job's plan's meter when it was enqueued (docs/DESIGN.md#metering-hold-and-capture). */
  meter: Meter;
  /** The prompt's tokens as counted at enqueue; null on jobs older than metering. */
  prompt_tokens: number | null;
  /**
   * What enqueue added to the counter: the kind's units (jobs), prompt + output bound (tokens),
   * or that call's worst case in micro-dollars (money).
   */
  hold: number;
  /** Null while active; on an ending, what was kept of the hold. */
  captured: number | null;
  /** What the attempts that did not end the job cost, in the meter's unit (2 × hold in all). */
  consumed: number;
  /** The model the job runs on (its plan's, else the deployment's); absent from older rows. */
  model?: string | null;
  /** The held tier (its plan's when enqueued); absent from older rows. */
  service_tier?: ServiceTier | null;
  /** Its model reasons at the plan's effort: a cut attempt costs its bound. */
  reasons?: boolean;
  /** What the last requeue waits for (meaningful while `resume_at` is ahead). */
  waiting_for: "provider" | "capacity" | null;
  /** When the job first met no flex capacity; the plan's fallback counts from it. */
  capacity_wait_since: string | null;
  /** The running attempt reports reasoning and has streamed no visible text yet. */
  thinking: boolean;
  /** The running attempt's reasoning tokens so far (part of `partial_tokens`); null: none reported. */
  reasoning_tokens: number | null;
  /** When retention erased the job's text (prompt '', input {}, output and errors null). */
  erased_at?: string | null;
  /** get_job and list_jobs only: whether a cancel now would refund. */
  cancel_refunds?: boolean;
}

/**
 * A job as an ending answers it (complete_job's `completed`, fail_job's `failed`:
 * private.ending_json): its state, none of its text. What a reader shows is get_job's whole row.
 */
export type JobEnding = Pick<
  JobRow,
  | "id"
  | "user_id"
  | "status"
  | "kind"
  | "plan_id"
  | "meter"
  | "attempts"
  | "publish_seq"
  | "failure_reason"
  | "hold"
  | "consumed"
  | "captured"
  | "refunded_at"
  | "refund_withheld"
  | "finished_at"
  | "updated_at"
>;

/** OpenAI's service tier a plan runs on (plans.service_tier). */
export type ServiceTier = "default" | "flex" | "priority";

/**
 * What a plan counts: jobs (each holds its kind's units), tokens (each holds its prompt + output
 * bound) or money (micro-dollars; each holds its call's worst case at the price book's prices).
 */
export type Meter = "jobs" | "tokens" | "money";

export interface UsageRow {
  plan: string;
  /** Absent only from rows of a database older than metering. */
  meter?: Meter;
  /** get_usage: what the active jobs hold (part of `used`). */
  held?: number;
  used: number;
  limit: number;
  period_start: string;
  resets_at: string;
  active: number;
  max_active: number;
  /**
   * get_usage (not the enqueue's report): the period's refunds after provider spend (running
   * cancels, failures and queued cancels after a consumed attempt) and their bound; null on a
   * token plan, which has no such bound.
   */
  paid_refunds?: number | null;
  max_paid_refunds?: number | null;
  /** The same two under their names before 20261208100000_paid_refunds.sql. */
  refunded_running_cancels?: number | null;
  max_refunded_running_cancels?: number | null;
  /** The kinds the plan offers and what each holds on a job plan; absent from older databases. */
  kinds?: PlanKind[];
  /**
   * An organization's usage (docs/DESIGN.md#organizations): `used` and `limit` are its pool's;
   * these are the member's own row and cap (null: none).
   */
  organization_id?: string;
  member_used?: number;
  member_cap?: number | null;
}

/** A kind a plan offers (public.plan_kinds): its units on a job plan. */
export interface PlanKind {
  kind: string;
  units: number;
}

export type EnqueueResult =
  | { outcome: "enqueued"; job: JobRow; usage: UsageRow }
  | { outcome: "replayed"; job: JobRow; usage: UsageRow }
  | { outcome: "idempotency_key_reused"; job_id: string }
  | { outcome: "quota_exceeded"; resets_at: string; usage: UsageRow; hold?: number }
  | { outcome: "too_many_active_jobs"; usage: UsageRow }
  | { outcome: "not_a_member" }
  | {
      outcome: "pool_exhausted" | "member_cap_reached";
      resets_at: string;
      usage: UsageRow;
      hold: number;
    }
  | { outcome: "invalid_prompt" }
  /** The input is not a JSON object (the edge checks it in full first). */
  | { outcome: "invalid_input" }
  | { outcome: "invalid_idempotency_key" }
  /** No such kind (public.job_kinds): nothing held. */
  | { outcome: "unknown_kind" }
  /** The user's plan does not offer the kind: nothing held; what it offers. */
  | { outcome: "kind_not_in_plan"; plan: string; kinds: PlanKind[] }
  /** No auth.users row for the token's user (deleted, or never created): nothing held. */
  | { outcome: "user_not_found" }
  /** The job's model is past its shutdown date (public.models): nothing held. */
  | { outcome: "model_retired"; model: string; shutdown_date: string };
export type StartResult =
  | {
      outcome: "started";
      job: JobRow;
      max_output_tokens: number;
      /** The tier of this attempt: the plan's, or `default` once a flex job waited past the plan's fallback. */
      service_tier?: ServiceTier;
      /** The plan's reasoning effort, or null: the model's default. */
      reasoning_effort?: string | null;
      /** The plan's flex fallback (seconds of waiting for capacity), or null: never. */
      flex_fallback_after_seconds?: number | null;
    }
  | { outcome: "already_running" | "not_ready" | "already_final"; job: JobRow }
  /** A token plan's next attempt could cross 2 × hold: the job ended failed instead. */
  | { outcome: "budget_exhausted"; job: JobRow }
  | { outcome: "not_found" };
export type CompleteResult =
  | { outcome: "completed"; job: JobEnding }
  | { outcome: "not_running"; job: JobRow }
  | { outcome: "not_found" };
export type RequeueResult =
  | { outcome: "requeued"; job: JobRow }
  | { outcome: "gave_up"; by: "hits" | "age"; job: JobRow }
  | { outcome: "not_running"; job: JobRow }
  | { outcome: "not_found" };
export type ReleaseResult =
  | { outcome: "released"; job: JobRow }
  /** The released attempt brought a token plan's job to 2 × hold: failed, this attempt captured. */
  | { outcome: "budget_exhausted"; job: JobRow }
  | { outcome: "not_running"; job: JobRow }
  | { outcome: "not_found" };
export type FailResult =
  | { outcome: "failed"; job: JobEnding }
  | { outcome: "already_final" | "not_running"; job: JobRow }
  /** The failure callback's message is older than the job's `publish_seq`: nothing changed. */
  | { outcome: "superseded"; job: JobRow }
  | { outcome: "not_found" };
export type ProgressResult =
  /** `stored`: the characters of the attempt's text the database holds now. */
  | { outcome: "recorded"; stored: number }
  | { outcome: "not_running"; status: JobStatus }
  | { outcome: "not_found" };
export type AttemptUsageResult = {
  outcome: "recorded" | "already_recorded" | "no_such_attempt" | "not_found";
};
/** What one model attempt consumed, as the event history stores it. */
export interface AttemptUsage {
  prompt_tokens: number;
  completion_tokens: number;
  /** `provider`: the provider's own count; `counted`: the stream was cut, counted by us. */
  source: "provider" | "counted";
  /** Of the prompt tokens, those served from the provider's cache (priced lower). */
  cached_tokens?: number;
  /** The tier the provider says served the call (a money plan prices it at that tier). */
  service_tier?: string;
}
export type CancelResult =
  | { outcome: "canceled"; refunded: boolean; job: JobRow }
  | { outcome: "already_finished"; job: JobRow }
  | { outcome: "not_found" };
export interface SweptJob {
  id: string;
  user_id: string;
  reason: FailureReason;
  from_status: JobStatus;
}
export type SweepResult = {
  outcome: "swept";
  failed: SweptJob[];
  republish: JobRow[];
  more: boolean;
};
export type GetResult = { outcome: "found"; job: JobRow } | { outcome: "not_found" };
export type ListResult = { outcome: "listed"; jobs: JobRow[]; has_more: boolean };
export type UsageResult = { outcome: "usage"; usage: UsageRow };
/** What `erase_user` did: jobs deleted (canceled first when active), events deleted. */
export type EraseResult = {
  outcome: "erased";
  jobs: number;
  canceled: number;
  events: number;
  /** Whether this call deleted the auth.users row (false: already gone). */
  account_deleted: boolean;
};
/** A job as the export shows it: every column but the prompt hash, with its events. */
export type ExportedJob = JobRow & { events: Record<string, unknown>[] };
export type ExportPage = {
  outcome: "exported";
  jobs: ExportedJob[];
  has_more: boolean;
  /** First page only: the user_plans row (null: no row, on the default plan). */
  plan?: Record<string, unknown> | null;
  /** First page only: the quota_usage rows, every period and meter. */
  usage?: Record<string, unknown>[];
  /** First page only: the pseudonym log lines name the user by (null: none named them yet). */
  log_pseudonym?: string | null;
};

export interface SweepOptions {
  batchSize: number;
  leaseGraceSeconds: number;
  undeliveredAfterSeconds: number;
  maxAgeSeconds: number;
  maxRepublish?: number;
}

/** `now` is optional everywhere: production uses the database's clock; tests move it. */
const at = (now?: Date) => (now ? { p_now: now.toISOString() } : {});
const usageArg = (usage?: AttemptUsage | null) => (usage ? { p_usage: usage } : {});

/** How each group of calls reaches the database: one RPC, its result typed by the caller. */
type Call = <T>(fn: string, args: Record<string, unknown>) => Promise<T>;
type JobsOptions = { defaultModel?: string };

/**
 * A job's start and its ends: the enqueue, a failure (the worker's or the failure callback's),
 * a cancel, the sweep.
 */
function lifecycleCalls(call: Call, options: JobsOptions) {
  return {
    enqueue: (i: {
      userId: string;
      /** A document's prompt, another kind's text (the `prompt` column). */
      prompt: string;
      /** @default "document" */
      kind?: string;
      /** The whole input; a document's defaults to `{"prompt"}`. */
      input?: object;
      idempotencyKey?: string | null;
      /**
       * The bound of the model input's tokens (lib/kinds): a token plan holds it plus its output
       * bound. Required for every kind but a document (the database bounds a prompt itself).
       */
      promptTokens?: number;
      /** The organization whose pool holds it; null or absent: the user's own plan. */
      organizationId?: string | null;
      now?: Date;
    }) =>
      call<EnqueueResult>("enqueue_job", {
        p_user_id: i.userId,
        p_prompt: i.prompt,
        p_idempotency_key: i.idempotencyKey ?? null,
        ...(i.promptTokens === undefined ? {} : { p_prompt_tokens: i.promptTokens }),
        ...(i.kind === undefined ? {} : { p_kind: i.kind }),
        ...(i.input === undefined ? {} : { p_input: i.input }),
        ...(options.defaultModel === undefined ? {} : { p_model: options.defaultModel }),
        // Sent only for an organization's job: a personal call is the call it always was.
        ...(i.organizationId == null ? {} : { p_organization_id: i.organizationId }),
        ...at(i.now),
      }),
    fail: (
      jobId: string,
      i: {
        reason: FailureReason;
        error?: string;
        attempt?: number;
        usage?: AttemptUsage | null;
        /**
         * The failure callback's message (its `publish_seq`): an older one than the job's is
         * `superseded`. Sent only when given, so callers without one call the same function.
         */
        seq?: number | null;
        now?: Date;
      },
    ) =>
      call<FailResult>("fail_job", {
        p_job_id: jobId,
        p_reason: i.reason,
        p_error: i.error ?? null,
        p_attempt: i.attempt ?? null,
        ...usageArg(i.usage),
        ...(i.seq == null ? {} : { p_seq: i.seq }),
        ...at(i.now),
      }),
    cancel: (jobId: string, userId: string, now?: Date) =>
      call<CancelResult>("cancel_job", { p_job_id: jobId, p_user_id: userId, ...at(now) }),
    sweep: (o: SweepOptions, now?: Date) =>
      call<SweepResult>("sweep_jobs", {
        p_batch_size: o.batchSize,
        p_lease_grace_seconds: o.leaseGraceSeconds,
        p_undelivered_after_seconds: o.undeliveredAfterSeconds,
        p_max_age_seconds: o.maxAgeSeconds,
        p_max_republish: o.maxRepublish ?? 1,
        ...at(now),
      }),
  };
}

/** The worker's calls on an attempt: start_job claims it, the others are guarded on that claim. */
function attemptCalls(call: Call) {
  return {
    start: (jobId: string, i: { leaseSeconds: number; now?: Date }) =>
      call<StartResult>("start_job", {
        p_job_id: jobId,
        p_lease_seconds: i.leaseSeconds,
        ...at(i.now),
      }),
    complete: (
      jobId: string,
      i: { attempt: number; output: string; usage?: AttemptUsage | null; now?: Date },
    ) =>
      call<CompleteResult>("complete_job", {
        p_job_id: jobId,
        p_attempt: i.attempt,
        p_output: i.output,
        ...usageArg(i.usage),
        ...at(i.now),
      }),
    /**
     * The running attempt's new text (after the `offset` characters stored) and its tokens so
     * far; `recorded` says how many characters are stored (send from there), `not_running`
     * means: stop the model now. Only what lies beyond what is stored is appended, so a retry
     * stores nothing twice (lib/partial-text.ts keeps the offset).
     */
    progress: (
      jobId: string,
      i: {
        attempt: number;
        offset: number;
        text: string;
        completionTokens: number;
        /** The prompt as the worker counts it (+ framing): lowers what a running cancel charges. */
        promptTokens?: number;
        /** Reasoning with no visible text yet; `reasoningTokens` are inside `completionTokens`. */
        thinking?: boolean;
        reasoningTokens?: number | null;
        now?: Date;
      },
    ) =>
      call<ProgressResult>("record_progress", {
        p_job_id: jobId,
        p_attempt: i.attempt,
        p_offset: i.offset,
        p_text: i.text,
        p_completion_tokens: i.completionTokens,
        ...(i.promptTokens === undefined ? {} : { p_prompt_tokens: i.promptTokens }),
        ...(i.thinking ? { p_thinking: true } : {}),
        ...(i.reasoningTokens == null ? {} : { p_reasoning_tokens: i.reasoningTokens }),
        ...at(i.now),
      }),
    /** The usage of an attempt whose own transition was refused (someone else ended the job). */
    recordUsage: (jobId: string, i: { attempt: number; usage: AttemptUsage; now?: Date }) =>
      call<AttemptUsageResult>("record_attempt_usage", {
        p_job_id: jobId,
        p_attempt: i.attempt,
        p_usage: i.usage,
        ...at(i.now),
      }),
    requeue: (
      jobId: string,
      i: {
        attempt: number;
        resumeAt: Date;
        error: string;
        maxHits: number;
        maxAgeSeconds: number;
        countHit: boolean;
        /** No flex capacity: wait without a hit; an age-out fails `capacity_unavailable`. */
        capacity?: boolean;
        usage?: AttemptUsage | null;
        now?: Date;
      },
    ) =>
      call<RequeueResult>("requeue_job", {
        p_job_id: jobId,
        p_attempt: i.attempt,
        p_resume_at: i.resumeAt.toISOString(),
        p_error: i.error,
        p_max_hits: i.maxHits,
        p_max_age_seconds: i.maxAgeSeconds,
        p_count_hit: i.countHit,
        ...(i.capacity ? { p_capacity: true } : {}),
        ...usageArg(i.usage),
        ...at(i.now),
      }),
    release: (
      jobId: string,
      i: { attempt: number; error: string; usage?: AttemptUsage | null; now?: Date },
    ) =>
      call<ReleaseResult>("release_job", {
        p_job_id: jobId,
        p_attempt: i.attempt,
        p_error: i.error,
        ...usageArg(i.usage),
        ...at(i.now),
      }),
  };
}

/** Reads, retention, a user's erasure and export, and the models the plans run on. */
function accountCalls(call: Call, options: JobsOptions) {
  return {
    get: (jobId: string, userId: string) =>
      call<GetResult>("get_job", { p_job_id: jobId, p_user_id: userId }),
    list: (userId: string, i: { limit: number; before?: { createdAt: string; id: string } }) =>
      call<ListResult>("list_jobs", {
        p_user_id: userId,
        p_limit: i.limit,
        p_before_created_at: i.before?.createdAt ?? null,
        p_before_id: i.before?.id ?? null,
      }),
    usage: (userId: string, now?: Date) =>
      call<UsageResult>("get_usage", { p_user_id: userId, ...at(now) }),
    /** Retention, one batch: erases the text of at most `limit` jobs finished before `before`. */
    retentionBatch: (before: Date, limit: number) =>
      call<{ outcome: "erased"; erased: number }>("retention_run", {
        p_before: before.toISOString(),
        p_limit: limit,
      }),
    /** A user's erasure: active jobs canceled, every row about them and their account gone. */
    erase: (userId: string, now?: Date) =>
      call<EraseResult>("erase_user", { p_user_id: userId, ...at(now) }),
    /** The user's log pseudonym, made on first use; user_not_found without an account. */
    pseudonym: (userId: string) =>
      call<{ outcome: "pseudonym"; pseudonym: string } | { outcome: "user_not_found" }>(
        "user_pseudonym",
        { p_user_id: userId },
      ),
    /** One page of a user's export, oldest job first (the first page also has plan and usage). */
    exportPage: (userId: string, i: { limit: number; after?: { createdAt: string; id: string } }) =>
      call<ExportPage>("export_user", {
        p_user_id: userId,
        p_limit: i.limit,
        p_after_created_at: i.after?.createdAt ?? null,
        p_after_id: i.after?.id ?? null,
      }),
    /** Every model a plan runs on (the default model for plans naming none), with its plans. */
    watchedModels: async () =>
      (
        await call<{ outcome: "listed"; models: WatchedModel[] }>("watched_models", {
          ...(options.defaultModel === undefined ? {} : { p_default_model: options.defaultModel }),
        })
      ).models,
    /** What the provider's catalogue says of a priced model: its shutdown date, or none. */
    recordCatalogue: (model: string, shutdownDate: string | null, now?: Date) =>
      call<{ outcome: "recorded"; changed: boolean } | { outcome: "not_priced" }>(
        "record_model_catalogue",
        { p_model: model, p_shutdown_date: shutdownDate, ...at(now) },
      ),
  };
}

/**
 * @example
 * const jobs = createJobs(createRpc({ url, serverKey }));
 * const claim = await jobs.start(jobId, { leaseSeconds: 90 });
 * if (claim.outcome !== "started") return; // someone else owns this job's fate
 */
export function createJobs(
  rpc: Rpc,
  /** The deployment's model (OPENAI_MODEL): what a plan naming none runs on. */
  options: JobsOptions = {},
) {
  const call = <T>(fn: string, args: Record<string, unknown>) => rpc(fn, args) as Promise<T>;
  return {
    ...lifecycleCalls(call, options),
    ...attemptCalls(call),
    ...accountCalls(call, options),
  };
}
export type Jobs = ReturnType<typeof createJobs>;

/** A model a plan runs on (public.watched_models). */
export interface WatchedModel {
  model: string;
  plans: string[];
  /** Whether the price book (public.models) has it. */
  priced: boolean;
  /** The shutdown date last read from the provider (YYYY-MM-DD), or null. */
  shutdown_date: string | null;
  checked_at: string | null;
}
