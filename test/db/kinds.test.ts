/**
 * Job kinds on the real database (docs/DESIGN.md#job-kinds): the kinds are lib/kinds's list, a
 * kind the plan does not offer or that does not exist holds nothing, a job plan holds the kind's
 * units and gives them all back (or keeps them all) in one transition, the idempotency hash of an
 * extraction is its kind and canonical input, and racing enqueues of mixed kinds never pass the
 * limit.
 */
import { describe, expect, test } from "vitest";
import { KIND_IDS } from "../../lib/kinds/index.ts";
import { addSeconds, at, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const T0 = at("2026-03-10T12:00:00Z");
const db = dbFixture({ fresh: true, service: 30, now: T0 });
const { svc, admin } = db;

const schema = {
  type: "object",
  properties: { name: { type: "string" }, age: { type: ["integer", "null"] } },
  required: ["name", "age"],
  additionalProperties: false,
};
const text = "Ada Lovelace was 36.";

function extract(user: string, over: Record<string, unknown> = {}) {
  return rpc(svc, "enqueue_job", {
    p_user_id: user,
    p_prompt: text,
    p_kind: "extract",
    p_input: { text, schema },
    p_prompt_tokens: 500,
    p_now: T0,
    ...over,
  });
}

/** The extraction's worker answers Ada's valid JSON, billed `prompt` + `completion`, at T0 + 5 s. */
const completedWithAda = (jobId: string, prompt: number, completion: number) =>
  rpc(svc, "complete_job", {
    p_job_id: jobId,
    p_attempt: 1,
    p_output: '{"name":"Ada Lovelace","age":36}',
    p_usage: { prompt_tokens: prompt, completion_tokens: completion, source: "provider" },
    p_now: addSeconds(T0, 5),
  });

const jobCount = async (user: string) =>
  (
    await admin.query("select count(*)::int as n from public.generation_jobs where user_id = $1", [
      user,
    ])
  ).rows[0].n;

describe("job kinds", () => {
  test("public.job_kinds holds exactly lib/kinds's list", async () => {
    const { rows } = await admin.query("select id from public.job_kinds order by id");
    expect(rows.map((r) => r.id)).toEqual([...KIND_IDS].sort());
  });

  test("a plan inserted as before offers documents at 1 unit, and nothing else", async () => {
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
       values ('kinds_new_plan', 'New', 'day', 3, 1) on conflict (id) do nothing`,
    );
    const { rows } = await admin.query(
      "select kind, units from public.plan_kinds where plan_id = 'kinds_new_plan'",
    );
    expect(rows).toEqual([{ kind: "document", units: 1 }]);
  });

  test("kind_not_in_plan (free has no extract) names what the plan offers and reserves nothing", async () => {
    const user = await db.user("free");
    const r = await extract(user);
    expect(r).toEqual({
      outcome: "kind_not_in_plan",
      plan: "free",
      kinds: [{ kind: "document", units: 1 }],
    });
    expect(await db.usage(user)).toEqual({ units_used: 0, paid_refunds: 0 });
    expect(await jobCount(user)).toBe(0);
    // The day's one document still fits: nothing was held.
    expect((await db.enqueued(user)).hold).toBe(1);
  });

  test("unknown_kind reserves nothing", async () => {
    const user = await db.user("pro");
    const r = await extract(user, { p_kind: "translate" });
    expect(r).toEqual({ outcome: "unknown_kind" });
    expect(await db.usage(user)).toEqual({ units_used: 0, paid_refunds: 0 });
    expect(await jobCount(user)).toBe(0);
  });

  test("an input that is not an object is invalid_input; another kind without a token bound is a caller's bug", async () => {
    const user = await db.user("pro");
    expect(await extract(user, { p_input: JSON.stringify(["a"]) })).toEqual({
      outcome: "invalid_input",
    });
    await expect(extract(user, { p_prompt_tokens: null })).rejects.toThrow(
      /p_prompt_tokens is required/,
    );
    expect(await jobCount(user)).toBe(0);
  });

  test("a 2-unit extraction on pro holds 2, stores its kind and input, and a refund gives back 2 exactly once", async () => {
    const user = await db.user("pro");
    const r = await extract(user);
    expect(r.outcome).toBe("enqueued");
    expect(r.job).toMatchObject({
      kind: "extract",
      input: { text, schema },
      prompt: text,
      hold: 2,
    });
    expect(r.usage).toMatchObject({
      used: 2,
      kinds: [
        { kind: "document", units: 1 },
        { kind: "summary", units: 1 },
        { kind: "extract", units: 2 },
      ],
    });
    expect((await db.usage(user)).units_used).toBe(2);

    // The worker's callback: the output did not validate, `s` seconds after T0.
    const outputInvalid = (s: number) =>
      rpc(svc, "fail_job", {
        p_job_id: r.job.id,
        p_reason: "output_invalid",
        p_now: addSeconds(T0, s),
      });
    const failed = await outputInvalid(1);
    expect(failed.outcome).toBe("failed");
    expect(failed.job).toMatchObject({ captured: 0, failure_reason: "output_invalid" });
    expect((await db.usage(user)).units_used).toBe(0);
    const again = await outputInvalid(2);
    expect(again.outcome).toBe("already_final");
    const cancel = await rpc(svc, "cancel_job", { p_job_id: r.job.id, p_user_id: user });
    expect(cancel.outcome).toBe("already_finished");
    expect((await db.usage(user)).units_used).toBe(0);
    const endings = (await db.events(r.job.id)).filter((e) => e.to_status === "failed");
    expect(endings).toHaveLength(1);
    expect(endings[0].detail).toMatchObject({ refunded: true, captured: 0, released: 2 });
  });

  test("a 2-unit extraction that succeeds keeps 2; one that fails after spend past the bound keeps 2", async () => {
    const user = await db.user("pro");
    const ok = await extract(user);
    await db.started(ok.job.id);
    const done = await completedWithAda(ok.job.id, 120, 12);
    expect(done.job).toMatchObject({ status: "succeeded", captured: 2 });
    expect((await db.usage(user)).units_used).toBe(2);

    // pro's bound of refunds after spend is 20: use it up, then an output_invalid after spend keeps its 2.
    await admin.query("update public.quota_usage set paid_refunds = 20 where user_id = $1", [user]);
    const bad = await extract(user, { p_now: addSeconds(T0, 10) });
    await db.started(bad.job.id, { now: addSeconds(T0, 10) });
    const failed = await rpc(svc, "fail_job", {
      p_job_id: bad.job.id,
      p_reason: "output_invalid",
      p_attempt: 1,
      p_usage: { prompt_tokens: 120, completion_tokens: 30, source: "provider" },
      p_now: addSeconds(T0, 11),
    });
    expect(failed.job).toMatchObject({
      status: "failed",
      captured: 2,
      refund_withheld: "paid_refund_limit",
    });
    expect((await db.usage(user)).units_used).toBe(4);
  });

  test("a token plan's extraction holds its input bound plus the output bound, and captures what it used", async () => {
    const user = await db.user("team");
    const r = await extract(user, { p_prompt_tokens: 700 });
    expect(r.job).toMatchObject({ kind: "extract", meter: "tokens", hold: 700 + 2048 });
    await db.started(r.job.id);
    const done = await completedWithAda(r.job.id, 180, 14);
    expect(done.job.captured).toBe(194);
    expect((await db.usage(user, "tokens")).units_used).toBe(194);
  });

  test("idempotency: an extraction's key matches its kind and canonical input, not its spelling; another input or kind is refused", async () => {
    const user = await db.user("pro");
    const key = "kinds-key-1";
    const first = await extract(user, { p_idempotency_key: key });
    expect(first.outcome).toBe("enqueued");
    // The same input with its keys in another order: the jsonb text is the same.
    const reordered = {
      schema: {
        additionalProperties: false,
        required: ["name", "age"],
        properties: { age: { type: ["integer", "null"] }, name: { type: "string" } },
        type: "object",
      },
      text,
    };
    const replay = await extract(user, { p_idempotency_key: key, p_input: reordered });
    expect(replay.outcome).toBe("replayed");
    expect(replay.job.id).toBe(first.job.id);
    const otherSchema = await extract(user, {
      p_idempotency_key: key,
      p_input: { text, schema: { ...schema, properties: { name: { type: "string" } } } },
    });
    expect(otherSchema.outcome).toBe("idempotency_key_reused");
    const asDocument = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: text,
      p_idempotency_key: key,
      p_now: T0,
    });
    expect(asDocument.outcome).toBe("idempotency_key_reused");
    expect((await db.usage(user)).units_used).toBe(2);
  });

  test("a replay is served whatever the plan offers now", async () => {
    const user = await db.user("pro");
    const first = await extract(user, { p_idempotency_key: "kinds-key-2" });
    expect(first.outcome).toBe("enqueued");
    await admin.query("update public.user_plans set plan_id = 'free' where user_id = $1", [user]);
    const replay = await extract(user, { p_idempotency_key: "kinds-key-2" });
    expect(replay.outcome).toBe("replayed");
    const fresh = await extract(user, { p_idempotency_key: "kinds-key-3" });
    expect(fresh.outcome).toBe("kind_not_in_plan");
  });

  test("racing enqueues of mixed kinds (real clients) never hold more than the limit, nor more active jobs", async () => {
    await admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
       values ('kinds_race', 'Race', 'day', 7, 5) on conflict (id) do nothing`,
    );
    await admin.query(
      `insert into public.plan_kinds (plan_id, kind, units) values ('kinds_race', 'extract', 2)
       on conflict (plan_id, kind) do nothing`,
    );
    for (let round = 0; round < 3; round++) {
      const user = await db.user("kinds_race");
      const results = await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          i % 2 === 0
            ? extract(user, { p_input: { text: `${text} ${i}`, schema }, p_prompt: `${text} ${i}` })
            : rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: `doc ${i}`, p_now: T0 }),
        ),
      );
      const enqueued = results.filter((r) => r.outcome === "enqueued");
      const held = enqueued.reduce((sum, r) => sum + r.job.hold, 0);
      expect(held).toBeLessThanOrEqual(7);
      expect(enqueued.length).toBeLessThanOrEqual(5);
      // A refusal means a limit was reached: the units (a 2-unit extraction no longer fits) or the
      // active jobs.
      expect(held >= 6 || enqueued.length === 5).toBe(true);
      for (const r of results)
        expect(["enqueued", "quota_exceeded", "too_many_active_jobs"]).toContain(r.outcome);
      expect((await db.usage(user)).units_used).toBe(held);
    }
  });
});
