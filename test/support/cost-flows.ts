/**
 * The flows test/db/cost-budget.test.ts holds to a budget, each as the SQL calls the app makes
 * for it (lib/jobs.ts's arguments; lib/worker/, lib/failure-callback.ts, lib/sweeper.ts,
 * api/jobs/[id].ts decide which). A flow's setup is not counted; each call asserts the outcome
 * the flow needs, so a broken flow fails where it breaks instead of looking cheap.
 */
import { randomUUID } from "node:crypto";
import { expect } from "vitest";
import type { Call, CostDb } from "./cost.ts";

export interface Flow {
  name: string;
  run(db: CostDb): Promise<(call: Call) => Promise<void>>;
}

const USAGE = { prompt_tokens: 40, completion_tokens: 300, source: "provider" };
const ANSWER = "An answer of a few hundred bytes. ".repeat(10);

/**
 * A pro user with one earlier job this period (enqueued and canceled, refunded), so the flow
 * meets its counter row as a returning user does: the first job of a period inserts it instead.
 */
async function returningUser(db: CostDb): Promise<string> {
  const id = randomUUID();
  await db.admin.query("insert into auth.users (id) values ($1)", [id]);
  await db.admin.query("insert into public.user_plans (user_id, plan_id) values ($1, 'pro')", [id]);
  const earlier = await enqueue(db.setupCall, id);
  expect(await db.setupCall("cancel_job", { p_job_id: earlier, p_user_id: id })).toMatchObject({
    outcome: "canceled",
    refunded: true,
  });
  return id;
}

const PROMPT = "Write a short note on queues.";

/** As lib/enqueue.ts sends a document: its input, its hold bound, the deployment's model. */
async function enqueue(call: Call, user: string, now?: Date): Promise<string> {
  const r = await call("enqueue_job", {
    p_user_id: user,
    p_prompt: PROMPT,
    p_idempotency_key: null,
    p_prompt_tokens: Buffer.byteLength(PROMPT) + 8,
    p_kind: "document",
    p_input: { prompt: PROMPT },
    p_model: "gpt-5.4-mini",
    ...(now ? { p_now: now.toISOString() } : {}),
  });
  expect(r.outcome).toBe("enqueued");
  return (r.job as { id: string }).id;
}

async function start(call: Call, job: string, now?: Date): Promise<number> {
  const r = await call("start_job", {
    p_job_id: job,
    p_lease_seconds: 90,
    ...(now ? { p_now: now.toISOString() } : {}),
  });
  expect(r.outcome).toBe("started");
  return (r.job as { attempts: number }).attempts;
}

async function complete(call: Call, job: string, attempt: number, output: string) {
  const r = await call("complete_job", {
    p_job_id: job,
    p_attempt: attempt,
    p_output: output,
    p_usage: USAGE,
  });
  expect(r.outcome).toBe("completed");
}

/** fail_job on `job` with the caller's reason, error and attempt (or seq): the job fails. */
async function fail(call: Call, job: string, args: Record<string, unknown>) {
  const r = await call("fail_job", { p_job_id: job, ...args });
  expect(r.outcome).toBe("failed");
}

/**
 * Text that does not compress (TOAST would shrink a repeated phrase and hide the growth): letters
 * and spaces from a fixed-seed generator, the same every run.
 */
function incompressible(bytes: number, seed = 7): string {
  let x = seed;
  let out = "";
  for (let i = 0; i < bytes; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    out += "abcdefghijklmnopqrstuvwxyz    "[x % 30];
  }
  return out;
}

/** Bytes the answer grows by between two progress writes: one write a second at ~50 tokens/s. */
const PROGRESS_CHUNK = 200;

/** The streamed flows write N and 4N times; their progress WAL's ratio is the growth shape. */
export const STREAMED = 10;

/**
 * Each write sends what streamed since the last one after its offset, as lib/worker/stream.ts
 * does (lib/partial-text.ts; the answer is ASCII, so characters are bytes), and record_progress
 * appends it to the attempt's chunks.
 */
