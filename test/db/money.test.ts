import { describe, expect, test } from "vitest";
import { expectNoDrift, type Json, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { progressWriter } from "../support/db-progress.ts";

// The price book and the money meter (docs/DESIGN.md#metering-hold-and-capture): a plan names
// its model and tier, a money plan holds a call's worst case in micro-dollars and captures what
// the provider billed at the tier it served, and a reasoning job's attempt cut short costs its
// bound. Figures are worked by hand from the price book's rows (micro-dollars per million tokens):
// gpt-5.4-mini default 750,000 in / 75,000 cached / 4,500,000 out; flex half of each.
const T0 = new Date("2026-12-02T10:00:00Z");
const db = dbFixture({ fresh: true, service: 40, noDrift: "file", now: T0 });
const { svc, admin } = db;
const progressed = progressWriter(db.svc, T0);

const counter = async (user: string) => (await db.usage(user)).units_used;

/** A plan of this file's own; money plans on gpt-5.4-mini with a 1,000-token output bound. */
async function plan(
  id: string,
  p: {
    meter?: string;
    tier?: string;
    model?: string | null;
    effort?: string | null;
    units?: number;
  },
): Promise<void> {
  await admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
       max_output_tokens, meter, service_tier, model, reasoning_effort)
     values ($1, $1, 'month', $2, 20, 1000, $3, $4, $5, $6) on conflict (id) do nothing`,
    [
      id,
      p.units ?? 1_000_000,
      p.meter ?? "money",
      p.tier ?? "default",
      p.model === undefined ? "gpt-5.4-mini" : p.model,
      p.effort ?? null,
    ],
  );
}

const enqueue = (user: string, extra: Record<string, unknown> = {}): Promise<Json> =>
  rpc(svc, "enqueue_job", {
    p_user_id: user,
    p_prompt: `prompt ${Math.random()}`,
    p_prompt_tokens: 200,
    p_now: T0,
    ...extra,
  });

async function running(user: string, extra: Record<string, unknown> = {}): Promise<Json> {
  const r = await enqueue(user, extra);
  expect(r.outcome).toBe("enqueued");
  return (await db.started(r.job.id, { now: T0 })).job;
}

/** The model watch records `model`'s shutdown date, as of T0. */
const shutdownOn = (model: string, date: string): Promise<Json> =>
  rpc(svc, "record_model_catalogue", { p_model: model, p_shutdown_date: date, p_now: T0 });
const complete = (job: Json, usage: Record<string, unknown>): Promise<Json> =>
  rpc(svc, "complete_job", {
    p_job_id: job.id,
    p_attempt: 1,
    p_output: "done",
    p_now: T0,
    p_usage: { source: "provider", ...usage },
  });

describe("a plan names a model the price book prices, on a tier that model is offered on", () => {
  test("a flex plan on a model without flex cannot be saved", async () => {
    await expect(
      admin.query(
        `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
           max_output_tokens, max_paid_refunds, meter, service_tier, model)
         values ('economy_4o', 'Economy', 'month', 200, 3, 2048, 40, 'jobs', 'flex', 'gpt-4o-mini')`,
      ),
    ).rejects.toMatchObject({ code: "23503", constraint: "plans_tier_offered" });
    // Nor moved onto one: the seeded economy plan keeps its flex model.
    await expect(
      admin.query(
        "update public.plans set model = 'gpt-4o-mini', reasoning_effort = null where id = 'economy'",
      ),
    ).rejects.toMatchObject({ code: "23503", constraint: "plans_tier_offered" });
  });

  test("a flex, priority or money plan must name its model; an unknown model is refused", async () => {
    for (const [tier, meter] of [
      ["flex", "jobs"],
      ["priority", "jobs"],
      ["default", "money"],
    ]) {
      await expect(
        plan(`unnamed_${tier}_${meter}`, { tier, meter, model: null }),
      ).rejects.toMatchObject({ code: "23514", constraint: "plans_priced_plans_name_a_model" });
    }
    await expect(plan("unknown_model", { model: "gpt-9" })).rejects.toMatchObject({
      code: "23503",
    });
  });

  test("an output bound under OpenAI's minimum of 16, or over the model's largest, is refused", async () => {
    await expect(
      admin.query("update public.plans set max_output_tokens = 15 where id = 'free'"),
    ).rejects.toMatchObject({ code: "23514", constraint: "plans_max_output_tokens_check" });
    await plan("fouro_big", { meter: "jobs", model: "gpt-4o-mini" });
    await expect(
      admin.query("update public.plans set max_output_tokens = 16385 where id = 'fouro_big'"),
    ).rejects.toMatchObject({ code: "23514", constraint: "plans_output_within_model" });
  });

  test("a reasoning effort the model does not take is refused", async () => {
    await expect(
      plan("fouro_effort", { model: "gpt-4o-mini", effort: "low" }),
    ).rejects.toMatchObject({ code: "23514", constraint: "plans_effort_of_model" });
    await expect(plan("mini_effort", { effort: "banana" })).rejects.toMatchObject({
      code: "23514",
      constraint: "plans_effort_of_model",
    });
    await expect(
      plan("unnamed_effort", { model: null, meter: "jobs", effort: "banana" }),
    ).rejects.toMatchObject({ code: "23514", constraint: "plans_reasoning_effort_check" });
  });

  test("the seeded economy plan runs on a flex model", async () => {
    const { rows } = await admin.query(
      `select p.model, p.service_tier from public.plans p
       join public.model_tiers t on t.model_id = p.model and t.tier = p.service_tier
       where p.id = 'economy'`,
    );
    expect(rows).toEqual([{ model: "gpt-5.4-mini", service_tier: "flex" }]);
  });
});

describe("a money plan holds the call's worst case and captures what the provider billed", () => {
  test("the hold: the prompt's bound at the input price plus the output bound at the output price", async () => {
    await plan("money_std", {});
    const user = await db.user("money_std");
    const r = await enqueue(user);
    // 200 × 0.75 + 1,000 × 4.5 = 150 + 4,500 micro-dollars
    expect(r).toMatchObject({
      outcome: "enqueued",
      job: { meter: "money", hold: 4650, model: "gpt-5.4-mini", service_tier: "default" },
      usage: { meter: "money", used: 4650 },
    });
    expect(await counter(user)).toBe(4650);
  });

  test("a flex plan holds at the standard price (flex may be served at standard) and captures at the tier served", async () => {
    await plan("money_flex", { tier: "flex" });
    const user = await db.user("money_flex");
    const flexJob = await running(user);
    expect(flexJob.hold).toBe(4650);
    // Served at flex: 80 fresh × 0.375 + 100 cached × 0.0375 + 600 × 2.25 = 1,383.75 → 1,384
    const r = await complete(flexJob, {
      prompt_tokens: 180,
      cached_tokens: 100,
      completion_tokens: 600,
      service_tier: "flex",
    });
    expect(r.job).toMatchObject({ status: "succeeded", captured: 1384 });
    expect(await counter(user)).toBe(1384);
    // The same usage served at standard: 80 × 0.75 + 100 × 0.075 + 600 × 4.5 = 2,767.5 → 2,768
    const stdJob = await running(user);
    const s = await complete(stdJob, {
      prompt_tokens: 180,
      cached_tokens: 100,
      completion_tokens: 600,
      service_tier: "default",
    });
    expect(s.job.captured).toBe(2768);
    expect(await counter(user)).toBe(1384 + 2768);
  });

  test("a capture never passes the hold, whatever the usage says", async () => {
    await plan("money_cap", {});
    const user = await db.user("money_cap");
    const job = await running(user);
    const r = await complete(job, {
      prompt_tokens: 200,
      completion_tokens: 5000,
      service_tier: "priority",
    });
    expect(r.job).toMatchObject({ captured: 4650, hold: 4650 });
  });

  test("a refused quota holds nothing: the limit is in micro-dollars", async () => {
    await plan("money_tiny", { units: 10_000 });
    const user = await db.user("money_tiny");
    expect((await enqueue(user)).outcome).toBe("enqueued");
    expect((await enqueue(user)).outcome).toBe("enqueued");
    const third = await enqueue(user);
    expect(third).toMatchObject({ outcome: "quota_exceeded", hold: 4650 });
    expect(await counter(user)).toBe(9300);
  });

  test("a queued cancel releases the whole hold; a running cancel of a non-reasoning call captures its prompt and progress", async () => {
    await plan("money_none", { effort: "none" });
    const user = await db.user("money_none");
    const queued = await enqueue(user);
    const c = await rpc(svc, "cancel_job", { p_job_id: queued.job.id, p_user_id: user, p_now: T0 });
    expect(c.job).toMatchObject({ status: "canceled", captured: 0 });
    const job = await running(user);
    expect(job.reasons).toBe(false);
    await progressed(job.id, { tokens: 30 });
    // 200 × 0.75 + 30 × 4.5 = 285 (a count of ours: at the held prices)
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r.job).toMatchObject({ status: "canceled", captured: 285 });
    expect(await counter(user)).toBe(285);
  });
});

describe("hidden reasoning cut short costs the attempt's bound", () => {
  test("a running cancel of a reasoning call captures its hold, on a money plan", async () => {
    await plan("money_reason", {});
    const user = await db.user("money_reason");
    const job = await running(user);
    expect(job.reasons).toBe(true);
    // Nothing visible streamed yet: the provider bills the reasoning so far and says nothing.
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 });
    expect(r.job).toMatchObject({ status: "canceled", captured: 4650 });
  });

  test("on a token plan, the deployment's reasoning model makes a cancel capture the hold; a non-reasoning one its count", async () => {
    await plan("tokens_thinking", { meter: "tokens", model: null });
    const reasoning = await db.user("tokens_thinking");
    const job = await running(reasoning, { p_model: "gpt-5.4-mini" });
    expect(job).toMatchObject({ model: "gpt-5.4-mini", reasons: true, hold: 200 + 1000 });
    const r = await rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: reasoning, p_now: T0 });
    expect(r.job.captured).toBe(1200);
    // team sends reasoning effort none: no hidden reasoning, its cancel captures its count.
    const team = await db.user("team");
    const plainTeam = await running(team, { p_model: "gpt-5.4-mini" });
    expect(plainTeam.reasons).toBe(false);

    const plain = await db.user("tokens_thinking");
    const other = await running(plain, { p_model: "gpt-4o-mini" });
    expect(other.reasons).toBe(false);
    const s = await rpc(svc, "cancel_job", { p_job_id: other.id, p_user_id: plain, p_now: T0 });
    expect(s.job.captured).toBe(200);
  });

  test("a model the price book does not know is taken to reason", async () => {
    await plan("tokens_thinking", { meter: "tokens", model: null });
    const user = await db.user("tokens_thinking");
    const job = await running(user, { p_model: "some-compatible-model" });
    expect(job).toMatchObject({ model: "some-compatible-model", reasons: true });
  });

  test("a timeout the worker counted costs the bound; the provider's own report is what it says; a refused call costs nothing", async () => {
    await plan("tokens_thinking", { meter: "tokens", model: null });
    const user = await db.user("tokens_thinking");
    const job = await running(user, { p_model: "gpt-5.4-mini" });
    const r = await rpc(svc, "release_job", {
      p_job_id: job.id,
      p_attempt: 1,
      p_now: T0,
      p_usage: { prompt_tokens: 190, completion_tokens: 12, source: "counted" },
    });
    expect(r).toMatchObject({ outcome: "released", job: { consumed: 1200 } });
    const again = await db.started(job.id, { now: T0 });
    // A 400 bills nothing: 0 and 0, counted, costs 0 even on a reasoning model.
    const f = await rpc(svc, "fail_job", {
      p_job_id: job.id,
      p_reason: "model_refused",
      p_attempt: again.job.attempts,
      p_now: T0,
      p_usage: { prompt_tokens: 0, completion_tokens: 0, source: "counted" },
    });
    expect(f.job).toMatchObject({ status: "failed", captured: 1200 });

    const reported = await db.user("tokens_thinking");
    const done = await running(reported, { p_model: "gpt-5.4-mini" });
    const c = await complete(done, { prompt_tokens: 190, completion_tokens: 700 });
    expect(c.job.captured).toBe(890);
  });
});

describe("a model past its shutdown date", () => {
  test("refuses new jobs, holding nothing; 20 days before, jobs still run", async () => {
    await plan("money_retiring", { model: "gpt-5.4-nano" });
    const user = await db.user("money_retiring");
    try {
      await shutdownOn("gpt-5.4-nano", "2026-12-22");
      expect((await enqueue(user)).outcome).toBe("enqueued");
      const r = await shutdownOn("gpt-5.4-nano", "2026-12-02");
      expect(r).toMatchObject({ outcome: "recorded", changed: true });
      const used = await counter(user);
      const refused = await enqueue(user);
      expect(refused).toEqual({
        outcome: "model_retired",
        model: "gpt-5.4-nano",
        shutdown_date: "2026-12-02",
      });
      expect(await counter(user)).toBe(used);
    } finally {
      await rpc(svc, "record_model_catalogue", { p_model: "gpt-5.4-nano", p_shutdown_date: null });
    }
  });

  test("the deployment's model is checked too, for plans that name none", async () => {
    const user = await db.user("pro");
    try {
      await shutdownOn("gpt-4o-mini", "2026-11-30");
      expect((await enqueue(user, { p_model: "gpt-4o-mini" })).outcome).toBe("model_retired");
      expect((await enqueue(user, { p_model: "gpt-5.4-mini" })).outcome).toBe("enqueued");
    } finally {
      await rpc(svc, "record_model_catalogue", { p_model: "gpt-4o-mini", p_shutdown_date: null });
    }
  });

  test("a model the price book lacks is not_priced to the watch", async () => {
    expect(
      await rpc(svc, "record_model_catalogue", { p_model: "gpt-9", p_shutdown_date: null }),
    ).toEqual({ outcome: "not_priced" });
  });
});

describe("a plan may name a model per kind", () => {
  /** A kind of `planId` on `model`. */
  const kindOn = (planId: string, kind: string, model: string | null, units = 1) =>
    admin.query(
      `insert into public.plan_kinds (plan_id, kind, units, model) values ($1, $2, $3, $4)
       on conflict (plan_id, kind) do update set model = excluded.model`,
      [planId, kind, units, model],
    );

  test("a kind's model must offer the plan's tier, take its effort and allow its output bound", async () => {
    // economy is on flex at low effort: gpt-4o-mini has neither.
    await expect(kindOn("economy", "summary", "gpt-4o-mini")).rejects.toMatchObject({
      code: "23514",
      constraint: "plan_kinds_tier_offered",
    });
    await plan("kinds_effort", { effort: "low" });
    await expect(kindOn("kinds_effort", "extract", "gpt-4o-mini")).rejects.toMatchObject({
      code: "23514",
      constraint: "plan_kinds_effort_of_model",
    });
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
         max_output_tokens, meter, model) values ('kinds_long', 'L', 'month', 10, 1, 20000, 'jobs', 'gpt-5.4')`,
    );
    await expect(kindOn("kinds_long", "extract", "gpt-4o-mini")).rejects.toMatchObject({
      code: "23514",
      constraint: "plan_kinds_output_within_model",
    });
    await expect(kindOn("kinds_long", "extract", "gpt-9")).rejects.toMatchObject({
      code: "23503",
      constraint: "plan_kinds_model_fkey",
    });
    // Nor can the plan move where a kind's model cannot follow.
    await plan("kinds_move", { model: "gpt-5.4-mini" });
    await kindOn("kinds_move", "extract", "gpt-5.4-nano");
    await expect(
      admin.query("update public.plans set service_tier = 'priority' where id = 'kinds_move'"),
    ).rejects.toMatchObject({ code: "23514", constraint: "plan_kinds_tier_offered" });
    await expect(
      admin.query("update public.plans set max_output_tokens = 200000 where id = 'kinds_move'"),
    ).rejects.toMatchObject({ code: "23514", constraint: "plans_output_within_model" });
    // The nano model takes every effort the mini does, and priority on the plan's own model is fine
    // once the kind follows.
    await kindOn("kinds_move", "extract", "gpt-5.4");
    await admin.query("update public.plans set service_tier = 'priority' where id = 'kinds_move'");
  });

  test("a job of the kind runs on, is held at and is watched on the kind's model", async () => {
    await plan("kinds_money", {});
    await kindOn("kinds_money", "extract", "gpt-5.4");
    const user = await db.user("kinds_money");
    const doc = await enqueue(user);
    // 200 × 0.75 + 1,000 × 4.5 on the plan's gpt-5.4-mini
    expect(doc.job).toMatchObject({ kind: "document", model: "gpt-5.4-mini", hold: 4650 });
    const extract = await enqueue(user, { p_kind: "extract", p_input: { text: "t", schema: {} } });
    // 200 × 2.5 + 1,000 × 15 on the kind's gpt-5.4
    expect(extract.job).toMatchObject({ kind: "extract", model: "gpt-5.4", hold: 15500 });
    expect(await counter(user)).toBe(4650 + 15500);

    const watched = (await rpc(svc, "watched_models", { p_default_model: "gpt-5.4-mini" })).models;
    expect(watched.find((m: Json) => m.model === "gpt-5.4").plans).toContain("kinds_money");
    expect(watched.find((m: Json) => m.model === "gpt-5.4-mini").plans).toContain("kinds_money");

    // A job plan's worst case prices every billed call at the dearest model its kinds run on.
    await plan("kinds_jobs", { meter: "jobs", units: 10 });
    const worst = async () =>
      (
        await admin.query(
          `select billed_calls, worst_case_micro_usd::bigint as w
           from public.plan_worst_case() where plan_id = 'kinds_jobs'`,
        )
      ).rows[0];
    const before = await worst();
    await kindOn("kinds_jobs", "extract", "gpt-5.4", 2);
    const after = await worst();
    // Documents still cost 1 unit: as many billed calls, each at (8,008 × in + 1,000 × out).
    expect(after.billed_calls).toBe(before.billed_calls);
    expect([before.w, after.w]).toEqual([
      String(Math.ceil(before.billed_calls * (8008 * 0.75 + 1000 * 4.5))),
      String(Math.ceil(before.billed_calls * (8008 * 2.5 + 1000 * 15))),
    ]);
  });

  test("a kind's model past its shutdown date refuses that kind only, holding nothing", async () => {
    await plan("kinds_retire", {});
    await kindOn("kinds_retire", "extract", "gpt-5.4-nano");
    const user = await db.user("kinds_retire");
    try {
      await shutdownOn("gpt-5.4-nano", "2026-12-01");
      expect(
        await enqueue(user, { p_kind: "extract", p_input: { text: "t", schema: {} } }),
      ).toEqual({ outcome: "model_retired", model: "gpt-5.4-nano", shutdown_date: "2026-12-01" });
      expect(await counter(user)).toBe(0);
      expect((await enqueue(user)).job.model).toBe("gpt-5.4-mini");
    } finally {
      await rpc(svc, "record_model_catalogue", { p_model: "gpt-5.4-nano", p_shutdown_date: null });
    }
  });
});

