/**
 * Generates the Promela transitions (one `inline` per SQL function) from the transition table,
 * so the model checker explores exactly the guards the conformance test holds the SQL to.
 */
import {
  COMPLETE_COST,
  type Effect,
  type FactName,
  type Fn,
  HOLD,
  type Own,
  PROGRESS_COST,
  RELEASE_COST,
  type Reason,
  type Row,
  type Status,
  type Table,
  type When,
} from "./transitions.ts";

const STATUSES: Status[] = ["none", "queued", "running", "succeeded", "failed", "canceled"];
export const REASONS: Reason[] = [
  "model_refused",
  "delivery_failed",
  "publish_failed",
  "provider_quota_exhausted",
  "lease_expired",
  "max_age_exceeded",
  "never_delivered",
  "provider_misconfigured",
  "capacity_unavailable",
  "attempt_budget_exhausted",
];
const LEASES = ["none", "live", "expired", "past_grace"] as const;
/** fail_job's `m`: the message the caller names, against the job's publish_seq. */
const MESSAGES = ["none", "current", "older"] as const;

/** The Promela parameters of each function's inline, in order. */
const PARAMS: Record<string, string[]> = {
  enqueue_job: ["out"],
  start_job: ["out"],
  complete_job: ["a", "out"],
  requeue_job: ["a", "ch", "bd", "cap", "out"],
  release_job: ["a", "sp", "out"],
  fail_job: ["a", "r", "m", "out"],
  cancel_job: ["out"],
  sweep_jobs: ["out"],
  record_progress: ["a", "out"],
};

const up = (s: string) => s.toUpperCase();
const S = (s: Status) => `S_${up(s)}`;
const O = (s: string) => `O_${up(s)}`;
const R = (s: Reason) => `R_${up(s)}`;

/** The boolean facts, each a Promela variable (a global, or a parameter of the inline). */
const FLAGS: Record<string, string> = {
  undelivered: "undelivered",
  aged: "aged",
  cancelRefundLeft: "refundLeft",
  paid: "paid",
  spent: "sp",
  reasons: "reasons",
  claimFits: "(cons + RUNNING_COST + HOLD <= 2 * HOLD)",
  releaseFits: "(cons + RELEASE_REPORT + HOLD <= 2 * HOLD)",
  countHit: "ch",
  beyondDeadline: "bd",
  capacity: "cap",
};

function atom(name: string, value: unknown): string {
  const flag = FLAGS[name];
  if (flag !== undefined) return value ? flag : `!${flag}`;
  switch (name as FactName | "claim" | "message" | "fault") {
    case "meter":
      return value === "metered" ? "metered" : "!metered";
    case "status":
      return `st == ${S(value as Status)}`;
    case "lease":
      return `lease == L_${up(value as string)}`;
    case "resume":
      return value === "waiting" ? "waiting" : "!waiting";
    case "lastHit":
      return value ? "(hits + 1 >= MAXHITS)" : "(hits + 1 < MAXHITS)";
    case "republished":
      return value ? "(repub >= MAXREPUB)" : "(repub < MAXREPUB)";
    case "fault":
      return value === "operator"
        ? "(r == R_PROVIDER_MISCONFIGURED)"
        : "(r != R_PROVIDER_MISCONFIGURED)";
    case "claim":
      return value === "current"
        ? "(a != 0 && a == att)"
        : value === "stale"
          ? "(a != 0 && a != att)"
          : "a == 0";
    case "message":
      return `m == M_${up(value as string)}`;
  }
  throw new Error(`unknown fact ${name}`);
}

function condition(when: When): string {
  const parts = Object.entries(when).map(([name, values]) => {
    const alts = (values as unknown[]).map((v) => atom(name, v));
    return alts.length === 1 ? `(${alts[0]})` : `(${alts.join(" || ")})`;
  });
  return parts.length === 0 ? "true" : parts.join(" && ");
}

/** What prices the attempt a metered call ends or releases, as a Promela expression. */
function ownCost(name: string, own: Own): string {
  if (own === "running") return "RUNNING_COST";
  if (own === "counted") return "(st == S_RUNNING -> PROGRESS_COST : 0)";
  if (name === "complete_job") return "COMPLETE_COST";
  if (name === "release_job") return "RELEASE_REPORT";
  return "0";
}

