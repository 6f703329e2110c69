/**
 * The pool model's table (spec/pool.ts) against the real SQL: each abstract state is built as
 * real rows (an organization on a plan, two members, the pool's and the members' counters, a
 * job), the real function is called in a transaction that is rolled back, and what it did to
 * the job, the pool, the member's row, the other member's row and the pool's refunds after spend
 * is compared with the table's row. A guard in the model that the SQL lacks, or one in the SQL
 * that the model lacks, shows up as a mismatch; so does each pool mutant's table. The enqueue is
 * held to the table three ways: through enqueue_job (its read's refusals, then its statement on
 * the rows as read), the reserving statement alone on rows another member changed since the
 * read, and two races on real connections, committed.
 */
import { randomUUID } from "node:crypto";
import pg from "pg";
import { beforeAll, describe, expect, test } from "vitest";
import { poolMutants } from "../../spec/mutants.ts";
import {
  afterSpend,
  allPoolArgs,
  allPoolFacts,
  type PoolArgs,
  type PoolFacts,
  type PoolFnName,
  type PoolRow,
  type PoolTable,
  poolRowFor,
  poolTransitions,
} from "../../spec/pool.ts";
import { databaseUrl, useFreshDatabase } from "../support/db.ts";

// sweep_jobs looks at every job, and the races commit: a database of our own.
useFreshDatabase();

/** The model's hold (spec/pool.pml's HOLD), in its units. */
const HOLD = 2;
/**
 * The plans: the enqueue's, a job plan whose limit and active bound are the pool model's bounded
 * profile's; the endings', a job plan with a bound of 2 refunds after spend and a token plan,
 * whose unit (`u`) is 25 tokens. A document holds HOLD units on the job plans (its kind's units).
 */
const LIMIT = 5;
const MAX_ACTIVE = 1;
const BOUND = 2;
const PLANS = {
  "pool-enqueue": { meter: "jobs", u: 1 },
  "pool-jobs": { meter: "jobs", u: 1 },
  "pool-tokens": { meter: "tokens", u: 25 },
} as const;
type PlanId = keyof typeof PLANS;

const T = new Date("2026-03-10T12:00:00Z");
const DAY = "2026-03-10T00:00:00Z";
const s = (seconds: number) => new Date(T.getTime() + seconds * 1000);
const MAX_AGE = 10_800;
const GRACE = 300;
const UNDELIVERED = 900;

beforeAll(async () => {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  try {
    const plans: [PlanId, number, number, number | null][] = [
      ["pool-enqueue", LIMIT, MAX_ACTIVE, null],
      ["pool-jobs", 1000, 5, BOUND],
      ["pool-tokens", 1_000_000, 5, null],
    ];
    for (const [id, units, maxActive, bound] of plans)
      await client.query(
        `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
           max_paid_refunds, max_output_tokens, meter)
         values ($1, $1, 'day', $2, $3, $4, 45, $5)`,
        [id, units, maxActive, bound, PLANS[id].meter],
      );
    await client.query(
      "update public.plan_kinds set units = $2 where plan_id = any($1) and kind = 'document'",
      [Object.keys(PLANS), HOLD],
    );
    const { rows } = await client.query(
      "select private.refund_bound(p) as b from public.plans p where id = 'pool-jobs'",
    );
    expect(rows[0].b).toBe(BOUND);
  } finally {
    await client.end();
  }
});

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

/** An organization on `plan` with two members, A (capped at `cap`) and B; no counters yet. */
async function organization(client: pg.Client, plan: PlanId, cap: number | null = null) {
  const [a, b] = [randomUUID(), randomUUID()];
  await client.query("insert into auth.users (id) values ($1), ($2)", [a, b]);
  const org = (
    await client.query(
      "insert into public.organizations (name, plan) values ('Team', $1) returning id",
      [plan],
    )
  ).rows[0].id as string;
  await client.query(
    `insert into public.organization_members (organization_id, user_id, role, cap)
     values ($1, $2, 'owner', $3), ($1, $4, 'member', null)`,
    [org, a, cap, b],
  );
  return { org, a, b };
}

