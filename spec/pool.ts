/**
 * An organization's pool as a machine-readable table: what enqueue_job's read refuses, what its
 * one reserving statement (`private.enqueue_in_organization`) accepts on the locked rows, and how
 * each ending that matters for money settles a job's hold on the pool and the member's row. The
 * pool model's Promela is generated from it (spec/pool-promela.ts, included by spec/pool.pml) and
 * test/spec/pool-conformance.test.ts holds every row to the real SQL on real rows.
 *
 * The job's own state machine (leases, messages, reclaims, the amounts a metered ending
 * captures) is spec/transitions.ts's and the one-job model's; here a job is its status, and an
 * ending's capture is any amount the ending's rule allows, so the table says only what the
 * pool's invariants rest on: which call settles a hold, once, and which counters it gives back.
 *
 * Rows of one function are tried in order; the first whose `when` matches applies, `otherwise`
 * matches what the earlier rows did not (as in spec/transitions.ts).
 */
import type { Status } from "./transitions.ts";

/**
 * What a guard may look at. The enqueue's three facts are the plan's limits against counters:
 * enqueue_job reads them once (its one select, under the user's lock), the reserving statement
 * reads them again on the rows it locks, which another member's enqueue may have changed since.
 */
export interface PoolFacts {
  /** The job's status; `none` before the enqueue's insert. */
  status: Status;
  /** The pool's units_used + the hold fits the organization's plan's units_per_period. */
  poolFits: boolean;
  /** The member has no cap, or their units_used + the hold fits it. */
  capFits: boolean;
  /** The member's active jobs in the organization are under the plan's max_active_jobs. */
  activeLeft: boolean;
  /** The organization's plan's meter: a job plan, or a metered one (tokens or money). */
  meter: "jobs" | "metered";
  /**
   * A job plan: the ending is after provider spend (earlier attempts consumed, or someone else
   * ends a running attempt, or the user cancels a running job), so its refund counts against the
   * organization's bound, on the pool. `afterSpend` says when the SQL takes it so.
   */
  spent: boolean;
  /** The pool's paid_refunds are under the organization's plan's bound (private.refund_bound). */
  refundLeft: boolean;
  /** The sweeper's rule applies (past the max age, a lease past the grace, never delivered). */
  due: boolean;
}

/** The caller's arguments a guard may look at. */
export interface PoolArgs {
  /** The attempt the caller names: the job's current claim, an older one, or none. */
  claim: "current" | "stale" | "none";
  /** fail_job: the failure callback's message, against the job's publish_seq (or none given). */
  message: "current" | "older" | "none";
}

export type PoolFactName = keyof PoolFacts;
export type PoolArgName = keyof PoolArgs;
export type PoolWhen = { [K in PoolFactName]?: PoolFacts[K][] } & {
  [K in PoolArgName]?: PoolArgs[K][];
};

/**
 * How an ending settles the job's hold: it captures an amount and gives the rest (hold −
 * captured) back to each counter in `release`.
 */
export type Settle =
  /** The whole hold kept (a job plan's completion). */
  | "kept"
  /** What the job spent, up to the hold (a metered ending): any amount from 0 to the hold. */
  | "spend"
  /** Nothing kept: the whole hold back. */
  | "refund"
  /** Nothing kept, and the refund counted on the pool's paid_refunds (after spend). */
  | "counted"
  /** The whole hold kept: past the bound of refunds after spend (refund_withheld). */
  | "withheld";

export type Counter = "pool" | "member";

export interface PoolEffect {
  status?: Status;
  /** The hold reserved on the pool and on the member's row (the job inserted, queued). */
  reserve?: true;
  settle?: Settle;
  /** The counters a settle gives hold − captured back to, in the SQL's order. */
  release?: Counter[];
}

export interface PoolRow {
  when: PoolWhen | "otherwise";
  outcome: string;
  to: PoolEffect;
}

