/**
 * The model check on every `npm test`: spin explores every interleaving of the bounded
 * profile (spec/check.ts), the real table must hold every invariant and never leave a job
 * stuck, and every mutant must be caught with a counterexample; the same for the organization
 * pool's model (spec/pool.pml) and its mutants. `npm run spec:check` runs the full profiles.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { checkModel, POOL_PROFILES, PROFILES } from "../../spec/check.ts";
import { mutants, poolMutants } from "../../spec/mutants.ts";
import { poolTransitions } from "../../spec/pool.ts";
import { generatePoolPromela } from "../../spec/pool-promela.ts";

const bounds = PROFILES.bounded;
// The real table's two big searches (millions of states) run about twice as fast compiled with
// -O2; the small ones (the metered plan, the mutants) take less than an -O2 compile. Every pan
// is cached by what it is built from (spec/check.ts), so a second run compiles nothing.
const quickCompile = true;
// The bounded safety search covers about 3.9 million states (about 50 s alone on two cores);
// with a cold cache and a machine loaded 8 times over, liveness and its -O2 compile took 240 s.
// A time limit, not a bound the check asserts.
const SEARCH_MS = 600_000;

/** Checks the real table in `mode`: no counterexample, no error, the whole space searched. */
async function expectHolds(
  mode: "safety" | "liveness",
  flags: string[] = [],
  within: typeof bounds = bounds,
  quick = quickCompile,
) {
  const r = await checkModel({ bounds: within, mode, flags, quickCompile: quick });
  expect(r.trail).toEqual([]);
  expect(r.errors).toBe(0);
  expect(r.complete).toBe(true);
  return r;
}

describe("the job model, every interleaving of the bounded profile", () => {
  test(
    "safety: one fate, one refund, no completion over a cancel or a failure, no drift, no stolen claim",
    async () => {
      const r = await expectHolds("safety", [], bounds, false);
      expect(r.states).toBeGreaterThan(100_000);
    },
    SEARCH_MS,
  );

  test(
    "liveness: every enqueued job ends, under weak fairness, even when every message is lost",
    async () => {
      await expectHolds("liveness", [], bounds, false);
    },
    SEARCH_MS,
  );

  // A metered plan here without the provider's 429 (327 thousand states, ~4 s, against 9.5
  // million and ~70 s with it): a 429 bills nothing, and its requeue and give-up rows are held
  // to the SQL by the conformance test. `npm run spec:check` runs the metered plan on the
  // bounded profile, the 429 included, in safety and in liveness (its rows only end jobs sooner,
  // by the attempt budget, than the job plan's, whose liveness runs above).
  test(
    "metered plan (tokens or money), safety: the hold settles once, the counter is the hold or the capture, the capture covers the bill up to the hold, no attempt past twice the hold",
    async () => {
      const r = await expectHolds("safety", ["METERED"], { ...bounds, QUOTA_429: 0 });
      expect(r.states).toBeGreaterThan(300_000);
    },
    SEARCH_MS,
  );
});

describe("mutants: spin finds a counterexample for each", () => {
  test.each(Object.entries(mutants))(
    "%s",
    async (_name, m) => {
      const r = await checkModel({
        bounds,
        mode: m.mode,
        table: m.table,
        quickCompile,
        ...(m.flags ? { flags: m.flags } : {}),
      });
      expect(r.errors).toBeGreaterThan(0);
      expect(r.violation).toMatch(m.mode === "safety" ? /assertion violated/ : /acceptance cycle/);
      // the replayed counterexample reaches the violation
      expect(r.trail.length).toBeGreaterThan(3);
    },
    SEARCH_MS,
  );
});

test(
  "a pan is built once: the same model again comes from the cache, a new define is built anew",
  async () => {
    const [, mutant] =
      Object.entries(mutants).find(([, m]) => m.mode === "safety" && !m.flags) ?? [];
    if (!mutant) throw new Error("no safety mutant");
    // A define the model never reads: a key no earlier run can have cached.
    const probe = `UNREAD_${randomUUID().replaceAll("-", "")}`;
    const check = () =>
      checkModel({ bounds, mode: "safety", table: mutant.table, flags: [probe], quickCompile });
    const built = await check();
    const again = await check();
    expect(built.cached).toBe(false);
    expect(again.cached).toBe(true);
    expect([again.errors, again.states, again.violation]).toEqual([
      built.errors,
      built.states,
      built.violation,
    ]);
    expect(again.errors).toBeGreaterThan(0);
  },
  SEARCH_MS,
);

describe("the pool model: two members racing on one pool, every interleaving of the bounded profile", () => {
  const pool = { model: "pool", bounds: POOL_PROFILES.bounded, quickCompile } as const;
  /** Whether the search reached the generated row that prints `fn(job %d) -> outcome`. */
  const reached = (unreached: string[], fn: string, outcome: string) => {
    const lines = generatePoolPromela(poolTransitions).split("\n");
    const at = lines.findIndex((l) => l.includes(`"[%d] ${fn}(job %d) -> ${outcome}\\n"`)) + 1;
    expect(at, `${fn} -> ${outcome} is a generated row`).toBeGreaterThan(0);
    return !unreached.some((u) => u.startsWith(`pool-transitions.pml:${at} `));
  };

  test(
    "safety: the pool never over its limit, no member over their cap or the active bound, the pool the sum of its members and each member of their jobs' holds and captures, each hold settled once",
    async () => {
      const r = await checkModel({ ...pool, mode: "safety" });
      expect(r.trail).toEqual([]);
      expect(r.errors).toBe(0);
      expect(r.complete).toBe(true);
      expect(r.states).toBeGreaterThan(50_000);
      // Every refusal is reached, the reserving statement's too (the race its guard exists for:
      // another member took the room since the read); its raise, which the SQL says the user's
      // lock rules out, never is.
      for (const outcome of ["pool_exhausted", "member_cap_reached", "too_many_active_jobs"])
        expect(reached(r.unreached, "enqueue_job", outcome), outcome).toBe(true);
      expect(reached(r.unreached, "enqueue_in_organization", "pool_exhausted")).toBe(true);
      expect(reached(r.unreached, "enqueue_in_organization", "enqueued")).toBe(true);
      expect(reached(r.unreached, "enqueue_in_organization", "raised")).toBe(false);
    },
    SEARCH_MS,
  );

  test(
    "liveness: every request is answered and every job it enqueued ends",
    async () => {
      const r = await checkModel({ ...pool, mode: "liveness" });
      expect(r.trail).toEqual([]);
      expect(r.errors).toBe(0);
      expect(r.complete).toBe(true);
    },
    SEARCH_MS,
  );
});

describe("pool mutants: spin finds a counterexample for each", () => {
  test.each(Object.entries(poolMutants))(
    "%s",
    async (_name, m) => {
      const r = await checkModel({
        model: "pool",
        bounds: POOL_PROFILES.bounded,
        mode: "safety",
        poolTable: m.table,
        quickCompile,
        ...(m.flags ? { flags: m.flags } : {}),
      });
      expect(r.errors).toBeGreaterThan(0);
      expect(r.violation).toMatch(/assertion violated/);
      // the replayed counterexample reaches the violation
      expect(r.trail.some((l) => /assertion violated/.test(l))).toBe(true);
      expect(r.trail.length).toBeGreaterThan(3);
    },
    SEARCH_MS,
  );
});
