/**
 * The job state machine as one machine-readable table: for each SQL transition function, which
 * abstract state (and which caller arguments) leads to which outcome, new state and effect on
 * the user's quota counter. The Promela transitions are generated from it (spec/promela.ts)
 * and test/spec/conformance.test.ts checks every row against the real functions, so the model
 * and the SQL cannot drift apart silently.
 *
 * Rows of one function are tried in order; the first whose `when` matches applies (the SQL
 * functions are if/elsif chains too). `otherwise` matches whatever the earlier rows did not.
 */

export type Status = "none" | "queued" | "running" | "succeeded" | "failed" | "canceled";
export type Reason =
  | "model_refused"
  | "delivery_failed"
  | "publish_failed"
  | "provider_quota_exhausted"
  | "lease_expired"
  | "max_age_exceeded"
  | "never_delivered"
  /** The operator's fault (a revoked key, a region, an unknown model): never bounded. */
  | "provider_misconfigured"
  /** A flex job waited for capacity (429 resource unavailable) past its max age. */
  | "capacity_unavailable"
  /** A metered job whose next attempt could take its spend past twice its hold. */
  | "attempt_budget_exhausted";

/**
 * A metered plan (tokens or money: the same rules in other units, `private.attempt_cost`) is
 * modeled in quarters of the job's hold, so its sums stay small and exact: the hold is 4, a
 * running attempt as SQL knows it (its prompt and last progress write) costs 1, or the whole hold
 * when the model reasons (hidden reasoning cut short is billed, never reported), and a worker's
 * report costs what its call says (`reportCost`). test/spec/conformance.test.ts builds each
 * quarter as a concrete amount of tokens and of micro-dollars.
 */
export const HOLD = 4;
export const PROGRESS_COST = 1;
/** The provider's usage a completing worker reports. */
export const COMPLETE_COST = 2;
/** A released attempt's usage when it streamed (a timeout after streaming: our own count). */
export const RELEASE_COST = 2;

/** What the running attempt cost as SQL knows it, when someone other than its worker ends it. */
export function runningCost(f: Pick<Facts, "status" | "reasons">): number {
  if (f.status !== "running") return 0;
  return f.reasons ? HOLD : PROGRESS_COST;
}

/** What the worker's own report of its attempt costs, per function. */
export function reportCost(fn: FnName, f: Pick<Facts, "reasons">, args: Pick<Args, "spent">) {
  if (fn === "complete_job") return COMPLETE_COST;
  // A count of ours, not the provider's: for a reasoning model, the attempt's bound.
  if (fn === "release_job") return args.spent ? (f.reasons ? HOLD : RELEASE_COST) : 0;
  // fail_job and requeue_job: a 400, a 401 or a 429 billed nothing.
  return 0;
}

/**
 * What a guard may look at. Time is abstracted into the facts the SQL compares against `now`:
 * the lease (still valid, expired, expired for longer than the sweeper's grace), the resume
 * time (still ahead or reached), "undelivered" (queued or resumed longer ago than the sweeper's
 * threshold) and "aged" (older than the max job age).
 */
export interface Facts {
  status: Status;
  /** Running jobs only. */
  lease: "live" | "expired" | "past_grace" | "none";
  /** Queued jobs only. */
  resume: "ready" | "waiting" | "none";
  /** Queued and ready only. */
  undelivered: boolean;
  aged: boolean;
  /** The next counted provider quota hit reaches the give-up limit. */
  lastHit: boolean;
  /** The sweeper already republished the job as often as it may. */
  republished: boolean;
  /**
   * The user's refunds after provider spend of the job's period (running cancels, and failures
   * or queued cancels after a consumed attempt: one shared counter) are under the plan's bound,
   * so an ending after spend would refund. Varied for active jobs; true elsewhere.
   */
  cancelRefundLeft: boolean;
  /**
   * The job's earlier attempts consumed provider tokens (`consumed > 0`: a released attempt's
   * usage, a reclaimed attempt's prompt and progress). Varied for active jobs; false elsewhere.
   */
  paid: boolean;
  /** The plan's meter: a job plan, or a metered one (tokens or money). */
  meter: "jobs" | "metered";
  /** Metered: the job's model reasons. False elsewhere. */
  reasons: boolean;
  /**
   * Metered: what the job's earlier attempts consumed, in quarters of the hold (an active job
   * never has more than its hold: the attempt budget). `paid` is `consumed > 0`. 0 elsewhere.
   */
  consumed: 0 | 2 | 4;
}

