/**
 * The model's transition table against the real SQL functions: every abstract state the table
 * can describe (with every argument combination a caller can pass) is built as a real row, the
 * function is called, and its outcome, the new state and the counter are compared with the
 * table's row. A guard in the SQL that the model lacks, or one in the model that the SQL lacks,
 * shows up as a mismatch here. Each case runs in a transaction that is rolled back. A metered
 * state is built twice, on a token plan and on a money plan, its quarters of the hold as tokens
 * and as micro-dollars: the counter, the capture and what the job consumed are compared exactly.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { beforeAll, describe, expect, test } from "vitest";
import { mutants } from "../../spec/mutants.ts";
import {
  type Args,
  allArgs,
  allFacts,
  type Effect,
  type Facts,
  type FnName,
  HOLD,
  PROGRESS_COST,
  reportCost,
  rowFor,
  runningCost,
  type Table,
  transitions,
} from "../../spec/transitions.ts";
import { databaseUrl, useFreshDatabase } from "../support/db.ts";

// sweep_jobs looks at every job: a database of our own.
useFreshDatabase();

/**
 * The plans a case's job is on: the model's job plan, and its metered plan twice, in tokens and
 * in micro-dollars. A metered quarter of the hold (`u`) is a concrete amount in each: what the
 * running attempt's prompt and progress cost (`partialTokens`), what a worker's count of a
 * streamed attempt and the provider's report of a completed one cost, are one and two quarters
 * at the plan's prices (gpt-5.4-mini's standard tier: 0.75 and 4.5 micro-dollars a token).
 */
const PLANS = {
  free: { meter: "jobs", u: 1, partialTokens: 0, model: null, used: { prompt: 5, completion: 40 } },
  "conf-tokens": {
    meter: "tokens",
    u: 25,
    // 5 + 20 tokens.
    partialTokens: 20,
    model: null,
    // 10 + 40 tokens.
    used: { prompt: 10, completion: 40 },
  },
  "conf-money": {
    meter: "money",
    u: 45,
    // ceil(5 × 0.75 + 9 × 4.5) = 45 micro-dollars.
    partialTokens: 9,
    model: "gpt-5.4-mini",
    // 12 × 0.75 + 18 × 4.5 = 90 micro-dollars.
    used: { prompt: 12, completion: 18 },
  },
} as const;
type PlanId = keyof typeof PLANS;

/** The free plan's bound of refunds after spend, read from private.refund_bound. */
let freeBound = Number.NaN;
beforeAll(async () => {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    for (const [id, plan] of Object.entries(PLANS)) {
      if (plan.meter === "jobs") continue;
      await client.query(
        `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
           max_output_tokens, meter, model, reasoning_effort)
         values ($1, $1, 'day', 1000000, 3, 512, $2, $3, null)`,
        [id, plan.meter, plan.model],
      );
    }
    freeBound = (
      await client.query(
        "select private.refund_bound(p) as b from public.plans p where id = 'free'",
      )
    ).rows[0].b;
  } finally {
    await client.end();
  }
  expect(freeBound).toBeGreaterThanOrEqual(1);
});

const T = new Date("2026-03-10T12:00:00Z");
const DAY = "2026-03-10T00:00:00Z";
const s = (seconds: number) => new Date(T.getTime() + seconds * 1000);
const MAX_AGE = 10_800;
const GRACE = 300;
const UNDELIVERED = 900;
const MAX_HITS = 3;

