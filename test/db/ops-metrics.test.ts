/**
 * The operator page's SQL (supabase/migrations/20261204020000_ops_metrics.sql): each bucket
 * function on jobs whose every transition happened at a known time, in a database of its own, so
 * each bucket's counts are exact. And the window's bounds: a bad or unbounded window is refused.
 */
import { describe, expect, test } from "vitest";
import { addSeconds, at, type Json, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture({ fresh: true, noDrift: "file" });
const T0 = at("2031-01-01T00:00:00Z");
const t = (s: number) => addSeconds(T0, s);
const WINDOW = { p_from: T0, p_to: t(300), p_bucket: "1 minute" };
const usage = (prompt: number, completion: number) =>
  JSON.stringify({ prompt_tokens: prompt, completion_tokens: completion, source: "provider" });

/** The failure callback of the job's message `seq`, at `now`. */
const failureCallback = (jobId: string, seq: number, now: Date): Promise<Json> =>
  rpc(db.svc, "fail_job", { p_job_id: jobId, p_reason: "delivery_failed", p_now: now, p_seq: seq });

async function series(fn: string, args: Record<string, unknown> = WINDOW): Promise<Json[]> {
  const names = Object.keys(args);
  const { rows } = await db.svc.query(
    `select * from public.${fn}(${names.map((n, i) => `${n} => $${i + 1}`).join(", ")})`,
    names.map((n) => (args[n] instanceof Date ? (args[n] as Date).toISOString() : args[n])),
  );
  return rows;
}

// One timeline, written once (the functions only read):
//   A (team)  enqueued 10 s, claimed 20 s, completed 50 s: 10 + 20 tokens, run 30 s
//   B (pro)   enqueued 70 s, claimed 100 s, refused 130 s (model_refused, 5 + 0 tokens)
//   C (pro)   enqueued 75 s, canceled 80 s while queued (refunded)
//   D (pro)   enqueued 125 s, claimed 130 s, provider 429 at 135 s until 190 s; the old
//             message's failure callback at 140 s is superseded; the new one's at 200 s fails it
//   E (pro)   enqueued 130 s, claimed 140 s, requeued behind the closed gate at 145 s until 190 s
let built: Promise<void> | undefined;
function timeline(): Promise<void> {
  built ??= (async () => {
    const team = await db.user("team");
    const pro = await db.user("pro");
    const pro2 = await db.user("pro");
    const a = await db.enqueued(team, { now: t(10), promptTokens: 100 });
    await db.started(a.id, { now: t(20) });
    expect(
      (
        await rpc(db.svc, "complete_job", {
          p_job_id: a.id,
          p_attempt: 1,
          p_output: "done",
          p_now: t(50),
          p_usage: usage(10, 20),
        })
      ).outcome,
    ).toBe("completed");
    const b = await db.enqueued(pro, { now: t(70) });
    await db.started(b.id, { now: t(100) });
    expect(
      (
        await rpc(db.svc, "fail_job", {
          p_job_id: b.id,
          p_reason: "model_refused",
          p_attempt: 1,
          p_now: t(130),
          p_usage: usage(5, 0),
        })
      ).outcome,
    ).toBe("failed");
    const c = await db.enqueued(pro, { now: t(75) });
    expect(
      (await rpc(db.svc, "cancel_job", { p_job_id: c.id, p_user_id: pro, p_now: t(80) })).outcome,
    ).toBe("canceled");
    const d = await db.enqueued(pro2, { now: t(125) });
    await db.started(d.id, { now: t(130) });
    const requeued = await rpc(db.svc, "requeue_job", {
      p_job_id: d.id,
      p_attempt: 1,
      p_resume_at: t(190),
      p_error: "429 rate_limit_exceeded",
      p_now: t(135),
      p_count_hit: true,
      p_usage: usage(0, 0),
    });
    expect(requeued.outcome).toBe("requeued");
    const old = await failureCallback(d.id, 1, t(140));
    expect(old.outcome).toBe("superseded");
    const e = await db.enqueued(pro2, { now: t(130) });
    await db.started(e.id, { now: t(140) });
    const gated = await rpc(db.svc, "requeue_job", {
      p_job_id: e.id,
      p_attempt: 1,
      p_resume_at: t(190),
      p_error: "provider gate closed",
      p_now: t(145),
      p_count_hit: false,
    });
    expect(gated.outcome).toBe("requeued");
    const current = await failureCallback(d.id, 2, t(200));
    expect(current.outcome).toBe("failed");
    expect(
      (await rpc(db.svc, "cancel_job", { p_job_id: e.id, p_user_id: pro2, p_now: t(400) })).outcome,
    ).toBe("canceled");
  })();
  return built;
}

const bucketAt = (rows: Json[], s: number) =>
  rows.find((r) => r.bucket.getTime() === t(s).getTime());

describe("ops_job_series", () => {
  test("per minute: enqueued, endings, refunds, token holds and captures, failure callbacks and superseded ones", async () => {
    await timeline();
    const rows = await series("ops_job_series");
    expect(rows.map((r) => r.bucket.toISOString())).toEqual(
      [0, 60, 120, 180, 240].map((s) => t(s).toISOString()),
    );
    const pick = (r: Json) => ({
      enqueued: Number(r.enqueued),
      succeeded: Number(r.succeeded),
      failed: Number(r.failed),
      canceled: Number(r.canceled),
      refunded: Number(r.refunded),
      withheld: Number(r.withheld),
      tokens_held: Number(r.tokens_held),
      tokens_captured: Number(r.tokens_captured),
      failure_callbacks: Number(r.failure_callbacks),
      superseded_callbacks: Number(r.superseded_callbacks),
    });
    const zero = {
      enqueued: 0,
      succeeded: 0,
      failed: 0,
      canceled: 0,
      refunded: 0,
      withheld: 0,
      tokens_held: 0,
      tokens_captured: 0,
      failure_callbacks: 0,
      superseded_callbacks: 0,
    };
    const hold =
      (await db.admin.query("select max_output_tokens from public.plans where id = 'team'")).rows[0]
        .max_output_tokens + 100;
    expect(rows.map(pick)).toEqual([
      { ...zero, enqueued: 1, succeeded: 1, tokens_held: hold, tokens_captured: 30 },
      { ...zero, enqueued: 2, canceled: 1, refunded: 1 },
      { ...zero, enqueued: 2, failed: 1, refunded: 1, superseded_callbacks: 1 },
      { ...zero, failed: 1, refunded: 1, failure_callbacks: 1 },
      zero,
    ]);
  });

  test("failures by reason, per bucket", async () => {
    await timeline();
    const rows = await series("ops_failure_reasons");
    expect(rows.map((r) => [r.bucket.toISOString(), r.reason, Number(r.jobs)])).toEqual([
      [t(120).toISOString(), "model_refused", 1],
      [t(180).toISOString(), "delivery_failed", 1],
    ]);
  });
});

describe("ops_provider_series", () => {
  test("tokens consumed, counted 429s (not the gate's requeue), and seconds the gate was closed", async () => {
    await timeline();
    const rows = await series("ops_provider_series");
    expect(
      rows.map((r) => [Number(r.provider_tokens), Number(r.quota_429s), r.gate_closed_seconds]),
    ).toEqual([
      [30, 0, 0],
      [0, 0, 0],
      [5, 1, 45], // 135 s → 180 s
      [0, 0, 10], // 180 s → 190 s
      [0, 0, 0],
    ]);
    // the events say which requeue was a 429
    const { rows: flags } = await db.admin.query(
      "select detail->>'quota_hit' as hit from public.job_events where event = 'requeued' order by at",
    );
    expect(flags.map((f) => f.hit)).toEqual(["true", "false"]);
  });

  test("a closure that began before the window counts from the window's start", async () => {
    await timeline();
    const rows = await series("ops_provider_series", {
      p_from: t(150),
      p_to: t(210),
      p_bucket: "30 seconds",
    });
    expect(rows.map((r) => r.gate_closed_seconds)).toEqual([30, 10]);
  });
});

describe("ops_latency_series", () => {
  test("queue latency (enqueue → first claim) and run time percentiles per bucket", async () => {
    await timeline();
    const rows = await series("ops_latency_series");
    expect(
      rows.map((r) => [
        (r.bucket.getTime() - T0.getTime()) / 1000,
        r.metric,
        Number(r.jobs),
        r.p50,
        r.p99,
      ]),
    ).toEqual([
      [0, "queue_latency", 1, 10, 10],
      [0, "run_time", 1, 30, 30],
      [60, "queue_latency", 1, 30, 30],
      [120, "queue_latency", 2, 7.5, 9.95], // D 5 s, E 10 s (interpolated)
    ]);
    expect(bucketAt(rows, 180)).toBeUndefined();
  });
});

describe("ops_now", () => {
  test("stuck jobs by the sweeper's rules, and drift rows", async () => {
    await timeline();
    // At 2031-01-01 01:00 nothing of the timeline is active; a job enqueued then and never
    // delivered for 20 minutes is stuck (queued_never_delivered).
    const user = await db.user("pro");
    await db.enqueued(user, { now: t(3600) });
    const r = await rpc(db.svc, "ops_now", { p_now: t(3600 + 1200) });
    expect(r.stuck).toEqual({
      running_lease_expired: 0,
      active_past_max_age: 0,
      queued_never_delivered: 1,
    });
    expect(r.drift_rows).toBe(0);
  });
});

describe("bounds and privileges", () => {
  test.each([
    ["an empty window", { p_from: t(60), p_to: t(60), p_bucket: "1 minute" }],
    ["a zero bucket", { p_from: T0, p_to: t(60), p_bucket: "0 seconds" }],
    ["over 1000 buckets", { p_from: T0, p_to: t(7 * 86400), p_bucket: "1 minute" }],
  ])("%s is refused (22023)", async (_name, args) => {
    for (const fn of [
      "ops_job_series",
      "ops_provider_series",
      "ops_failure_reasons",
      "ops_latency_series",
    ])
      await expect(series(fn, args)).rejects.toMatchObject({ code: "22023" });
  });

  test("only the service role may execute them", async () => {
    const { rows } = await db.admin.query(
      `select p.proname, r.rolname, has_function_privilege(r.rolname, p.oid, 'execute') as can
       from pg_proc p, pg_roles r
       where p.proname like 'ops\\_%' and r.rolname in ('anon', 'authenticated', 'service_role')
       order by 1, 2`,
    );
    for (const row of rows)
      expect([row.proname, row.rolname, row.can]).toEqual([
        row.proname,
        row.rolname,
        row.rolname === "service_role",
      ]);
    expect(rows.length).toBe(8 * 3);
  });
});
