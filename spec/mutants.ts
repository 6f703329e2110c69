/**
 * Deliberately broken transition tables: each drops one guard the system's promise rests on.
 * The model checker must find a counterexample for every one of them (and none for the real
 * table), or the check proves nothing.
 */
import {
  type PoolFnName,
  type PoolRow,
  type PoolTable,
  poolTransitions,
  type Settle,
} from "./pool.ts";
import { type Fn, type Row, type Table, transitions } from "./transitions.ts";

export interface Mutant {
  describe: string;
  mode: "safety" | "liveness";
  table: Table;
  /** The plan the check runs the mutant on (spec/job.pml's METERED): a job plan by default. */
  flags?: string[];
}

function mutate(fn: keyof typeof transitions, change: (f: Fn) => Fn): Table {
  const table = structuredClone(transitions) as Table;
  const f = table[fn];
  if (!f) throw new Error(`no transition ${fn}`);
  table[fn] = change(f);
  return table;
}

/** The table with `fn`'s rows for which `keep` holds, and only those. */
const keepRows = (fn: keyof typeof transitions, keep: (r: Row) => boolean): Table =>
  mutate(fn, (f) => ({ ...f, rows: f.rows.filter(keep) }));

/** The table with each of `fn`'s rows put through `change`. */
const changeRows = (fn: keyof typeof transitions, change: (r: Row) => Row): Table =>
  mutate(fn, (f) => ({ ...f, rows: f.rows.map(change) }));

/** `fn` as if no attempt had consumed provider tokens: its rows guarded by `paid` are gone. */
const withoutPaidRows = (fn: keyof typeof transitions): Table =>
  keepRows(fn, (r) => r.when === "otherwise" || !r.when.paid);

export const mutants: Record<string, Mutant> = {
  "complete_job without its guard": {
    describe: "complete_job stores the output whatever the job's status and claim",
    mode: "safety",
    table: mutate("complete_job", (f) => ({
      ...f,
      rows: [{ when: {}, outcome: "completed", to: { status: "succeeded", counter: 0 } }],
    })),
  },
  "failure callback refunds without claiming": {
    describe:
      "fail_job without a claim (the failure callback) returns the unit even when the job " +
      "was already final, i.e. the refund is not tied to winning the transition",
    mode: "safety",
    table: mutate("fail_job", (f) => ({
      ...f,
      rows: [
        {
          when: { status: ["succeeded", "failed", "canceled"], claim: ["none"] },
          outcome: "already_final",
          to: { counter: -1 },
        },
        ...f.rows,
      ],
    })),
  },
  "failure callback without its message check": {
    describe:
      "fail_job fails the job on the failure callback of any message, also one a requeue or a " +
      "republish superseded (the SQL before 20261201070000): the old message's callback fails " +
      "the job a newer message's live worker is running",
    mode: "safety",
    table: keepRows("fail_job", (r) => r.outcome !== "superseded"),
  },
  "cancel that withholds a queued job's refund": {
    describe:
      "cancel_job keeps the unit of a queued job when the bound of refunds after spend is " +
      "reached, though no attempt of it consumed anything",
    mode: "safety",
    table: changeRows("cancel_job", (r) =>
      r.to.withheld
        ? { ...r, when: { status: ["queued", "running"], cancelRefundLeft: [false] } }
        : r,
    ),
  },
  "queued cancel after consumption that skips the bound": {
    describe:
      "cancel_job refunds a queued job whose earlier attempts consumed provider tokens (a " +
      "timeout, then a cancel while it waits for its retry) without counting it against the " +
      "plan's bound (the SQL before 20261201090000): the round repeats at once, each one billed",
    mode: "safety",
    table: withoutPaidRows("cancel_job"),
  },
  "an ending that ignores consumed": {
    describe:
      "fail_job refunds a job whose earlier attempts consumed provider tokens as if nothing had " +
      "been spent (the failure callback after timed-out deliveries: the SQL before " +
      "20261201090000), so a prompt that times the model out is refunded without bound",
    mode: "safety",
    table: withoutPaidRows("fail_job"),
  },
  "a flex capacity give-up that keeps the unit": {
    describe:
      "requeue_job ends a job that waited for flex capacity past its max age failed " +
      "(capacity_unavailable) without giving its unit back, though the 429s billed nothing",
    mode: "safety",
    table: changeRows("requeue_job", (r) =>
      r.to.reason === "capacity_unavailable"
        ? { ...r, to: { status: "failed", reason: "capacity_unavailable", counter: 0 } }
        : r,
    ),
  },
  "sweeper without its lease check": {
    describe: "sweep_jobs fails every running job, whether or not its lease expired",
    mode: "safety",
    table: changeRows("sweep_jobs", (r) =>
      r.when !== "otherwise" && r.to.reason === "lease_expired"
        ? { ...r, when: { status: ["running"] } }
        : r,
    ),
  },
  "sweeper that never ends a queued job": {
    describe:
      "sweep_jobs fails neither an undelivered nor an over-age queued job: a job whose every " +
      "message is lost stays queued forever (a liveness failure, not a safety one)",
    mode: "liveness",
    table: mutate("sweep_jobs", (f) => ({
      ...f,
      rows: f.rows
        .filter((r) => r.to.reason !== "never_delivered")
        .map((r) =>
          r.when !== "otherwise" && r.to.reason === "max_age_exceeded"
            ? { ...r, when: { ...r.when, status: ["running"] } }
            : r,
        ),
    })),
  },
  "a reasoning cancel charged at its count": {
    describe:
      "cancel_job on a metered plan prices a running attempt at its prompt and progress even when " +
      "the model reasons (the SQL before 20261206100000): hidden reasoning cut short is billed by " +
      "the provider and captured from no one",
    mode: "safety",
    flags: ["METERED"],
    table: changeRows("cancel_job", (r) =>
      r.to.own === "running" ? { ...r, to: { ...r.to, own: "counted" } } : r,
    ),
  },
  "a claim without the attempt budget": {
    describe:
      "start_job on a metered plan claims a job whatever its earlier attempts consumed: a " +
      "reclaim after attempts that each cost a whole hold takes the bill past twice the hold",
    mode: "safety",
    flags: ["METERED"],
    table: keepRows("start_job", (r) => r.outcome !== "budget_exhausted"),
  },
};