/** One concrete row for an abstract state; `variant` picks among equivalent shapes. */
function concrete(f: Facts, args: Args, variant: number, planId: PlanId) {
  const plan = PLANS[planId];
  // A job plan's job holds 1; a metered one four quarters.
  const hold = f.meter === "metered" ? HOLD * plan.u : 1;
  const holdsUnit = ["queued", "running", "succeeded"].includes(f.status);
  const createdAt = f.aged ? s(-MAX_AGE - 100) : s(-3000);
  let queuedAt = s(-10);
  let resumeAt: Date | null = null;
  if (f.status === "queued") {
    if (f.resume === "waiting") resumeAt = s(60);
    else if (variant === 0) queuedAt = f.undelivered ? s(-UNDELIVERED - 60) : s(-10);
    else {
      // Requeued long ago; the resume time is what counts.
      queuedAt = s(-2000);
      resumeAt = f.undelivered ? s(-UNDELIVERED - 30) : s(-5);
    }
  }
  const lease = { live: s(60), expired: s(-10), past_grace: s(-GRACE - 100), none: null }[f.lease];
  const hits = f.lastHit ? MAX_HITS - 1 : 0;
  const republishes = f.republished ? 1 : 0;
  const final = ["succeeded", "failed", "canceled"].includes(f.status);
  return {
    job: {
      status: f.status,
      attempts: args.claim === "stale" ? 2 : 1,
      provider_quota_hits: hits,
      republish_count: republishes,
      // An older message than the job's exists only once a newer one was published.
      publish_seq: 1 + hits + republishes + (args.message === "older" ? 1 : 0),
      created_at: createdAt,
      queued_at: queuedAt,
      resume_at: resumeAt,
      lease_expires_at: lease,
      started_at: f.status === "queued" ? null : s(-100),
      finished_at: final ? s(-50) : null,
      refunded_at: f.status === "failed" || f.status === "canceled" ? s(-50) : null,
      failure_reason: f.status === "failed" ? "delivery_failed" : null,
      output: f.status === "succeeded" ? "the doc" : null,
      // An ending kept its hold (succeeded) or nothing (refunded); null while active.
      captured: f.status === "succeeded" ? hold : final ? 0 : null,
      // What earlier attempts consumed; every prompt counts its tokens at enqueue.
      consumed: f.meter === "metered" ? f.consumed * plan.u : f.paid ? 50 : 0,
      prompt_tokens: 5,
      partial_tokens: f.status === "running" ? plan.partialTokens : 0,
      meter: plan.meter,
      hold,
      model: plan.model,
      reasons: f.reasons,
    },
    // Another job's hold, so a refund too many would show as a number, not an error.
    unitsUsed: hold + (holdsUnit ? hold : 0),
    // The period's refunds after spend, one under the free plan's bound or at it: the bound as
    // the SQL's one rule (private.refund_bound) states it, so the model's `cancelRefundLeft` is
    // checked at the edge the SQL itself draws.
    paidRefunds: f.cancelRefundLeft ? freeBound - 1 : freeBound,
  };
}

type Call = { fn: FnName; args: Record<string, unknown> };