/** The caller's arguments a guard may look at. */
export interface Args {
  /** The attempt the caller names: the job's current claim, an older one, or none at all. */
  claim: "current" | "stale" | "none";
  /** requeue_job: the provider refused (counts a hit) rather than the shared gate being closed. */
  countHit: boolean;
  /** requeue_job: the requested resume time lies past the job's max-age deadline. */
  beyondDeadline: boolean;
  /**
   * requeue_job: the flex tier had no capacity (429 resource unavailable): never a hit, whatever
   * countHit says; an age-out fails `capacity_unavailable`.
   */
  capacity: boolean;
  /**
   * fail_job: the failure callback's message (`p_seq`, the job's publish_seq when the message
   * was published) is the job's current one, an older one (a requeue or a republish published
   * a newer message since), or not given (the worker, the enqueue's publish failure, and a
   * message published before messages carried their seq).
   */
  message: "current" | "older" | "none";
  /** release_job: the released attempt's usage has tokens (a timeout after streaming), or none. */
  spent: boolean;
  /** fail_job: the reason is the operator's fault (`provider_misconfigured`) or not. */
  fault: "user" | "operator";
}

/**
 * Facts a guard may test that follow from the facts and the arguments: the attempt budget of a
 * metered plan (no attempt starts that could take the job's spend past twice its hold).
 */
export interface Derived {
  /** start_job: consumed, plus the running attempt it reclaims, leaves room for a whole hold. */
  claimFits: boolean;
  /** release_job: consumed plus the released attempt leaves room for a whole hold. */
  releaseFits: boolean;
}

export function derived(f: Facts, args: Args): Derived {
  return {
    claimFits: f.consumed + runningCost(f) + HOLD <= 2 * HOLD,
    releaseFits: f.consumed + reportCost("release_job", f, args) + HOLD <= 2 * HOLD,
  };
}

export type FactName = keyof Facts;
export type ArgName = keyof Args;
export type DerivedName = keyof Derived;
export type When = { [K in FactName]?: Facts[K][] } & { [K in ArgName]?: Args[K][] } & {
  [K in DerivedName]?: Derived[K][];
};

/** Whose count prices the attempt a metered call ends or releases. */
export type Own =
  /** The running attempt as SQL knows it (`private.running_cost`); nothing for a queued job. */
  | "running"
  /** The worker's own report (`reportCost`). */
  | "report"
  /** The running attempt's prompt and progress, as if no model reasoned (a mutant's). */
  | "counted";

export interface Effect {
  status?: Status;
  /** `"$reason"`: the reason the caller passed (fail_job). */
  reason?: Reason | "$reason";
  /** attempts + 1 and a fresh lease (a claim). */
  claim?: true;
  /** Queued again: resume time ahead (a requeue) or not. */
  resume?: "ready" | "waiting";
  /** queued_at = now: the undelivered clock starts again. */
  requeuedNow?: true;
  /** provider_quota_hits + 1. */
  hit?: true;
  /** publish_seq + 1: a new message stands for the job. */
  newMessage?: true;
  /** republish_count + 1. */
  republish?: true;
  /** The quota counter: +1 reserves, -1 refunds. */
  counter: -1 | 0 | 1;
  /** Ended with the unit kept spent (refund_withheld): past the bound of refunds after spend. */
  withheld?: true;
  /** A refund after spend: counted in the period's bound (paid_refunds + 1). */
  counted?: true;
  /** The job's attempts now have consumed provider tokens (`consumed` grows). */
  spend?: true;
  /**
   * A job plan's ending: what the job keeps of its hold (docs/DESIGN.md#metering-hold-and-capture).
   * The hold is 1, so 1 kept or 0 released, and the counter moves by captured − 1. A metered
   * ending says `capture` instead.
   */
  captured?: 0 | 1;
  /**
   * A metered ending: it captures `least(hold, consumed + own)` (`spend`) or nothing (`nothing`:
   * the operator's fault), and the counter moves by captured − hold. On a metered plan `counter`
   * +1 reserves a whole hold.
   */
  capture?: "spend" | "nothing";
  /** Metered: what prices the ending or released attempt (`capture`, `spend`). */
  own?: Own;
}