export interface PoolFn {
  /** The facts this function's guards read (the others are fixed for its cases). */
  facts: PoolFactName[];
  /** The attempts a caller may name. */
  claims?: PoolArgs["claim"][];
  /** The messages a caller may name. */
  messages?: PoolArgs["message"][];
  rows: PoolRow[];
}

export type PoolFnName =
  | "enqueue_job"
  | "enqueue_in_organization"
  | "start_job"
  | "complete_job"
  | "fail_job"
  | "cancel_job"
  | "sweep_jobs";

export type PoolTable = Record<PoolFnName, PoolFn>;

const active: Status[] = ["queued", "running"];
const final: Status[] = ["succeeded", "failed", "canceled"];
/** Both counters, pool first: the lock order (the pool row, then the member row). */
const both: Counter[] = ["pool", "member"];

/**
 * private.end_with_refund's rule, as rows: a metered plan captures what was spent; a job plan's
 * refund after spend is counted on the pool while its bound lasts and withheld past it; any other
 * refund is free. Each gives back, on both counters, what it does not keep.
 */
function refunding(when: PoolWhen, status: Status, outcome: string): PoolRow[] {
  const to = (settle: Settle): PoolEffect => ({ status, settle, release: both });
  return [
    { when: { ...when, meter: ["metered"] }, outcome, to: to("spend") },
    { when: { ...when, spent: [true], refundLeft: [false] }, outcome, to: to("withheld") },
    { when: { ...when, spent: [true] }, outcome, to: to("counted") },
    { when, outcome, to: to("refund") },
  ];
}

export const poolTransitions: PoolTable = {
  /**
   * enqueue_job's checks on its one read (under the user's advisory lock): a refusal holds
   * nothing; `reserve` goes on to the reserving statement, whose outcome is the call's.
   */
  enqueue_job: {
    facts: ["poolFits", "capFits", "activeLeft"],
    rows: [
      { when: { poolFits: [false] }, outcome: "pool_exhausted", to: {} },
      { when: { capFits: [false] }, outcome: "member_cap_reached", to: {} },
      { when: { activeLeft: [false] }, outcome: "too_many_active_jobs", to: {} },
      { when: "otherwise", outcome: "reserve", to: {} },
    ],
  },
  /**
   * private.enqueue_in_organization: one statement, the pool row's guarded upsert, then the
   * member row's, then the job. Its facts are the rows as it locks them.
   */
  enqueue_in_organization: {
    facts: ["poolFits", "capFits"],
    rows: [
      // Another member took the room since the read: nothing held.
      { when: { poolFits: [false] }, outcome: "pool_exhausted", to: {} },
      // The member's guard after the pool's: the call raises, its transaction keeps nothing.
      // Unreachable under the user's lock (pool.pml asserts it).
      { when: { capFits: [false] }, outcome: "raised", to: {} },
      { when: "otherwise", outcome: "enqueued", to: { status: "queued", reserve: true } },
    ],
  },
  start_job: {
    facts: ["status"],
    rows: [
      { when: { status: final }, outcome: "already_final", to: {} },
      { when: { status: ["running"] }, outcome: "already_running", to: {} },
      { when: { status: ["queued"] }, outcome: "started", to: { status: "running" } },
    ],
  },
  complete_job: {
    facts: ["status", "meter"],
    claims: ["current", "stale"],
    rows: [
      // Metered: what the provider reported, with what earlier attempts consumed, up to the
      // hold; the rest goes back to the pool, then the member's row.
      {
        when: { status: ["running"], claim: ["current"], meter: ["metered"] },
        outcome: "completed",
        to: { status: "succeeded", settle: "spend", release: both },
      },
      {
        when: { status: ["running"], claim: ["current"] },
        outcome: "completed",
        to: { status: "succeeded", settle: "kept", release: both },
      },
      { when: "otherwise", outcome: "not_running", to: {} },
    ],
  },
  fail_job: {
    facts: ["status", "meter", "spent", "refundLeft"],
    // The worker names its claim; the failure callback names none, and its message.
    claims: ["current", "stale", "none"],
    messages: ["none", "current", "older"],
    rows: [
      // A repeated failure callback, or one after any other ending: nothing.
      { when: { status: final }, outcome: "already_final", to: {} },
      { when: { message: ["older"] }, outcome: "superseded", to: {} },
      {
        when: { status: ["queued"], claim: ["current", "stale"] },
        outcome: "not_running",
        to: {},
      },
      { when: { status: ["running"], claim: ["stale"] }, outcome: "not_running", to: {} },
      ...refunding({}, "failed", "failed"),
    ],
  },
  cancel_job: {
    facts: ["status", "meter", "spent", "refundLeft"],
    rows: [
      { when: { status: final }, outcome: "already_finished", to: {} },
      ...refunding({}, "canceled", "canceled"),
    ],
  },
  sweep_jobs: {
    facts: ["status", "meter", "spent", "refundLeft", "due"],
    rows: [
      ...refunding({ status: active, due: [true] }, "failed", "failed"),
      { when: "otherwise", outcome: "untouched", to: {} },
    ],
  },
};