function callFor(
  fn: FnName,
  id: string,
  user: string,
  f: Facts,
  args: Args,
  publishSeq: number,
  planId: PlanId,
): Call {
  const used = PLANS[planId].used;
  const metered = PLANS[planId].meter !== "jobs";
  const attempt = args.claim === "none" ? null : 1;
  const createdAt = f.aged ? s(-MAX_AGE - 100) : s(-3000);
  switch (fn) {
    case "start_job":
      return { fn, args: { p_job_id: id, p_lease_seconds: 90, p_now: T } };
    case "complete_job":
      return {
        fn,
        args: {
          p_job_id: id,
          p_attempt: attempt,
          p_output: "out",
          p_now: T,
          // The provider's usage, at the tier it served (a job plan keeps its unit whatever it is).
          ...(metered
            ? {
                p_usage: {
                  prompt_tokens: used.prompt,
                  completion_tokens: used.completion,
                  service_tier: "default",
                  source: "provider",
                },
              }
            : {}),
        },
      };
    case "requeue_job":
      return {
        fn,
        args: {
          p_job_id: id,
          p_attempt: attempt,
          p_resume_at: args.beyondDeadline
            ? new Date(createdAt.getTime() + (MAX_AGE + 60) * 1000)
            : s(30),
          p_error: "429",
          p_max_hits: MAX_HITS,
          p_max_age_seconds: MAX_AGE,
          p_now: T,
          p_count_hit: args.countHit,
          p_capacity: args.capacity,
        },
      };
    case "release_job":
      return {
        fn,
        args: {
          p_job_id: id,
          p_attempt: attempt,
          p_error: "500",
          p_now: T,
          // A timeout after streaming, or a 5xx before anything was billed.
          p_usage: args.spent
            ? { prompt_tokens: used.prompt, completion_tokens: used.completion, source: "counted" }
            : { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
        },
      };
    case "fail_job":
      return {
        fn,
        args: {
          p_job_id: id,
          p_reason: args.fault === "operator" ? "provider_misconfigured" : "delivery_failed",
          p_attempt: attempt,
          p_now: T,
          // The worker's own failure reports its attempt's usage (a 400 or a 401: nothing).
          ...(args.claim === "none"
            ? {}
            : { p_usage: { prompt_tokens: 0, completion_tokens: 0, source: "counted" } }),
          // The failure callback's message: the job's publish_seq when it was published.
          ...(args.message === "none"
            ? {}
            : { p_seq: args.message === "current" ? publishSeq : publishSeq - 1 }),
        },
      };
    case "cancel_job":
      return { fn, args: { p_job_id: id, p_user_id: user, p_now: T } };
    case "sweep_jobs":
      return {
        fn,
        args: {
          p_now: T,
          p_batch_size: 100,
          p_lease_grace_seconds: GRACE,
          p_undelivered_after_seconds: UNDELIVERED,
          p_max_age_seconds: MAX_AGE,
          p_max_republish: 1,
        },
      };
    case "enqueue_job":
      return { fn, args: { p_user_id: user, p_prompt: "write it", p_now: T } };
    case "record_progress":
      return {
        fn,
        args: {
          p_job_id: id,
          p_attempt: attempt,
          p_offset: 0,
          p_text: "so far",
          p_completion_tokens: 2,
          p_now: T,
        },
      };
  }
}

interface Observed {
  outcome: string;
  status: string;
  reason: string | null;
  lease: Facts["lease"];
  resume: Facts["resume"];
  undelivered: boolean;
  claims: number;
  hits: number;
  messages: number;
  republishes: number;
  counter: number;
  withheld: boolean;
  /** What the job kept of its hold, when this call ended it (null otherwise). */
  captured: number | null;
  /** An active job's attempts have consumed provider tokens. */
  paid: boolean;
  /** The refund used the period's bound of refunds after spend (paid_refunds + 1). */
  counted: number;
  /** A metered active job's consumed, in quarters of its hold (null elsewhere). */
  spent: number | null;
}

// biome-ignore lint/suspicious/noExplicitAny: a generation_jobs row as pg returns it
type JobRow = Record<string, any>;

function observe(
  outcome: string,
  before: JobRow,
  after: JobRow,
  units: [number, number],
  counted: [number, number],
  /** The plan's quarter of a hold: counter, capture and consumed are compared in quarters. */
  u: number,
): Observed {
  const t = (d: Date | null) => (d === null ? null : d.getTime());
  const lease = t(after.lease_expires_at);
  const resume = t(after.resume_at);
  const since = t(after.resume_at) ?? t(after.queued_at);
  const queued = after.status === "queued";
  return {
    outcome,
    status: after.status,
    reason: after.failure_reason,
    lease:
      after.status !== "running" || lease === null
        ? "none"
        : lease > T.getTime()
          ? "live"
          : lease >= s(-GRACE).getTime()
            ? "expired"
            : "past_grace",
    resume: !queued ? "none" : resume !== null && resume > T.getTime() ? "waiting" : "ready",
    undelivered:
      queued &&
      !(resume !== null && resume > T.getTime()) &&
      since !== null &&
      since < s(-UNDELIVERED).getTime(),
    claims: after.attempts - before.attempts,
    // Counters no guard of a final job reads are compared while the job is active.
    hits: ["queued", "running"].includes(after.status)
      ? after.provider_quota_hits - before.provider_quota_hits
      : 0,
    messages: after.publish_seq - before.publish_seq,
    republishes: after.republish_count - before.republish_count,
    counter: (units[1] - units[0]) / u,
    withheld: after.refund_withheld !== null,
    captured: before.captured === null && after.captured !== null ? after.captured / u : null,
    paid: ["queued", "running"].includes(after.status) && after.consumed > 0,
    counted: counted[1] - counted[0],
    spent:
      after.meter !== "jobs" && ["queued", "running"].includes(after.status)
        ? after.consumed / u
        : null,
  };
}

/** What the attempt a metered row prices costs, in quarters of the hold. */
function ownCost(to: Effect, fn: FnName, f: Facts, args: Args): number {
  switch (to.own) {
    case "running":
      return runningCost(f);
    case "report":
      return reportCost(fn, f, args);
    case "counted":
      return f.status === "running" ? PROGRESS_COST : 0;
    default:
      return 0;
  }
}

function expected(table: Table, fn: FnName, f: Facts, args: Args): Observed | undefined {
  const row = rowFor(table[fn], f, args);
  if (!row) return undefined;
  const to = row.to;
  const status = to.status ?? f.status;
  const own = ownCost(to, fn, f, args);
  // A metered ending keeps what was consumed up to its hold (or nothing) and releases the rest.
  const kept =
    to.capture === "spend" ? Math.min(HOLD, f.consumed + own) : to.capture === "nothing" ? 0 : null;
  const active = ["queued", "running"].includes(status);
  return {
    outcome: row.outcome,
    status,
    reason:
      to.reason === "$reason"
        ? args.fault === "operator"
          ? "provider_misconfigured"
          : "delivery_failed"
        : (to.reason ?? (status === "failed" ? "delivery_failed" : null)),
    lease: status !== "running" ? "none" : to.claim ? "live" : f.lease,
    resume: status !== "queued" ? "none" : (to.resume ?? f.resume),
    undelivered:
      status === "queued" &&
      (to.resume ?? f.resume) === "ready" &&
      !to.requeuedNow &&
      f.status === "queued" &&
      f.undelivered,
    claims: to.claim ? 1 : 0,
    hits: ["queued", "running"].includes(status) && to.hit ? 1 : 0,
    messages: to.newMessage ? 1 : 0,
    republishes: to.republish ? 1 : 0,
    counter: kept === null ? to.counter : kept - HOLD,
    withheld: to.withheld === true,
    captured: kept ?? to.captured ?? null,
    paid: active && (to.spend === true || f.paid),
    counted: to.counted ? 1 : 0,
    spent: f.meter === "metered" && active ? f.consumed + (to.spend ? own : 0) : null,
  };
}

async function runCase(
  client: pg.Client,
  fn: FnName,
  f: Facts,
  args: Args,
  variant: number,
  planId: PlanId,
): Promise<Observed> {
  const id = randomUUID();
  const user = randomUUID();
  const c = concrete(f, args, variant, planId);
  await client.query("begin");
  try {
    const j = c.job;
    const { rows } = await client.query(
      `with u as (
         insert into public.quota_usage (user_id, period_start, units_used, paid_refunds,
           meter)
       values ($2, $3, $4, $19, $25)
       )
       insert into public.generation_jobs (
         id, user_id, status, prompt, request_hash, plan_id, period_start, attempts,
         provider_quota_hits, republish_count, publish_seq, created_at, queued_at, resume_at,
         lease_expires_at, started_at, finished_at, refunded_at, failure_reason, output, updated_at,
         captured, consumed, prompt_tokens, partial_tokens, meter, hold, model,
         service_tier, reasons
       ) values ($1, $2, $5, 'write it', 'h', $24, $3, $6, $7, $8, $9, $10, $11, $12, $13, $14,
         $15, $16, $17, $18, $10, $20, $21, $22, $23, $25, $26, $27, 'default', $28)
       returning *`,
      [
        id,
        user,
        DAY,
        c.unitsUsed,
        j.status,
        j.attempts,
        j.provider_quota_hits,
        j.republish_count,
        j.publish_seq,
        j.created_at,
        j.queued_at,
        j.resume_at,
        j.lease_expires_at,
        j.started_at,
        j.finished_at,
        j.refunded_at,
        j.failure_reason,
        j.output,
        c.paidRefunds,
        j.captured,
        j.consumed,
        j.prompt_tokens,
        j.partial_tokens,
        planId,
        j.meter,
        j.hold,
        j.model,
        j.reasons,
      ],
    );
    const before = rows[0] as JobRow;
    const call = callFor(fn, id, user, f, args, j.publish_seq, planId);
    const names = Object.keys(call.args);
    const result = (
      await client.query(
        `select public.${call.fn}(${names.map((n, i) => `${n} => $${i + 1}`).join(", ")}) as r`,
        names.map((n) => call.args[n]),
      )
    ).rows[0].r;
    const after = (await client.query("select * from public.generation_jobs where id = $1", [id]))
      .rows[0] as JobRow;
    const counter = (
      await client.query(
        "select units_used, paid_refunds from public.quota_usage where user_id = $1",
        [user],
      )
    ).rows[0] as { units_used: number; paid_refunds: number };
    let outcome = result.outcome as string;
    if (fn === "sweep_jobs") {
      const failed = (result.failed as { id: string }[]).some((x) => x.id === id);
      const republished = (result.republish as { id: string }[]).some((x) => x.id === id);
      outcome = failed ? "failed" : republished ? "republish" : "untouched";
    }
    return observe(
      outcome,
      before,
      after,
      [c.unitsUsed, counter.units_used],
      [c.paidRefunds, counter.paid_refunds],
      PLANS[planId].u,
    );
  } finally {
    await client.query("rollback");
  }
}

/** Runs `work` over `items` on `n` connections. */
async function onClients<T>(n: number, items: T[], work: (c: pg.Client, item: T) => Promise<void>) {
  const clients = await Promise.all(
    Array.from({ length: n }, async () => {
      const c = new pg.Client({ connectionString: databaseUrl(), options: "-c TimeZone=UTC" });
      await c.connect();
      return c;
    }),
  );
  try {
    let next = 0;
    await Promise.all(
      clients.map(async (c) => {
        for (let i = next++; i < items.length; i = next++) await work(c, items[i] as T);
      }),
    );
  } finally {
    await Promise.all(clients.map((c) => c.end()));
  }
}

const fns = (Object.keys(transitions) as FnName[]).filter((fn) => fn !== "enqueue_job");

describe("the transition table is a function", () => {
  test.each(fns)("%s: every state and argument has exactly the first matching row", (fn) => {
    for (const f of allFacts())
      for (const args of allArgs(transitions[fn], f)) {
        expect(rowFor(transitions[fn], f, args), JSON.stringify({ fn, f, args })).toBeDefined();
      }
  });
});

/** Every state and argument, each metered state on a token plan and on a money plan. */
function casesOf(fn: FnName) {
  const cases: { f: Facts; args: Args; variant: number; plan: PlanId }[] = [];
  for (const f of allFacts())
    for (const args of allArgs(transitions[fn], f))
      for (const variant of f.status === "queued" && f.resume === "ready" ? [0, 1] : [0])
        for (const plan of f.meter === "metered"
          ? (["conf-tokens", "conf-money"] as const)
          : (["free"] as const))
          cases.push({ f, args, variant, plan });
  return cases;
}

describe("the SQL does what the model's transition table says", () => {
  test.each(fns)(
    "%s: every row, in every abstract state, on the real function",
    async (fn) => {
      const cases = casesOf(fn);
      const mismatches: unknown[] = [];
      const rowsSeen = new Set<number>();
      await onClients(3, cases, async (client, { f, args, variant, plan }) => {
        const want = expected(transitions, fn, f, args);
        const row = rowFor(transitions[fn], f, args);
        if (row) rowsSeen.add(transitions[fn].rows.indexOf(row));
        const got = await runCase(client, fn, f, args, variant, plan);
        if (JSON.stringify(got) !== JSON.stringify(want))
          mismatches.push({ state: f, args, variant, plan, model: want, sql: got });
      });
      expect(
        mismatches.slice(0, 5),
        `${mismatches.length} of ${cases.length} cases differ`,
      ).toEqual([]);
      // Every row of the table is exercised by some state.
      expect([...rowsSeen].sort((a, b) => a - b)).toEqual(transitions[fn].rows.map((_, i) => i));
      // Thousands of cases each: 26–35 s for the largest on a loaded machine, 60 s at twice the load.
    },
    180_000,
  );

  test.each(Object.entries(mutants))(
    "the check has teeth: the mutant table %s disagrees with the SQL",
    async (_name, mutant) => {
      const changed = fns.filter(
        (fn) => JSON.stringify(mutant.table[fn]) !== JSON.stringify(transitions[fn]),
      );
      expect(changed).toHaveLength(1);
      const fn = changed[0] as FnName;
      // One disagreement is enough: the cases after it are not run. The states where the two
      // tables say different things go first (the SQL agrees with the real table, above), so
      // the search rarely goes past the first few; every other state is still tried after them.
      const differs = ({ f, args }: { f: Facts; args: Args }) =>
        JSON.stringify(expected(mutant.table, fn, f, args)) !==
        JSON.stringify(expected(transitions, fn, f, args));
      const cases = casesOf(fn);
      const ordered = [...cases.filter(differs), ...cases.filter((c) => !differs(c))];
      let mismatches = 0;
      await onClients(3, ordered, async (client, { f, args, variant, plan }) => {
        if (mismatches > 0) return;
        const got = await runCase(client, fn, f, args, variant, plan);
        if (JSON.stringify(got) !== JSON.stringify(expected(mutant.table, fn, f, args)))
          mismatches++;
      });
      expect(mismatches).toBeGreaterThan(0);
    },
  );

  test("enqueue_job: a new job is queued and reserves one unit", async () => {
    const client = new pg.Client({ connectionString: databaseUrl() });
    await client.connect();
    try {
      await client.query("begin");
      const user = randomUUID();
      await client.query("insert into auth.users (id) values ($1)", [user]);
      const r = (
        await client.query("select public.enqueue_job($1, 'write it', null, $2) as r", [user, T])
      ).rows[0].r;
      const units = (
        await client.query("select units_used from public.quota_usage where user_id = $1", [user])
      ).rows[0].units_used;
      const row = transitions.enqueue_job.rows[0];
      expect({ outcome: r.outcome, status: r.job.status, counter: units }).toEqual({
        outcome: row?.outcome,
        status: row?.to.status,
        counter: row?.to.counter,
      });
      await client.query("rollback");
    } finally {
      await client.end();
    }
  });
});