export interface Row {
  when: When | "otherwise";
  outcome: string;
  to: Effect;
}

export interface Fn {
  /** The arguments this function takes (the others are fixed at "none"/false). */
  args: ArgName[];
  /** The attempts a caller may name, when the function takes one. */
  claims?: Args["claim"][];
  /** The messages a caller may name, when the function takes one. */
  messages?: Args["message"][];
  /** The faults a caller may name, when the function takes a reason. */
  faults?: Args["fault"][];
  rows: Row[];
}

const active: Status[] = ["queued", "running"];
const final: Status[] = ["succeeded", "failed", "canceled"];
const nothing: Effect = { counter: 0 };

/**
 * An ending that gives the unit back (docs/DESIGN.md#metering-hold-and-capture), as rows in order:
 * on a metered plan it captures what was spent (priced by `own`); on a job plan, where the ending is after provider spend (`paid`: each a When that says so), past the bound
 * the unit is kept (withheld), under it the refund is counted; elsewhere it refunds freely.
 */
function refunding(
  when: When,
  to: Omit<Effect, "counter">,
  paid: When[],
  own: Own = "running",
): Row[] {
  return [
    // A metered plan pays what the job consumed, up to its hold: no bound, nothing withheld.
    {
      when: { ...when, meter: ["metered"] },
      outcome: "",
      to: { ...to, counter: 0 as const, capture: "spend" as const, own },
    },
    ...paid.map((p) => ({
      when: { ...when, ...p, cancelRefundLeft: [false] },
      outcome: "",
      to: { ...to, withheld: true as const, counter: 0 as const, captured: 1 as const },
    })),
    ...paid.map((p) => ({
      when: { ...when, ...p },
      outcome: "",
      to: { ...to, counted: true as const, counter: -1 as const, captured: 0 as const },
    })),
    { when, outcome: "", to: { ...to, counter: -1 as const, captured: 0 as const } },
  ];
}

/** Metered: an attempt the job's budget cannot cover ends it, capturing what it spent. */
const budgetExhausted = (own: Own): Effect => ({
  status: "failed",
  reason: "attempt_budget_exhausted",
  counter: 0,
  capture: "spend",
  own,
});
const outcome = (name: string, rows: Row[]): Row[] => rows.map((r) => ({ ...r, outcome: name }));

/** After spend: the job's earlier attempts consumed. */
const consumedBefore: When = { paid: [true] };
/** After spend: a running attempt someone else ends (SQL counts its prompt and progress). */
const runningAttempt: When = { status: ["running"] };

/**
 * The worker gives up on the job for `reason` in each of `whens`: it fails, refunded by the same
 * rule as any ending (the attempt that gave up billed nothing: after spend only if earlier ones
 * did), priced by the worker's report.
 */
const gaveUp = (reason: Reason, whens: When[]): Row[] =>
  outcome(
    "gave_up",
    whens.flatMap((when) =>
      refunding(when, { status: "failed", reason }, [consumedBefore], "report"),
    ),
  );

export type FnName =
  | "enqueue_job"
  | "start_job"
  | "complete_job"
  | "requeue_job"
  | "release_job"
  | "fail_job"
  | "cancel_job"
  | "sweep_jobs"
  | "record_progress";