/** The pool's row and each member's (null: no row), and the pool's refunds after spend. */
async function counters(client: pg.Client, org: string, a: string, b: string) {
  const { rows } = await client.query(
    `select
       (select units_used from public.organization_usage where organization_id = $1) as pool,
       (select paid_refunds from public.organization_usage where organization_id = $1) as paid,
       (select units_used from public.organization_member_usage
        where organization_id = $1 and user_id = $2) as a,
       (select units_used from public.organization_member_usage
        where organization_id = $1 and user_id = $3) as b,
       (select count(*)::int from public.quota_usage where user_id in ($2, $3)) as personal,
       (select count(*)::int from public.generation_jobs
        where organization_id = $1 and user_id = $2) as jobs`,
    [org, a, b],
  );
  return rows[0] as {
    pool: number | null;
    paid: number | null;
    a: number | null;
    b: number | null;
    personal: number;
    jobs: number;
  };
}

async function setCounters(
  client: pg.Client,
  org: string,
  meter: string,
  rows: { pool: number; paid: number; members: [string, number][] },
) {
  await client.query(
    `insert into public.organization_usage (organization_id, period_start, meter, units_used,
       paid_refunds, updated_at) values ($1, $2, $3, $4, $5, $2)`,
    [org, DAY, meter, rows.pool, rows.paid],
  );
  for (const [user, used] of rows.members)
    await client.query(
      `insert into public.organization_member_usage (organization_id, user_id, period_start,
         meter, units_used, updated_at) values ($1, $2, $3, $4, $5, $3)`,
      [org, user, DAY, meter, used],
    );
}

// endings -----------------------------------------------------------------------------------------

const ENDINGS = ["start_job", "complete_job", "fail_job", "cancel_job", "sweep_jobs"] as const;
type Ending = (typeof ENDINGS)[number];

/** What an ending did, in the plan's own units (tokens on the token plan). */
interface EndingObserved {
  outcome: string;
  status: string;
  /** What the job kept of its hold, when this call ended it (null otherwise; the model's
   * expectation says so in words when the SQL's capture lies outside what it allows). */
  captured: number | string | null;
  /** The pool's, member A's (the job's) and member B's units_used, moved by. */
  pool: number;
  member: number;
  other: number;
  /** The pool's paid_refunds, moved by. */
  counted: number;
  /** This call ended the job with its refund withheld. */
  withheld: boolean;
  /** quota_usage rows of either member: an organization job never touches one. */
  personal: number;
}

interface EndingCase {
  fn: Ending;
  f: PoolFacts;
  args: PoolArgs;
  /** The job's earlier attempts consumed provider tokens (generation_jobs.consumed > 0). */
  consumed: boolean;
}

/**
 * Every state and argument of `fn` the SQL can be in: on a job plan, a state whose `spent` is
 * not what the SQL takes the ending to be (afterSpend) is not built (a running job someone else
 * ends is always after spend); each state is built with and without earlier consumption where
 * both give its `spent`. A metered state is built on the token plan, consumed as `spent` says.
 */
function endingCases(fn: Ending): EndingCase[] {
  const out: EndingCase[] = [];
  const table = poolTransitions[fn];
  for (const f of allPoolFacts(table))
    for (const args of allPoolArgs(table))
      for (const consumed of [false, true]) {
        const final = !["queued", "running"].includes(f.status);
        if (f.meter === "metered" || final) {
          if (consumed !== f.spent) continue;
        } else if (afterSpend(fn, f.status, consumed, args) !== f.spent) continue;
        out.push({ fn, f, args, consumed });
      }
  return out;
}

function expectedEnding(table: PoolTable, c: EndingCase, got: EndingObserved): EndingObserved {
  const row = poolRowFor(table[c.fn], c.f, c.args);
  if (!row) throw new Error(`no row for ${JSON.stringify(c)}`);
  const hold = HOLD * PLANS[c.f.meter === "metered" ? "pool-tokens" : "pool-jobs"].u;
  const to = row.to;
  // A metered ending captures any amount the model allows (0 to the hold): the SQL's, if in it.
  const captured =
    to.settle === undefined
      ? null
      : to.settle === "spend"
        ? typeof got.captured === "number" && got.captured >= 0 && got.captured <= hold
          ? got.captured
          : `from 0 to ${hold}`
        : to.settle === "kept" || to.settle === "withheld"
          ? hold
          : 0;
  const kept = typeof captured === "number" ? captured : hold;
  const back = (counter: "pool" | "member") =>
    captured !== null && to.release?.includes(counter) ? kept - hold : 0;
  return {
    outcome: row.outcome,
    status: to.status ?? c.f.status,
    captured,
    pool: back("pool"),
    member: back("member"),
    other: 0,
    counted: to.settle === "counted" ? 1 : 0,
    withheld: to.settle === "withheld",
    personal: 0,
  };
}