describe("races on a money plan: counter = open holds + captures", () => {
  const ROUNDS = 30;

  test(`20 concurrent enqueues at the money limit never over-hold (${ROUNDS} rounds)`, async () => {
    // Each holds 4,650: four fit in 20,000, the fifth would not.
    await plan("money_race", { units: 20_000 });
    const users: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("money_race");
      users.push(user);
      const results = await Promise.all(Array.from({ length: 20 }, () => enqueue(user)));
      expect(results.filter((r) => r.outcome === "enqueued")).toHaveLength(4);
      expect(results.filter((r) => r.outcome === "quota_exceeded")).toHaveLength(16);
      expect(await counter(user)).toBe(18_600);
    }
    await expectNoDrift(admin, users);
  });

  test(`cancel, complete and the failure callback racing one running money job: one capture, exact (${ROUNDS} rounds)`, async () => {
    await plan("money_race_end", { effort: "none" });
    const users: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const user = await db.user("money_race_end");
      users.push(user);
      const job = await running(user);
      await progressed(job.id, { tokens: 30, text: "p" });
      const results = await Promise.all([
        rpc(svc, "cancel_job", { p_job_id: job.id, p_user_id: user, p_now: T0 }),
        complete(job, { prompt_tokens: 190, completion_tokens: 700, service_tier: "default" }),
        rpc(svc, "fail_job", { p_job_id: job.id, p_reason: "delivery_failed", p_now: T0 }),
      ]);
      const won = results.filter((r) => ["canceled", "completed", "failed"].includes(r.outcome));
      expect(won).toHaveLength(1);
      // cancel / callback: 200 × 0.75 + 30 × 4.5 = 285; completion: 190 × 0.75 + 700 × 4.5 = 3,292.5 → 3,293
      const expected = { canceled: 285, completed: 3293, failed: 285 }[won[0].outcome as string];
      expect(await counter(user)).toBe(expected);
    }
    await expectNoDrift(admin, users);
  });
});