export const transitions: Record<FnName, Fn> = {
  enqueue_job: {
    args: [],
    rows: [
      {
        when: { status: ["none"] },
        outcome: "enqueued",
        to: { status: "queued", resume: "ready", counter: 1 },
      },
    ],
  },
  start_job: {
    args: [],
    rows: [
      { when: { status: final }, outcome: "already_final", to: nothing },
      { when: { status: ["queued"], resume: ["waiting"] }, outcome: "not_ready", to: nothing },
      { when: { status: ["running"], lease: ["live"] }, outcome: "already_running", to: nothing },
      // Metered: no attempt starts that could take the job's spend past twice its hold. A
      // reclaim's dead attempt counts first (a reasoning model's: its whole hold).
      {
        when: { meter: ["metered"], claimFits: [false] },
        outcome: "budget_exhausted",
        to: budgetExhausted("running"),
      },
      // A reclaim: the dead attempt's prompt and progress go into consumed.
      {
        when: { status: ["running"] },
        outcome: "started",
        to: { status: "running", claim: true, spend: true, own: "running", counter: 0 },
      },
      {
        when: { status: ["queued"] },
        outcome: "started",
        to: { status: "running", claim: true, counter: 0 },
      },
    ],
  },
  complete_job: {
    args: ["claim"],
    claims: ["current", "stale"],
    rows: [
      // Metered: what the provider reported, with what earlier attempts consumed, up to the hold.
      {
        when: { status: ["running"], claim: ["current"], meter: ["metered"] },
        outcome: "completed",
        to: { status: "succeeded", counter: 0, capture: "spend", own: "report" },
      },
      {
        when: { status: ["running"], claim: ["current"] },
        outcome: "completed",
        to: { status: "succeeded", counter: 0, captured: 1 },
      },
      { when: "otherwise", outcome: "not_running", to: nothing },
    ],
  },
  requeue_job: {
    args: ["claim", "countHit", "beyondDeadline", "capacity"],
    claims: ["current", "stale"],
    rows: [
      // No flex capacity until the max age: a reason of its own, refunded by the same rule (the
      // 429 billed nothing: after spend only if earlier attempts consumed).
      ...gaveUp("capacity_unavailable", [
        { status: ["running"], claim: ["current"], capacity: [true], aged: [true] } as When,
        {
          status: ["running"],
          claim: ["current"],
          capacity: [true],
          beyondDeadline: [true],
        } as When,
      ]),
      // The attempt that gives up hit a 429 (bills nothing): after spend only if earlier ones did.
      ...gaveUp("provider_quota_exhausted", [
        {
          status: ["running"],
          claim: ["current"],
          countHit: [true],
          capacity: [false],
          lastHit: [true],
        } as When,
        { status: ["running"], claim: ["current"], aged: [true] } as When,
        { status: ["running"], claim: ["current"], beyondDeadline: [true] } as When,
      ]),
      {
        when: { status: ["running"], claim: ["current"], countHit: [true], capacity: [false] },
        outcome: "requeued",
        to: {
          status: "queued",
          resume: "waiting",
          requeuedNow: true,
          hit: true,
          newMessage: true,
          counter: 0,
        },
      },
      // The closed gate's wait, and a wait for flex capacity: no hit counted.
      {
        when: { status: ["running"], claim: ["current"] },
        outcome: "requeued",
        to: {
          status: "queued",
          resume: "waiting",
          requeuedNow: true,
          newMessage: true,
          counter: 0,
        },
      },
      { when: "otherwise", outcome: "not_running", to: nothing },
    ],
  },
  release_job: {
    args: ["claim", "spent"],
    claims: ["current", "stale"],
    rows: [
      // Metered: a released attempt that leaves no room for a whole hold ends the job.
      {
        when: { status: ["running"], claim: ["current"], meter: ["metered"], releaseFits: [false] },
        outcome: "budget_exhausted",
        to: budgetExhausted("report"),
      },
      {
        when: { status: ["running"], claim: ["current"], spent: [true] },
        outcome: "released",
        to: {
          status: "queued",
          resume: "ready",
          requeuedNow: true,
          spend: true,
          own: "report",
          counter: 0,
        },
      },
      {
        when: { status: ["running"], claim: ["current"] },
        outcome: "released",
        to: { status: "queued", resume: "ready", requeuedNow: true, counter: 0 },
      },
      { when: "otherwise", outcome: "not_running", to: nothing },
    ],
  },
  fail_job: {
    args: ["claim", "message", "fault"],
    // The worker names its claim; the failure callback and the enqueue's publish failure do not.
    claims: ["current", "stale", "none"],
    // The failure callback names its message; the others (and an old deploy's message) do not.
    messages: ["none", "current", "older"],
    // The worker may end a job for the operator's fault; nothing bounds those refunds.
    faults: ["user", "operator"],
    rows: [
      { when: { status: final }, outcome: "already_final", to: nothing },
      // A superseded message's callback: a newer message (or the lease, or the sweeper) decides.
      { when: { message: ["older"] }, outcome: "superseded", to: nothing },
      {
        when: { status: ["queued"], claim: ["current", "stale"] },
        outcome: "not_running",
        to: nothing,
      },
      { when: { status: ["running"], claim: ["stale"] }, outcome: "not_running", to: nothing },
      {
        when: { fault: ["operator"], meter: ["metered"] },
        outcome: "failed",
        to: { status: "failed", reason: "$reason", counter: 0, capture: "nothing" },
      },
      {
        when: { fault: ["operator"] },
        outcome: "failed",
        to: { status: "failed", reason: "$reason", counter: -1, captured: 0 },
      },
      // The worker's own failure reports its attempt's usage (a 400: nothing); the failure
      // callback's failure of a running job ends an attempt SQL knows only from its progress.
      {
        when: { claim: ["current"], meter: ["metered"] },
        outcome: "failed",
        to: { status: "failed", reason: "$reason", counter: 0, capture: "spend", own: "report" },
      },
      ...outcome(
        "failed",
        refunding({}, { status: "failed", reason: "$reason" }, [
          { status: ["running"], claim: ["none"] },
          consumedBefore,
        ]),
      ),
    ],
  },
  cancel_job: {
    args: [],
    rows: [
      { when: { status: final }, outcome: "already_finished", to: nothing },
      // A running job's model call is paid for, and so are a queued job's consumed attempts:
      // their refund is bounded by the plan.
      ...outcome(
        "canceled",
        refunding({}, { status: "canceled" }, [runningAttempt, consumedBefore]),
      ),
    ],
  },
  sweep_jobs: {
    args: [],
    rows: [
      ...outcome(
        "failed",
        refunding(
          { status: active, aged: [true] },
          { status: "failed", reason: "max_age_exceeded" },
          [runningAttempt, consumedBefore],
        ),
      ),
      // Always a running attempt someone else ends: always after spend.
      {
        when: { status: ["running"], lease: ["past_grace"], meter: ["metered"] },
        outcome: "failed",
        to: {
          status: "failed",
          reason: "lease_expired",
          counter: 0,
          capture: "spend",
          own: "running",
        },
      },
      {
        when: { status: ["running"], lease: ["past_grace"], cancelRefundLeft: [false] },
        outcome: "failed",
        to: { status: "failed", reason: "lease_expired", withheld: true, counter: 0, captured: 1 },
      },
      {
        when: { status: ["running"], lease: ["past_grace"] },
        outcome: "failed",
        to: { status: "failed", reason: "lease_expired", counted: true, counter: -1, captured: 0 },
      },
      {
        when: { status: ["queued"], resume: ["ready"], undelivered: [true], republished: [false] },
        outcome: "republish",
        to: { resume: "ready", requeuedNow: true, newMessage: true, republish: true, counter: 0 },
      },
      ...outcome(
        "failed",
        refunding(
          { status: ["queued"], resume: ["ready"], undelivered: [true] },
          { status: "failed", reason: "never_delivered" },
          [consumedBefore],
        ),
      ),
      { when: "otherwise", outcome: "untouched", to: nothing },
    ],
  },
  /**
   * Not a transition: the streaming worker's progress write. It changes no state the model
   * sees; its outcome tells the worker whether the job is still its own (not_running: cut the
   * stream and leave the job to whoever ended or reclaimed it).
   */
  record_progress: {
    args: ["claim"],
    claims: ["current", "stale"],
    rows: [
      { when: { status: ["running"], claim: ["current"] }, outcome: "recorded", to: nothing },
      { when: "otherwise", outcome: "not_running", to: nothing },
    ],
  },
};