async function runEnding(client: pg.Client, c: EndingCase): Promise<EndingObserved> {
  const { fn, f, args } = c;
  const planId: PlanId = f.meter === "metered" ? "pool-tokens" : "pool-jobs";
  const { meter, u } = PLANS[planId];
  const hold = HOLD * u;
  const final = ["succeeded", "failed", "canceled"].includes(f.status);
  await client.query("begin");
  try {
    const { org, a, b } = await organization(client, planId);
    const id = randomUUID();
    const publishSeq = args.message === "older" ? 2 : 1;
    // The sweeper's rule: past the max age (a running job's lease is live, a queued one fresh).
    const createdAt = f.due ? s(-MAX_AGE - 100) : s(-3000);
    await client.query(
      `insert into public.generation_jobs (
         id, user_id, organization_id, status, prompt, request_hash, plan_id, period_start,
         attempts, publish_seq, created_at, queued_at, lease_expires_at, started_at, finished_at,
         refunded_at, failure_reason, output, updated_at, captured, consumed, prompt_tokens,
         partial_tokens, meter, hold, service_tier, reasons
       ) values ($1, $2, $3, $4, 'write it', 'h', $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
         $15, $16, $9, $17, $18, 5, 0, $19, $20, 'default', false)`,
      [
        id,
        a,
        org,
        f.status,
        planId,
        DAY,
        args.claim === "stale" ? 2 : 1,
        publishSeq,
        createdAt,
        s(-10),
        f.status === "running" ? s(60) : null,
        f.status === "queued" ? null : s(-100),
        final ? s(-50) : null,
        f.status === "failed" || f.status === "canceled" ? s(-50) : null,
        f.status === "failed" ? "delivery_failed" : null,
        f.status === "succeeded" ? "the doc" : null,
        f.status === "succeeded" ? hold : final ? 0 : null,
        c.consumed ? (meter === "jobs" ? 50 : u) : 0,
        meter,
        hold,
      ],
    );
    // Another job's hold on each member, so a refund to the wrong row, or one too many, shows
    // as a number rather than an error; the pool one under or at its bound of refunds after spend.
    const mine = (f.status === "succeeded" || !final ? hold : 0) + hold;
    await setCounters(client, org, meter, {
      pool: mine + hold,
      paid: meter === "jobs" ? (f.refundLeft ? BOUND - 1 : BOUND) : 0,
      members: [
        [a, mine],
        [b, hold],
      ],
    });
    const before = await counters(client, org, a, b);
    const attempt = args.claim === "none" ? null : 1;
    const call: Record<Ending, [string, unknown[]]> = {
      start_job: ["select public.start_job($1, 90, $2) as r", [id, T]],
      complete_job: [
        "select public.complete_job($1, $2, 'out', $3, $4) as r",
        [
          id,
          attempt,
          T,
          meter === "jobs"
            ? null
            : {
                prompt_tokens: 5,
                completion_tokens: 10,
                service_tier: "default",
                source: "provider",
              },
        ],
      ],
      fail_job: [
        "select public.fail_job($1, 'delivery_failed', null, $2, $3, $4, $5) as r",
        [
          id,
          attempt,
          T,
          // The worker's own failure (a 400) reports its attempt's usage: nothing.
          attempt === null ? null : { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
          args.message === "none" ? null : args.message === "current" ? publishSeq : publishSeq - 1,
        ],
      ],
      cancel_job: ["select public.cancel_job($1, $2, $3) as r", [id, a, T]],
      sweep_jobs: [
        "select public.sweep_jobs($1, 100, $2, $3, $4, 1) as r",
        [T, GRACE, UNDELIVERED, MAX_AGE],
      ],
    };
    const [sql, params] = call[fn];
    const result = (await client.query(sql, params)).rows[0].r;
    const outcome =
      fn === "sweep_jobs"
        ? (result.failed as { id: string }[]).some((x) => x.id === id)
          ? "failed"
          : (result.republish as { id: string }[]).some((x) => x.id === id)
            ? "republish"
            : "untouched"
        : (result.outcome as string);
    const job = (
      await client.query(
        "select status, captured, refund_withheld from public.generation_jobs where id = $1",
        [id],
      )
    ).rows[0];
    const after = await counters(client, org, a, b);
    return {
      outcome,
      status: job.status,
      captured: !final && job.captured !== null ? job.captured : null,
      pool: (after.pool ?? 0) - (before.pool ?? 0),
      member: (after.a ?? 0) - (before.a ?? 0),
      other: (after.b ?? 0) - (before.b ?? 0),
      counted: (after.paid ?? 0) - (before.paid ?? 0),
      withheld: !final && job.refund_withheld !== null,
      personal: after.personal,
    };
  } finally {
    await client.query("rollback");
  }
}

// enqueue ------------------------------------------------------------------------------------------

/** What an enqueue did: its outcome, and the pool's, member A's and B's rows and A's jobs moved by. */
interface EnqueueObserved {
  outcome: string;
  pool: number;
  member: number;
  other: number;
  jobs: number;
  personal: number;
}

interface EnqueueCase {
  f: PoolFacts;
  /** A's cap is null (only where the cap fits), and the pool and member rows do not exist yet
   * (only where both are 0, so where both fit). */
  noCap: boolean;
  noRows: boolean;
}

/** The rows an enqueue case starts from: the pool at 3 (a hold fits under 5) or 4 (it does not),
 * member A at 1 under a cap of 3 (fits) or 2, A's one active job when the active bound is reached. */
function enqueueRows(e: EnqueueCase) {
  const pool = e.noRows ? 0 : e.f.poolFits ? LIMIT - HOLD : LIMIT - HOLD + 1;
  const member = e.noRows ? 0 : 1;
  return {
    pool,
    member,
    cap: e.noCap ? null : member + HOLD - (e.f.capFits ? 0 : 1),
    activeJob: !e.f.activeLeft,
  };
}

function enqueueCases(fn: "enqueue_job" | "enqueue_in_organization"): EnqueueCase[] {
  const out: EnqueueCase[] = [];
  for (const f of allPoolFacts(poolTransitions[fn]))
    for (const noCap of [false, true])
      for (const noRows of [false, true]) {
        if (noCap && !f.capFits) continue;
        if (noRows && !(f.poolFits && f.capFits)) continue;
        out.push({ f, noCap, noRows });
      }
  return out;
}

/** The table's answer: enqueue_job's read, then (`reserve`) the statement on the rows as read. */
function expectedEnqueue(
  table: PoolTable,
  fn: "enqueue_job" | "enqueue_in_organization",
  read: PoolFacts,
  locked: PoolFacts = read,
): EnqueueObserved {
  const args: PoolArgs = { claim: "none", message: "none" };
  let row = poolRowFor(table[fn], read, args) as PoolRow;
  if (fn === "enqueue_job" && row.outcome === "reserve")
    row = poolRowFor(table.enqueue_in_organization, locked, args) as PoolRow;
  const reserved = row.to.reserve ? HOLD : 0;
  return {
    outcome: row.outcome,
    pool: reserved,
    member: reserved,
    other: 0,
    jobs: reserved ? 1 : 0,
    personal: 0,
  };
}

const jobInput = {
  kind: "document",
  prompt: "write it",
  input: { prompt: "write it" },
  hash: "h",
  idempotency_key: null,
  prompt_tokens: 16,
  model: null,
  reasons: false,
};

async function runEnqueue(
  client: pg.Client,
  fn: "enqueue_job" | "enqueue_in_organization",
  e: EnqueueCase,
): Promise<EnqueueObserved> {
  const r = enqueueRows(e);
  await client.query("begin");
  try {
    const { org, a, b } = await organization(client, "pool-enqueue", r.cap);
    if (!e.noRows)
      await setCounters(client, org, "jobs", {
        pool: r.pool,
        paid: 0,
        members: [
          [a, r.member],
          [b, r.pool - r.member],
        ],
      });
    if (r.activeJob)
      await client.query(
        `insert into public.generation_jobs (user_id, organization_id, status, prompt,
           request_hash, plan_id, period_start, meter, hold, created_at, queued_at, updated_at)
         values ($1, $2, 'queued', 'earlier', 'h0', 'pool-enqueue', $3, 'jobs', $4, $5, $5, $5)`,
        [a, org, DAY, HOLD, s(-60)],
      );
    const before = await counters(client, org, a, b);
    let outcome: string;
    if (fn === "enqueue_job") {
      outcome = (
        await client.query(
          `select public.enqueue_job(p_user_id => $1, p_prompt => 'write it', p_now => $2,
             p_organization_id => $3) as r`,
          [a, T, org],
        )
      ).rows[0].r.outcome;
    } else {
      // The statement alone, as enqueue_job calls it once its read's checks passed: its guards
      // read the rows as they are now, whatever the read saw.
      await client.query("savepoint reserve");
      try {
        outcome = (
          await client.query(
            `select private.enqueue_in_organization($1, $2, p, $3, $4, 0, $5, $6, $7) as r
             from public.plans p where p.id = 'pool-enqueue'`,
            [org, a, DAY, r.cap, HOLD, jobInput, T],
          )
        ).rows[0].r.outcome;
      } catch (error) {
        expect(String(error)).toMatch(/member cap guard refused after the pool reservation/);
        await client.query("rollback to savepoint reserve");
        outcome = "raised";
      }
    }
    const after = await counters(client, org, a, b);
    return {
      outcome,
      pool: (after.pool ?? 0) - (before.pool ?? 0),
      member: (after.a ?? 0) - (before.a ?? 0),
      other: (after.b ?? 0) - (before.b ?? 0),
      jobs: after.jobs - before.jobs,
      personal: after.personal,
    };
  } finally {
    await client.query("rollback");
  }
}

// the tests ----------------------------------------------------------------------------------------

const FNS = Object.keys(poolTransitions) as PoolFnName[];

describe("the pool table is a function", () => {
  test.each(FNS)("%s: every state and argument has a row", (fn) => {
    for (const f of allPoolFacts(poolTransitions[fn]))
      for (const args of allPoolArgs(poolTransitions[fn]))
        expect(
          poolRowFor(poolTransitions[fn], f, args),
          JSON.stringify({ fn, f, args }),
        ).toBeDefined();
  });
});

/** Runs the cases of `fn` against `table`; the mismatches (all, or the first `stopAt`). */
async function mismatches(table: PoolTable, fn: PoolFnName, stopAt = Infinity) {
  const found: unknown[] = [];
  const rowsSeen = new Set<number>();
  const seen = (f: PoolFacts, args: PoolArgs) => {
    const row = poolRowFor(table[fn], f, args);
    if (row) rowsSeen.add(table[fn].rows.indexOf(row));
  };
  if (fn === "enqueue_job" || fn === "enqueue_in_organization") {
    const cases = enqueueCases(fn);
    await onClients(3, cases, async (client, e) => {
      if (found.length >= stopAt) return;
      seen(e.f, { claim: "none", message: "none" });
      const got = await runEnqueue(client, fn, e);
      const want = expectedEnqueue(table, fn, e.f);
      if (JSON.stringify(got) !== JSON.stringify(want))
        found.push({ case: e, rows: enqueueRows(e), model: want, sql: got });
    });
    return { found, rowsSeen, cases: cases.length };
  }
  const cases = endingCases(fn);
  await onClients(3, cases, async (client, c) => {
    if (found.length >= stopAt) return;
    seen(c.f, c.args);
    const got = await runEnding(client, c);
    const want = expectedEnding(table, c, got);
    if (JSON.stringify(got) !== JSON.stringify(want))
      found.push({ case: c, model: want, sql: got });
  });
  return { found, rowsSeen, cases: cases.length };
}

describe("the SQL does what the pool table says, on real rows", () => {
  test.each(FNS)(
    "%s: every row, in every state the SQL can be in",
    async (fn) => {
      const { found, rowsSeen, cases } = await mismatches(poolTransitions, fn);
      expect(found.slice(0, 5), `${found.length} of ${cases} cases differ`).toEqual([]);
      // Every row of the table is exercised by some case.
      expect([...rowsSeen].sort((x, y) => x - y)).toEqual(
        poolTransitions[fn].rows.map((_, i) => i),
      );
    },
    120_000,
  );

  const tableMutants = Object.entries(poolMutants).filter(([, m]) => m.table !== poolTransitions);
  test.each(tableMutants)(
    "the check has teeth: the mutant table %s disagrees with the SQL",
    async (_name, mutant) => {
      const changed = FNS.filter(
        (fn) => JSON.stringify(mutant.table[fn]) !== JSON.stringify(poolTransitions[fn]),
      );
      expect(changed.length).toBeGreaterThan(0);
      // Each changed function on its own disagrees.
      for (const fn of changed)
        expect((await mismatches(mutant.table, fn, 1)).found.length, fn).toBeGreaterThan(0);
    },
    120_000,
  );
});

// the races ------------------------------------------------------------------------------------------

/** A connection of its own, committing: the races need two transactions at once. */
async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: databaseUrl(), options: "-c TimeZone=UTC" });
  await c.connect();
  return c;
}