export interface PoolMutant {
  describe: string;
  table: PoolTable;
  /** spec/pool.pml's defines the mutant needs (a change to the model's actors, not the table). */
  flags?: string[];
}

/** The pool table with each named function's rows put through its change. */
function mutatePool(
  changes: Partial<Record<PoolFnName, (rows: PoolRow[]) => PoolRow[]>>,
): PoolTable {
  const table = structuredClone(poolTransitions) as PoolTable;
  for (const [fn, change] of Object.entries(changes) as [PoolFnName, (r: PoolRow[]) => PoolRow[]][])
    table[fn] = { ...table[fn], rows: change(table[fn].rows) };
  return table;
}

const withoutCap = (rows: PoolRow[]) =>
  rows.filter((r) => r.when === "otherwise" || !r.when.capFits);
/** Every refund of end_with_refund (fail, cancel, the sweeper) given back to `release` only. */
const refundTo = (release: ("pool" | "member")[]) => (rows: PoolRow[]) =>
  rows.map((r) =>
    r.to.settle && (["spend", "refund", "counted"] as Settle[]).includes(r.to.settle)
      ? { ...r, to: { ...r.to, release } }
      : r,
  );

/**
 * Broken versions of the pool's guards and settlements: spin must find a counterexample for
 * each, and the pool conformance test must see each table one disagree with the SQL.
 */
export const poolMutants: Record<string, PoolMutant> = {
  "the reservation without the pool's guard": {
    describe:
      "enqueue_in_organization adds the hold to the pool row whatever it holds by then: only " +
      "enqueue_job's read compares it with the limit, and another member's enqueue between the " +
      "read and the upsert takes the pool past it",
    table: mutatePool({
      enqueue_in_organization: (rows) => rows.filter((r) => r.outcome !== "pool_exhausted"),
    }),
  },
  "an enqueue without the member's cap": {
    describe:
      "neither enqueue_job's read nor the member row's upsert compares the member's units with " +
      "their cap: a member holds what the pool has room for",
    table: mutatePool({ enqueue_job: withoutCap, enqueue_in_organization: withoutCap }),
  },
  "a refund to the pool but not the member": {
    describe:
      "end_with_refund gives the hold back to the pool and leaves the member's row as it was: " +
      "the pool no longer adds up to its members (drift), and the member's cap fills with " +
      "refunded jobs",
    table: mutatePool({
      fail_job: refundTo(["pool"]),
      cancel_job: refundTo(["pool"]),
      sweep_jobs: refundTo(["pool"]),
    }),
  },
  "a failure callback that refunds a final job": {
    describe:
      "fail_job without a claim gives the hold back even when the job already ended: the " +
      "refund is not tied to winning the transition, so a repeated callback refunds twice",
    table: mutatePool({
      fail_job: (rows) => [
        {
          when: { status: ["succeeded", "failed", "canceled"], claim: ["none"] },
          outcome: "already_final",
          to: { settle: "refund", release: ["pool", "member"] },
        },
        ...rows,
      ],
    }),
  },
  "an enqueue without the user's lock": {
    describe:
      "enqueue_job reads and reserves without the member's advisory lock: two enqueues of one " +
      "member both pass the read's checks, so the member holds two active jobs under a bound " +
      "of one (and where the cap is what the read let through, the second's member guard " +
      "refuses after its pool reservation, the raise the SQL says cannot happen)",
    table: poolTransitions,
    flags: ["NO_USER_LOCK"],
  },
};