export type Table = Record<FnName, Fn>;

/** Every state of an existing job the facts can describe (the impossible combinations left out). */
export function allFacts(): Facts[] {
  const out: Facts[] = [];
  const statuses: Status[] = ["queued", "running", "succeeded", "failed", "canceled"];
  for (const status of statuses) {
    const shapes: Pick<Facts, "lease" | "resume" | "undelivered">[] =
      status === "running"
        ? (["live", "expired", "past_grace"] as const).map((lease) => ({
            lease,
            resume: "none",
            undelivered: false,
          }))
        : status === "queued"
          ? [
              { lease: "none", resume: "waiting", undelivered: false },
              { lease: "none", resume: "ready", undelivered: false },
              { lease: "none", resume: "ready", undelivered: true },
            ]
          : [{ lease: "none", resume: "none", undelivered: false }];
    const active = status === "running" || status === "queued";
    // A job plan: the period's bound of refunds after spend, and whether anything was spent.
    const jobs = (active ? [true, false] : [true]).flatMap((cancelRefundLeft) =>
      (active ? [false, true] : [false]).map((paid) => ({
        meter: "jobs" as const,
        reasons: false,
        consumed: 0 as const,
        cancelRefundLeft,
        paid,
      })),
    );
    // A metered plan: no bound of refunds; how much was spent, and (for a running attempt
    // someone else ends) whether the model reasons.
    const metered = (active ? ([0, 2, 4] as const) : ([0] as const)).flatMap((consumed) =>
      (status === "running" ? [false, true] : [false]).map((reasons) => ({
        meter: "metered" as const,
        reasons,
        consumed,
        cancelRefundLeft: true,
        paid: consumed > 0,
      })),
    );
    for (const shape of shapes)
      for (const aged of [false, true])
        for (const lastHit of [false, true])
          for (const republished of [false, true])
            for (const plan of [...jobs, ...metered])
              out.push({ status, ...shape, aged, lastHit, republished, ...plan });
  }
  return out;
}