/** Waits until `pid`'s backend waits on a lock (the row's, or the advisory lock). */
async function waitsOnLock(admin: pg.Client, pid: number, kind: RegExp): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await admin.query(
      "select wait_event_type, wait_event from pg_stat_activity where pid = $1",
      [pid],
    );
    if (rows[0]?.wait_event_type === "Lock" && kind.test(rows[0].wait_event)) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`backend ${pid} never waited on a ${kind} lock`);
}

const enqueueA = (c: pg.Client, user: string, org: string) =>
  c
    .query(
      `select public.enqueue_job(p_user_id => $1, p_prompt => $2, p_now => $3,
         p_organization_id => $4) as r`,
      [user, `race ${randomUUID()}`, T, org],
    )
    .then((r) => r.rows[0].r.outcome as string);

/** The read's facts (and the statement's) on the rows as they are. */
async function facts(admin: pg.Client, org: string, user: string, cap: number | null) {
  const c = await counters(admin, org, user, user);
  const active = (
    await admin.query(
      `select count(*)::int as n from public.generation_jobs
       where organization_id = $1 and user_id = $2 and status in ('queued', 'running')`,
      [org, user],
    )
  ).rows[0].n as number;
  return {
    ...allPoolFacts(poolTransitions.enqueue_job)[0],
    poolFits: (c.pool ?? 0) + HOLD <= LIMIT,
    capFits: cap === null || (c.a ?? 0) + HOLD <= cap,
    activeLeft: active < MAX_ACTIVE,
  } as PoolFacts;
}