/** The facts a case of `fn` fixes when its guards do not read them. */
const DEFAULT_FACTS: PoolFacts = {
  status: "none",
  poolFits: true,
  capFits: true,
  activeLeft: true,
  meter: "jobs",
  spent: false,
  refundLeft: true,
  due: false,
};

const VALUES: { [K in PoolFactName]: PoolFacts[K][] } = {
  status: ["queued", "running", "succeeded", "failed", "canceled"],
  poolFits: [false, true],
  capFits: [false, true],
  activeLeft: [false, true],
  meter: ["jobs", "metered"],
  spent: [false, true],
  refundLeft: [false, true],
  due: [false, true],
};

/** Every combination of the facts `fn` reads (the others at their defaults). */
export function allPoolFacts(fn: PoolFn): PoolFacts[] {
  let out: PoolFacts[] = [{ ...DEFAULT_FACTS }];
  for (const name of fn.facts) {
    const values = VALUES[name] as unknown[];
    out = out.flatMap((f) => values.map((v) => ({ ...f, [name]: v }) as PoolFacts));
  }
  return out;
}

/** Every argument combination a caller can pass to `fn`. */
export function allPoolArgs(fn: PoolFn): PoolArgs[] {
  return (fn.claims ?? ["none"]).flatMap((claim) =>
    (fn.messages ?? ["none"]).map((message) => ({ claim, message })),
  );
}

export function poolMatches(when: PoolWhen, facts: PoolFacts, args: PoolArgs): boolean {
  for (const [name, allowed] of Object.entries(when) as [string, unknown[]][]) {
    const value = name in facts ? facts[name as PoolFactName] : args[name as PoolArgName];
    if (!allowed.includes(value)) return false;
  }
  return true;
}

/** The row that applies (first match), or undefined when none does. */
export function poolRowFor(fn: PoolFn, facts: PoolFacts, args: PoolArgs): PoolRow | undefined {
  return fn.rows.find((r) => r.when === "otherwise" || poolMatches(r.when, facts, args));
}

/**
 * When the SQL takes a job plan's ending to be after provider spend (private.end_with_refund's
 * `v_paid`): the job's earlier attempts consumed, or the ending ends a running attempt it did not
 * run itself: a cancel (`p_running_cancel`), the sweeper or the failure callback (the attempt's
 * prompt and last progress write). A worker's own failure reports its attempt's usage, which for
 * the failures the pool model has (a 400, a 401) is nothing. The pool model lets each ending be
 * either; the conformance test builds the ones the SQL can reach.
 */
export function afterSpend(
  fn: PoolFnName,
  status: Status,
  consumed: boolean,
  args: PoolArgs,
): boolean {
  if (consumed) return true;
  if (status !== "running") return false;
  return fn === "cancel_job" || fn === "sweep_jobs" || (fn === "fail_job" && args.claim === "none");
}