/** Every argument combination a function can be called with. */
export function allArgs(fn: Fn, facts: Facts): Args[] {
  const claims: Args["claim"][] = fn.claims ?? ["none"];
  const messages: Args["message"][] = fn.messages ?? ["none"];
  const faults: Args["fault"][] = fn.faults ?? ["user"];
  const bools = (name: ArgName) => (fn.args.includes(name) ? [false, true] : [false]);
  const out: Args[] = [];
  for (const claim of claims)
    for (const message of messages)
      for (const countHit of bools("countHit"))
        for (const beyondDeadline of bools("beyondDeadline"))
          for (const capacity of bools("capacity"))
            for (const spent of bools("spent"))
              for (const fault of faults) {
                // Past the max age every resume time lies past the deadline.
                if (facts.aged && fn.args.includes("beyondDeadline") && !beyondDeadline) continue;
                out.push({ claim, message, countHit, beyondDeadline, capacity, spent, fault });
              }
  return out;
}

export function matches(when: When, facts: Facts, args: Args): boolean {
  for (const [name, allowed] of Object.entries(when) as [string, unknown[]][]) {
    const value =
      name in facts
        ? facts[name as FactName]
        : name in args
          ? args[name as ArgName]
          : derived(facts, args)[name as DerivedName];
    if (!allowed.includes(value)) return false;
  }
  return true;
}

/** The row that applies (first match), or undefined when none does. */
export function rowFor(fn: Fn, facts: Facts, args: Args): Row | undefined {
  return fn.rows.find((r) => r.when === "otherwise" || matches(r.when, facts, args));
}
