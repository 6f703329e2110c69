/**
 * Every boundary call of every invocation, broken every way (fault injection, docs/RELIABILITY.md):
 * for each flow (an enqueue, a delivery for each model outcome, a failure callback, a cancel, a
 * sweep) the boundary calls it makes are listed by name, and for each of them and each action
 * (fail, hang, lose the response after the far side did it, die before it, die after it) the flow
 * runs once with that one fault on the real database, then the system settles (deliveries drained,
 * the sweeper run past the max age) and the invariants are checked (test/support/sim.ts).
 */
import { describe, expect, test } from "vitest";
import { useApi } from "../support/api.ts";
import { servicePool } from "../support/db.ts";
import { type Fault, Faults, kill, lose } from "../support/faults.ts";
import { FLOWS, type Flow } from "../support/flows.ts";
import { freePort } from "../support/ports.ts";
import { ACTIONS } from "../support/schedules.ts";
import { MID_STREAM_TEXT, Sim } from "../support/sim.ts";

const app = useApi();
const service = servicePool(6);
let deadModelUrl = "";

/**
 * A job failed for a user's reason: fail_job, then the failure counted for the window's summary
 * (no page of its own), then any closed window flushed.
 */
const FAILED_AND_COUNTED = [
  "rpc:fail_job",
  "redis:hincrby",
  "redis:zincrby",
  "redis:zadd",
  "redis:expire",
  "redis:expire",
  "redis:zrange",
];

/** The boundary calls each flow makes with no fault, in order: the points the matrix breaks. */
const TRACES: Record<string, string[]> = {
  // The log pseudonym is read while the publish runs (a failure there only drops it from the line).
  enqueue: ["redis:evalsha", "redis:eval", "rpc:enqueue_job", "rpc:user_pseudonym", "publish"],
  // The first streamed text is written at once (the first progress write), then the answer.
  "delivery, model answers": [
    "rpc:start_job",
    "redis:get",
    "model",
    "rpc:record_progress",
    "rpc:complete_job",
  ],
  "delivery, 429 rate_limit_exceeded": [
    "rpc:start_job",
    "redis:get",
    "model",
    "redis:get",
    "redis:set",
    "rpc:requeue_job",
    "publish",
  ],
  "delivery, 429 insufficient_quota": [
    "rpc:start_job",
    "redis:get",
    "model",
    "redis:get",
    "redis:set",
    "redis:set",
    "redis:incr",
    "redis:expire",
    "webhook",
    "redis:zrange",
    "rpc:requeue_job",
    "publish",
  ],
  "delivery, model 500": ["rpc:start_job", "redis:get", "model", "rpc:release_job"],
  // A refusal and a failure callback are counted for the window's summary (no page).
  "delivery, model refuses (400)": ["rpc:start_job", "redis:get", "model", ...FAILED_AND_COUNTED],
  "failure callback": FAILED_AND_COUNTED,
  cancel: ["rpc:cancel_job"],
  // The model streams, the worker's timer writes progress once (sim.ts holdFirstProgress makes
  // it exactly once), the answer completes the job.
  "delivery, worker mid-stream (a progress write)": [
    "rpc:start_job",
    "redis:get",
    "model",
    "rpc:record_progress",
    "rpc:complete_job",
  ],
  "sweep (a dead worker's job, a lost message)": [
    "rpc:sweep_jobs",
    "publish",
    "redis:zrange",
    "redis:set",
    "redis:incr",
    "redis:expire",
    "webhook",
    "redis:zrange",
  ],
};

// An extraction makes the same calls as a document (its kind is read in-process, Ajv included);
// an output that breaks its schema fails like a refusal: fail_job, counted for the summary.
TRACES["extraction: enqueue"] = TRACES.enqueue as string[];
TRACES["extraction: delivery, model answers"] = TRACES["delivery, model answers"] as string[];
TRACES["extraction: delivery, output breaks the schema"] = [
  "rpc:start_job",
  "redis:get",
  "model",
  "rpc:record_progress",
  ...FAILED_AND_COUNTED,
];

// A token plan's flows make the same calls as a job plan's: metering lives in the SQL functions.
for (const name of [
  "delivery, model answers",
  "delivery, 429 rate_limit_exceeded",
  "delivery, model 500",
  "delivery, model refuses (400)",
  "failure callback",
  "cancel",
  "delivery, worker mid-stream (a progress write)",
])
  TRACES[`team: ${name}`] = TRACES[name] as string[];