describe("every plan's worst-case bill comes from the price book", () => {
  test("per plan, in micro-dollars", async () => {
    const { rows } = await admin.query(
      `select plan_id, meter, model, billed_calls, worst_case_micro_usd
       from public.plan_worst_case('gpt-5.4-mini') where plan_id in ('free', 'pro', 'team', 'economy')`,
    );
    expect(rows).toEqual([
      // (200 / 1 + 40) × 2 calls × (8,008 × 0.75 + 2,048 × 4.5) at the standard price (flex's hold)
      {
        plan_id: "economy",
        meter: "jobs",
        model: "gpt-5.4-mini",
        billed_calls: 480,
        worst_case_micro_usd: "7306560",
      },
      // (1 + 1) × 2 × (8,008 × 0.75 + 512 × 4.5)
      {
        plan_id: "free",
        meter: "jobs",
        model: "gpt-5.4-mini",
        billed_calls: 4,
        worst_case_micro_usd: "33240",
      },
      // (100 + 20) × 2 × (8,008 × 0.75 + 8,000 × 4.5)
      {
        plan_id: "pro",
        meter: "jobs",
        model: "gpt-5.4-mini",
        billed_calls: 240,
        worst_case_micro_usd: "10081440",
      },
      // 2 × 2,000,000 tokens × 4.5
      {
        plan_id: "team",
        meter: "tokens",
        model: "gpt-5.4-mini",
        billed_calls: null,
        worst_case_micro_usd: "18000000",
      },
    ]);
  });
});