export function streamed(writes: number): Flow {
  return {
    name: `streamed job, ${writes} progress writes`,
    // enqueue, start, record_progress × writes (PROGRESS_CHUNK bytes more each), complete
    async run(db) {
      const user = await returningUser(db);
      const answer = incompressible(PROGRESS_CHUNK * writes);
      return async (call) => {
        const job = await enqueue(call, user);
        const attempt = await start(call, job);
        for (let i = 1; i <= writes; i++) {
          const r = await call("record_progress", {
            p_job_id: job,
            p_attempt: attempt,
            p_offset: PROGRESS_CHUNK * (i - 1),
            p_text: answer.slice(PROGRESS_CHUNK * (i - 1), PROGRESS_CHUNK * i),
            p_completion_tokens: (PROGRESS_CHUNK * i) / 4,
            p_prompt_tokens: 12,
          });
          expect(r).toEqual({ outcome: "recorded", stored: PROGRESS_CHUNK * i });
        }
        await complete(call, job, attempt, answer);
      };
    },
  };
}

/** Stale jobs in thirds: past the max age (queued), lease expired (running), never delivered. */
export function sweep(stale: number): Flow {
  return {
    name: `sweep of ${stale} stale jobs`,
    // sweep_jobs in batches of 100 until more is false (lib/sweeper.ts)
    async run(db) {
      const ago = (s: number) => new Date(Date.now() - s * 1000);
      for (let i = 0; i < stale; i++) {
        const user = await returningUser(db);
        const third = i % 3;
        if (third === 0) await enqueue(db.setupCall, user, ago(4 * 3600));
        if (third === 1)
          await start(db.setupCall, await enqueue(db.setupCall, user, ago(3600)), ago(3600));
        if (third === 2) await enqueue(db.setupCall, user, ago(1200));
      }
      return async (call) => {
        let swept = 0;
        for (;;) {
          const r = await call("sweep_jobs", {
            p_batch_size: 100,
            p_lease_grace_seconds: 300,
            p_undelivered_after_seconds: 900,
            p_max_age_seconds: 10800,
            p_max_republish: 1,
          });
          expect(r.outcome).toBe("swept");
          swept += (r.failed as unknown[]).length + (r.republish as unknown[]).length;
          if (!r.more) break;
        }
        expect(swept).toBe(stale);
      };
    },
  };
}

export const FLOWS: Flow[] = [
  {
    name: "enqueue",
    // enqueue_job
    async run(db) {
      const user = await returningUser(db);
      return async (call) => {
        await enqueue(call, user);
      };
    },
  },
  {
    name: "success",
    // enqueue, start_job, complete_job (with usage)
    async run(db) {
      const user = await returningUser(db);
      return async (call) => {
        const job = await enqueue(call, user);
        await complete(call, job, await start(call, job), ANSWER);
      };
    },
  },
  {
    name: "failure: worker",
    // enqueue, start_job, fail_job model_refused (lib/worker/errors.ts)
    async run(db) {
      const user = await returningUser(db);
      return async (call) => {
        const job = await enqueue(call, user);
        const attempt = await start(call, job);
        await fail(call, job, {
          p_reason: "model_refused",
          p_error: "400: refused",
          p_attempt: attempt,
          p_usage: USAGE,
        });
      };
    },
  },
  {
    name: "failure: callback",
    // enqueue, fail_job delivery_failed with the message's seq (lib/failure-callback.ts)
    async run(db) {
      const user = await returningUser(db);
      return async (call) => {
        const job = await enqueue(call, user);
        await fail(call, job, {
          p_reason: "delivery_failed",
          p_error: "delivery failed: last status 500 after 3 retries",
          p_attempt: null,
          p_seq: 1,
        });
      };
    },
  },
  {
    name: "cancel: queued",
    // cancel_job of a queued job (api/jobs/[id].ts)
    async run(db) {
      const user = await returningUser(db);
      const job = await enqueue(db.setupCall, user);
      return async (call) => {
        const r = await call("cancel_job", { p_job_id: job, p_user_id: user });
        expect(r).toMatchObject({ outcome: "canceled", refunded: true });
      };
    },
  },
  {
    name: "cancel: running",
    // cancel_job of a running job
    async run(db) {
      const user = await returningUser(db);
      const job = await enqueue(db.setupCall, user);
      await start(db.setupCall, job);
      return async (call) => {
        const r = await call("cancel_job", { p_job_id: job, p_user_id: user });
        expect(r.outcome).toBe("canceled");
      };
    },
  },
  sweep(9),
  sweep(150),
  streamed(STREAMED),
  streamed(4 * STREAMED),
];