async function newSim(): Promise<Sim> {
  if (!deadModelUrl) deadModelUrl = `http://127.0.0.1:${await freePort()}/v1`;
  await app.redis.flushall();
  // Scripts survive FLUSHALL: flush them too, so the rate limiter's first EVALSHA always meets
  // NOSCRIPT and falls back to EVAL (both are points below).
  await app.redis.script("FLUSH");
  // No flow scripts a model timeout: a long one keeps a loaded machine's slow fake model from
  // taking the timeout path (seen: 429 and 400 flows missing their points under load).
  return new Sim({ service, admin: app.admin, env: app.env, deadModelUrl, modelTimeoutMs: 5000 });
}

/** Runs a flow with one fault, settles, checks; returns the sim for more assertions. */
async function runWith(flow: Flow, fault: Fault | undefined): Promise<Sim> {
  const sim = await newSim();
  await flow.setup(sim);
  await sim.command({ ...flow.act, ...(fault ? { fault } : {}) } as typeof flow.act);
  const outcome = sim.lastOutcome;
  const trace = sim.lastTrace;
  await sim.settle();
  try {
    await sim.check();
  } catch (error) {
    throw new Error(`${(error as Error).message}\n${sim.journal.join("\n")}`);
  }
  sim.lastOutcome = outcome;
  sim.lastTrace = trace;
  return sim;
}

/** "<name>#<nth>" for each call in a trace. */
function points(trace: string[]): Array<{ at: string; nth: number }> {
  const seen = new Map<string, number>();
  return trace.map((at) => {
    const nth = (seen.get(at) ?? 0) + 1;
    seen.set(at, nth);
    return { at, nth };
  });
}

describe.each(FLOWS)("$name", (flow) => {
  test("makes exactly the boundary calls listed (the points broken below)", async () => {
    const sim = await runWith(flow, undefined);
    expect(sim.lastTrace).toEqual(TRACES[flow.name]);
  });

  const cases = points(TRACES[flow.name] ?? []).flatMap((p) =>
    ACTIONS.map((action) => ({ ...p, action })),
  );
  test.for(cases)("$action at $at #$nth: settles with every invariant", async (c) => {
    const sim = await runWith(flow, { at: c.at, action: c.action, nth: c.nth });
    const fired = sim.journal.find((l) => l.includes(`[${c.action} ${c.at}]`));
    expect(fired, "the fault fired").toBeDefined();
  });
});

describe("named points, what exactly happens", () => {
  const flow = (name: string) => {
    const f = FLOWS.find((x) => x.name === name);
    if (!f) throw new Error(name);
    return f;
  };
  const job = async (sim: Sim) => {
    const { rows } = await app.admin.query(
      "select status, failure_reason, attempts from public.generation_jobs where user_id = $1",
      [sim.users[0]],
    );
    return rows;
  };

  test('kill("after:rpc:start_job"): the claim committed, the model was never called, the sweeper ends it with one refund', async () => {
    const sim = await runWith(flow("delivery, model answers"), kill("after:rpc:start_job"));
    expect(sim.lastOutcome).toMatchObject({ kind: "killed", at: "after:rpc:start_job" });
    expect(sim.stats.modelCalls).toBe(0);
    expect(await job(sim)).toEqual([
      { status: "failed", failure_reason: "max_age_exceeded", attempts: 1 },
    ]);
  });

  test('lose("rpc:complete_job"): the completion committed, its response lost; the retry reads back its own success', async () => {
    const sim = await runWith(flow("delivery, model answers"), lose("rpc:complete_job"));
    expect(sim.lastOutcome).toMatchObject({
      kind: "returned",
      value: { retry: false, outcome: "completed" },
    });
    expect(sim.stats.modelCalls).toBe(1);
    expect(await job(sim)).toEqual([{ status: "succeeded", failure_reason: null, attempts: 1 }]);
  });

  test('lose("publish") at enqueue: 503 with the job failed publish_failed and refunded; the message that did go out finds it final', async () => {
    const sim = await runWith(flow("enqueue"), lose("publish"));
    expect(sim.lastOutcome).toMatchObject({
      kind: "returned",
      value: { outcome: "unavailable", refunded: true },
    });
    expect(sim.stats.modelCalls).toBe(0);
    expect(await job(sim)).toEqual([
      { status: "failed", failure_reason: "publish_failed", attempts: 0 },
    ]);
  });

  test('lose("rpc:fail_job") in the failure callback: 5xx, the callback retries, finds it final: one refund', async () => {
    const sim = await runWith(flow("failure callback"), lose("rpc:fail_job"));
    expect(sim.lastOutcome?.kind).toBe("threw");
    expect(await job(sim)).toEqual([
      { status: "failed", failure_reason: "delivery_failed", attempts: 0 },
    ]);
  });

  test('kill("after:rpc:record_progress") on a token plan: the worker died mid-stream with its progress written; the sweeper ends the job, capturing what SQL knows it consumed (its prompt and that progress), the rest of the hold released once', async () => {
    const sim = await runWith(
      flow("team: delivery, worker mid-stream (a progress write)"),
      kill("after:rpc:record_progress"),
    );
    expect(sim.lastOutcome).toMatchObject({ kind: "killed", at: "after:rpc:record_progress" });
    expect(sim.lastTrace).toEqual(["rpc:start_job", "redis:get", "model", "rpc:record_progress"]);
    const { rows } = await app.admin.query(
      `select j.status, j.failure_reason, j.captured, u.units_used,
         private.job_json(j) ->> 'partial_output' as partial_output,
         j.prompt_tokens + j.partial_tokens as known
       from public.generation_jobs j join public.quota_usage u using (user_id, period_start, meter)
       where j.user_id = $1`,
      [sim.users[0]],
    );
    const known = rows[0]?.known as number;
    expect(known).toBeGreaterThan(0);
    expect(rows).toEqual([
      {
        status: "failed",
        failure_reason: "max_age_exceeded",
        // docs/DESIGN.md#metering-hold-and-capture: a running attempt someone else ends.
        captured: known,
        units_used: known,
        // The write committed mid-stream: the text streamed so far, before the answer.
        partial_output: MID_STREAM_TEXT,
        known,
      },
    ]);
  });

  test("a fault outside any invocation scope (armed on the root) hits the next matching call", async () => {
    const faults = new Faults();
    faults.arm(lose("rpc:x"));
    let done = 0;
    const rpc = faults.rpc(async () => {
      done++;
      return { outcome: "ok" };
    });
    await expect(rpc("x", {})).rejects.toMatchObject({ name: "DatabaseError" });
    expect(done).toBe(1);
    await expect(rpc("x", {})).resolves.toEqual({ outcome: "ok" });
  });
});