function effect(name: string, to: Effect, outcome: string): string {
  // What a replayed counterexample (spin -t) prints: who called what, and what came of it.
  const s: string[] = [`printf("[%d] ${name} -> ${outcome}\\n", _pid)`];
  // Priced before the status changes: the running attempt is the one this call ends.
  if (to.own) s.push(`own = ${ownCost(name, to.own)}`);
  if (to.status) s.push(`st = ${S(to.status)}`);
  if (to.status && to.status !== "running") s.push("lease = L_NONE");
  // Attempts are only ever compared for equality with the number a worker holds, so "+ 1" is
  // any number no one holds (job.pml's FRESH_CLAIM): this keeps the state space finite.
  if (to.claim) s.push("att = FRESH_CLAIM", "lease = L_LIVE");
  if (to.resume) s.push(`waiting = ${to.resume === "waiting"}`);
  if (to.requeuedNow) s.push("undelivered = false");
  if (to.hit) s.push("hits++");
  // publish_seq + 1: every message QStash holds or a worker is handling is now an older one
  // (job.pml's supersede); the actor that got the outcome publishes the new, current message.
  if (to.newMessage) s.push("supersede()");
  if (to.republish) s.push("repub++");
  if (to.reason) s.push(`reason = ${to.reason === "$reason" ? "r" : R(to.reason)}`);
  if (to.counter === 1) s.push("counter = counter + (metered -> HOLD : 1)", "reserved++");
  if (to.capture === "spend") s.push("capt = (cons + own > HOLD -> HOLD : cons + own)");
  if (to.capture === "nothing") s.push("capt = 0");
  if (to.capture) s.push("counter = counter - (HOLD - capt)", "settled++");
  if (to.counter === -1) s.push("counter--", "refunds++");
  if (to.withheld) s.push("withheld = true");
  if (to.spend) s.push("paid = true", "cons = cons + (metered -> own : 0)");
  if (to.own) s.push("own = 0");
  s.push(`out = ${O(outcome)}`);
  return s.join("; ");
}

function inline(name: string, fn: Fn): string {
  const lines = [`inline ${name}(${(PARAMS[name] ?? ["out"]).join(", ")}) {`, "  if"];
  const earlier: string[] = [];
  for (const row of fn.rows as Row[]) {
    const guard =
      row.when === "otherwise"
        ? "else"
        : [...earlier.map((c) => `!(${c})`), `(${condition(row.when)})`].join(" && ");
    lines.push(`  :: ${guard} -> ${effect(name, row.to, row.outcome)}`);
    if (row.when !== "otherwise") earlier.push(condition(row.when));
  }
  lines.push("  fi", "}");
  return lines.join("\n");
}

/** The generated Promela: constants, then one inline per function. */
export function generatePromela(table: Table): string {
  // The outcomes job.pml's actors test, defined even where a mutant's table lost every row of one.
  const outcomes = [
    ...new Set([
      ...Object.values(table).flatMap((f) => f.rows.map((r) => r.outcome)),
      "budget_exhausted",
    ]),
  ];
  return [
    "/* Generated from spec/transitions.ts by spec/promela.ts: do not edit. */",
    ...STATUSES.map((s, i) => `#define ${S(s)} ${i}`),
    ...LEASES.map((l, i) => `#define L_${up(l)} ${i}`),
    ...MESSAGES.map((m, i) => `#define M_${up(m)} ${i}`),
    ...REASONS.map((r, i) => `#define ${R(r)} ${i + 1}`),
    // A metered plan's amounts, in quarters of the hold (spec/transitions.ts).
    `#define HOLD ${HOLD}`,
    `#define PROGRESS_COST ${PROGRESS_COST}`,
    `#define COMPLETE_COST ${COMPLETE_COST}`,
    `#define RELEASE_COST ${RELEASE_COST}`,
    "#define RUNNING_COST (st == S_RUNNING -> (reasons -> HOLD : PROGRESS_COST) : 0)",
    "#define RELEASE_REPORT (sp -> (reasons -> HOLD : RELEASE_COST) : 0)",
    ...outcomes.map((o, i) => `#define ${O(o)} ${i + 1}`),
    "",
    ...Object.entries(table).map(([name, fn]) => inline(name, fn)),
    "",
  ].join("\n");
}