describe("the enqueue's two steps, raced on real connections", () => {
  test("another member's enqueue between the read and the upsert: the statement's guard refuses, pool_exhausted, nothing held", async () => {
    const [admin, first, second] = [await connect(), await connect(), await connect()];
    try {
      const { org, a, b } = await organization(admin, "pool-enqueue");
      // Room for one more hold: 2 of 5 used, by B.
      await setCounters(admin, org, "jobs", { pool: 2, paid: 0, members: [[b, 2]] });
      const read = await facts(admin, org, a, null);
      await first.query("begin");
      expect(await enqueueA(first, b, org)).toBe("enqueued"); // holds the pool row
      // What B's commit leaves, as B's own transaction sees it: the rows A's statement locks.
      const locked = await facts(first, org, a, null);
      const pid = (await second.query("select pg_backend_pid() as p")).rows[0].p as number;
      const racing = enqueueA(second, a, org); // reads 2 of 5, then waits for the pool row
      await waitsOnLock(admin, pid, /^(tuple|transactionid)$/);
      await first.query("commit");
      const got = await racing;
      const after = await counters(admin, org, a, b);
      const want = expectedEnqueue(poolTransitions, "enqueue_job", read, locked);
      expect([read.poolFits, want.outcome]).toEqual([true, "pool_exhausted"]);
      expect({ outcome: got, pool: after.pool, member: after.a, jobs: after.jobs }).toEqual({
        outcome: want.outcome,
        pool: 4,
        member: null,
        jobs: 0,
      });
    } finally {
      await first.query("rollback").catch(() => undefined);
      await Promise.all([admin.end(), first.end(), second.end()]);
    }
  });

  test("one member's two enqueues take turns on their lock: the second reads the first's hold, member_cap_reached at the read", async () => {
    const [admin, first, second] = [await connect(), await connect(), await connect()];
    try {
      const cap = HOLD;
      const { org, a, b } = await organization(admin, "pool-enqueue", cap);
      await first.query("begin");
      expect(await enqueueA(first, a, org)).toBe("enqueued"); // holds A's lock
      const pid = (await second.query("select pg_backend_pid() as p")).rows[0].p as number;
      const racing = enqueueA(second, a, org); // waits for A's lock, before its read
      await waitsOnLock(admin, pid, /^advisory$/);
      await first.query("commit");
      const read = await facts(admin, org, a, cap); // what the second's read now sees
      const got = await racing;
      const after = await counters(admin, org, a, b);
      const want = expectedEnqueue(poolTransitions, "enqueue_job", read);
      expect(want.outcome).toBe("member_cap_reached");
      expect({ outcome: got, pool: after.pool, member: after.a, jobs: after.jobs }).toEqual({
        outcome: want.outcome,
        pool: HOLD,
        member: HOLD,
        jobs: 1,
      });
    } finally {
      await first.query("rollback").catch(() => undefined);
      await Promise.all([admin.end(), first.end(), second.end()]);
    }
  });
});