/**
 * The metering invariants are not vacuous: a team job that ended well, then its books broken
 * behind the app's back, and Sim.check() names what is wrong. Each break is undone after, so
 * the file's own drift check (useApi) still sees a clean database.
 */
describe("Sim.check catches a broken capture", () => {
  const answered = () => {
    const f = FLOWS.find((x) => x.name === "team: delivery, model answers");
    if (!f) throw new Error("no team flow");
    return f;
  };
  /** Runs SQL with triggers off (final-is-final, append-only): what no app path can do. */
  const behindTheBack = async (sql: string, params: unknown[]) => {
    const c = await app.admin.connect();
    try {
      await c.query("begin");
      await c.query("set local session_replication_role = replica");
      await c.query(sql, params);
      await c.query("commit");
    } catch (error) {
      await c.query("rollback");
      throw error;
    } finally {
      c.release();
    }
  };
  const endedJob = async (sim: Sim) => {
    const { rows } = await app.admin.query<{ id: string; hold: number; captured: number }>(
      "select id, hold, captured from public.generation_jobs where user_id = $1",
      [sim.users[0]],
    );
    const j = rows[0];
    if (!j) throw new Error("no job");
    // A real capture: the provider's usage, above nothing and under the hold.
    expect(j.captured).toBeGreaterThan(0);
    expect(j.captured).toBeLessThan(j.hold);
    return j;
  };

  test("the counter one token off its captures: drift, naming the user", async () => {
    const sim = await runWith(answered(), undefined);
    const user = sim.users[0] as string;
    await endedJob(sim);
    const shift = (by: number) =>
      app.admin.query(
        "update public.quota_usage set units_used = units_used + $2 where user_id = $1",
        [user, by],
      );
    await shift(1);
    try {
      await expect(sim.check()).rejects.toThrow(new RegExp(`drift: .*${user}`));
    } finally {
      await shift(-1);
    }
    await sim.check();
  });

  test("a capture changed on the ended job (the counter kept): drift", async () => {
    const sim = await runWith(answered(), undefined);
    const j = await endedJob(sim);
    const set = (captured: number) =>
      behindTheBack("update public.generation_jobs set captured = $2 where id = $1", [
        j.id,
        captured,
      ]);
    await set(j.captured - 1);
    try {
      await expect(sim.check()).rejects.toThrow(/drift: /);
    } finally {
      await set(j.captured);
    }
    await sim.check();
  });

  test("a capture recorded twice (a second ending event): not exactly once, naming the job", async () => {
    const sim = await runWith(answered(), undefined);
    const j = await endedJob(sim);
    const { rows } = await app.admin.query<{ id: string }>(
      `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
       select job_id, user_id, at, event, from_status, to_status, detail from public.job_events
       where job_id = $1 and detail ? 'captured' returning id`,
      [j.id],
    );
    try {
      await expect(sim.check()).rejects.toThrow(
        `job ${j.id} succeeded: captured ${j.captured} of ${j.hold} in 2 events`,
      );
    } finally {
      await behindTheBack("delete from public.job_events where id = $1", [rows[0]?.id]);
    }
    await sim.check();
  });
});
