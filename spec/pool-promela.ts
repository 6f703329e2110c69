/**
 * Generates the pool model's transitions (one Promela `inline` per SQL function) from the pool
 * table, so spin explores exactly the guards test/spec/pool-conformance.test.ts holds the SQL to.
 * spec/pool.pml includes the result as pool-transitions.pml.
 */

import type { PoolEffect, PoolFactName, PoolFnName, PoolRow, PoolTable, PoolWhen } from "./pool.ts";
import type { Status } from "./transitions.ts";

const STATUSES: Status[] = ["none", "queued", "running", "succeeded", "failed", "canceled"];
const FINAL: Status[] = ["succeeded", "failed", "canceled"];
const FINAL_CODE = STATUSES.indexOf("succeeded");
const CLAIMS = ["none", "current", "stale"] as const;
const MESSAGES = ["none", "current", "older"] as const;

/**
 * The Promela parameters of each function's inline, in order. The enqueue's `p` and `u` are the
 * pool's and the member's units_used as the call sees them: enqueue_job's read passes what it
 * read, the reserving statement passes the rows themselves.
 */
const PARAMS: Record<PoolFnName, string[]> = {
  enqueue_job: ["j", "m", "p", "u", "act", "out"],
  enqueue_in_organization: ["j", "m", "p", "u", "out"],
  start_job: ["j", "out"],
  complete_job: ["j", "c", "out"],
  fail_job: ["j", "c", "msg", "sp", "out"],
  cancel_job: ["j", "sp", "out"],
  sweep_jobs: ["j", "due", "sp", "out"],
};

const up = (s: string) => s.toUpperCase();
const S = (s: Status) => `S_${up(s)}`;
const O = (s: string) => `O_${up(s)}`;

/** Each fact as a Promela expression over the model's variables and the inline's parameters. */
const FACTS: Record<PoolFactName, (v: unknown) => string> = {
  status: (v) => `st[j] == ${S(v as Status)}`,
  poolFits: (v) => (v ? "(p + HOLD <= LIMIT)" : "(p + HOLD > LIMIT)"),
  capFits: (v) =>
    v ? "(CAP(m) == NOCAP || u + HOLD <= CAP(m))" : "(CAP(m) != NOCAP && u + HOLD > CAP(m))",
  activeLeft: (v) => (v ? "(act < MAX_ACTIVE)" : "(act >= MAX_ACTIVE)"),
  meter: (v) => (v === "metered" ? "metered" : "!metered"),
  spent: (v) => (v ? "sp" : "!sp"),
  refundLeft: (v) => (v ? "(paid < BOUND)" : "(paid >= BOUND)"),
  due: (v) => (v ? "due" : "!due"),
};

function atom(name: string, value: unknown): string {
  if (name in FACTS) return FACTS[name as PoolFactName](value);
  if (name === "claim") return `c == C_${up(value as string)}`;
  if (name === "message") return `msg == M_${up(value as string)}`;
  throw new Error(`unknown fact ${name}`);
}

function condition(when: PoolWhen): string {
  const parts = Object.entries(when).map(([name, values]) => {
    const alts = (values as unknown[]).map((v) => atom(name, v));
    return alts.length === 1 ? `(${alts[0]})` : `(${alts.join(" || ")})`;
  });
  return parts.length === 0 ? "true" : parts.join(" && ");
}

/** What a settle captures: the amount the ending's rule keeps (a metered one: any, up to it). */
const CAPTURE: Record<NonNullable<PoolEffect["settle"]>, string> = {
  kept: "capt = HOLD",
  spend: "capt = 0; do :: capt < HOLD -> capt++ :: break od",
  refund: "capt = 0",
  counted: "capt = 0; paid++",
  withheld: "capt = HOLD",
};

function effect(name: string, to: PoolEffect, outcome: string): string {
  // What a replayed counterexample (spin -t) prints: who called what on which job.
  const s: string[] = [`printf("[%d] ${name}(job %d) -> ${outcome}\\n", _pid, j)`];
  if (to.reserve) s.push("pool = pool + HOLD", "mu[OWNER(j)] = mu[OWNER(j)] + HOLD");
  if (to.status) s.push(`st[j] = ${S(to.status)}`);
  if (to.settle) {
    s.push(CAPTURE[to.settle]);
    // The SQL's own guard (units_used >= hold - captured, else it raises): here a counter short
    // of what it gives back is drift already, so an assertion.
    for (const c of to.release ?? []) {
      const v = c === "pool" ? "pool" : "mu[OWNER(j)]";
      s.push(`assert(${v} >= HOLD - capt)`, `${v} = ${v} - (HOLD - capt)`);
    }
    // The ghosts the invariants read: what the member's jobs kept, and that this one settled.
    s.push("kept[OWNER(j)] = kept[OWNER(j)] + capt", "capt = 0", "settled[j]++");
  }
  s.push(`out = ${O(outcome)}`);
  return s.join("; ");
}

function inline(name: PoolFnName, rows: PoolRow[]): string {
  const lines = [`inline ${name}(${PARAMS[name].join(", ")}) {`, "  if"];
  const earlier: string[] = [];
  for (const row of rows) {
    const guard =
      row.when === "otherwise"
        ? "else"
        : [...earlier.map((c) => `!(${c})`), `(${condition(row.when)})`].join(" && ");
    lines.push(`  :: ${guard} -> ${effect(name, row.to, row.outcome)}`);
    if (row.when !== "otherwise") earlier.push(condition(row.when));
  }
  // A function none of whose rows applies (a mutant's) leaves everything as it was.
  if (!rows.some((r) => r.when === "otherwise")) lines.push(`  :: else -> out = O_NO_ROW`);
  lines.push("  fi", "}");
  return lines.join("\n");
}

/** The generated Promela: constants, then one inline per function. */
export function generatePoolPromela(table: PoolTable): string {
  // No row tells the three final statuses apart (each row's statuses hold all three or none):
  // then the model stores them as one value, and a final job's states do not triple.
  const merged = Object.values(table).every((f) =>
    f.rows.every((r) => {
      const sts = r.when === "otherwise" ? undefined : r.when.status;
      const n = sts ? FINAL.filter((s) => sts.includes(s)).length : 0;
      return n === 0 || n === FINAL.length;
    }),
  );
  // The outcomes pool.pml's actors test, defined even where a mutant's table lost their rows.
  const outcomes = [
    ...new Set([
      ...Object.values(table).flatMap((f) => f.rows.map((r) => r.outcome)),
      "reserve",
      "enqueued",
      "raised",
      "started",
      "no_row",
    ]),
  ];
  return [
    "/* Generated from spec/pool.ts by spec/pool-promela.ts: do not edit. */",
    ...STATUSES.map((s, i) => `#define ${S(s)} ${merged && FINAL.includes(s) ? FINAL_CODE : i}`),
    ...CLAIMS.map((c, i) => `#define C_${up(c)} ${i}`),
    ...MESSAGES.map((m, i) => `#define M_${up(m)} ${i}`),
    ...outcomes.map((o, i) => `#define ${O(o)} ${i + 1}`),
    "",
    ...(Object.entries(table) as [PoolFnName, { rows: PoolRow[] }][]).map(([name, fn]) =>
      inline(name, fn.rows),
    ),
    "",
  ].join("\n");
}
