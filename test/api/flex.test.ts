/**
 * The worker flow on the economy plan (OpenAI's flex tier), driven through runJob with a Model
 * test double on the real local database, Redis gate and QStash recorder: a flex capacity 429
 * waits without a quota hit and without touching the shared provider gate, the job succeeds
 * when capacity returns or ages out refunded once, a plan's fallback switches tiers, reasoning
 * shows as "thinking" progress and is billed, and every call carries the user's safety
 * identifier (an HMAC, never the id).
 *
 * The double stands for the port (lib/model.ts's `Model`) and throws for "no flex capacity"
 * what the port throws: the SDK's 429 with OpenAI's "Resource Unavailable" body, which the
 * port's own classification reads. The end-to-end test (test/e2e/flex.test.ts) goes through the
 * real port and the fake model.
 */
import { createHmac, randomUUID } from "node:crypto";
import { APIError } from "openai";
import { describe, expect, test } from "vitest";
import {
  type GenerateOptions,
  type Generation,
  type Model,
  ModelCallError,
} from "../../lib/model.ts";
import { toJob } from "../../lib/view.ts";
import { runJob } from "../../lib/worker/index.ts";
import { type TestUser, useApi } from "../support/api.ts";

const KEY = "api-tests-safety-identifier-key-0123456789";
const app = useApi({
  env: {
    OPENAI_SAFETY_IDENTIFIER_KEY: KEY,
    PROVIDER_BACKOFF_SECONDS: "30",
    PROGRESS_INTERVAL_MS: "100",
  },
});
const GATE = "quota-jobs:provider:resume-at";

/** The port as a test double: flex has capacity or not; a call may reason first. */
function doubleModel(o: {
  flexCapacity: () => boolean;
  /** Reasoning before the text: each count is reported, then the double waits for `next()`. */
  reasoning?: { counts: number[]; next: () => Promise<void> };
}) {
  const calls: GenerateOptions[] = [];
  const model: Model = {
    async generate(prompt, options): Promise<Generation> {
      calls.push(options);
      if (options.serviceTier === "flex" && !o.flexCapacity()) {
        // OpenAI's flex 429 as the SDK raises it; it bills nothing.
        const cause = APIError.generate(
          429,
          {
            error: {
              message: "Resource Unavailable: there is not enough flex processing capacity",
              type: "invalid_request_error",
              code: null,
            },
          },
          undefined,
          new Headers(),
        );
        throw new ModelCallError(
          cause,
          { promptTokens: 0, completionTokens: 0, source: "counted" },
          "flex",
        );
      }
      let reasoned = 0;
      for (const count of o.reasoning?.counts ?? []) {
        options.onThinking?.(count === 0 ? null : count);
        reasoned = count;
        await o.reasoning?.next();
      }
      const text = `An answer to: ${prompt.slice(0, 20)}`;
      options.onText?.(text);
      return {
        text,
        usage: {
          promptTokens: 12,
          completionTokens: 7 + reasoned,
          reasoningTokens: reasoned,
          source: "provider",
        },
        finishReason: "stop",
      };
    },
  };
  return { model, calls };
}

async function userOn(plan: string): Promise<TestUser> {
  const user = await app.newUser("pro");
  await app.admin.query("update public.user_plans set plan_id = $2 where user_id = $1", [
    user.id,
    plan,
  ]);
  return user;
}

async function jobView(id: string) {
  const r = await app.deps.jobs.get(id, (await app.jobRow(id)).user_id);
  if (r.outcome !== "found") throw new Error("no job");
  return toJob(r.job);
}

const refundEvents = async (id: string) =>
  (await app.events(id)).filter((e) => (e.detail as { refunded?: boolean }).refunded === true)
    .length;

describe("the economy plan on flex", () => {
  test("a flex 429 waits for capacity: no quota hit, the shared gate stays open, so a standard-plan job racing it runs at once", async () => {
    let capacity = false;
    const { model, calls } = doubleModel({ flexCapacity: () => capacity });
    const deps = { ...app.workerDeps, model };
    const economy = await userOn("economy");
    const pro = await app.newUser("pro");
    const flexJob = await app.enqueueOk(economy);
    const proJob = await app.enqueueOk(pro);

    const [flexRun, proRun] = await Promise.all([runJob(deps, flexJob), runJob(deps, proJob)]);
    expect(flexRun).toEqual({ retry: false, outcome: "requeued" });
    expect(proRun).toEqual({ retry: false, outcome: "completed" });
    // The standard plan's call names no tier (the project's); the economy plan's names flex.
    expect(calls.map((c) => c.serviceTier).sort()).toEqual(["flex", undefined].sort());
    expect(await app.redis.get(GATE)).toBeNull();

    const row = await app.jobRow(flexJob);
    expect(row).toMatchObject({ status: "queued", provider_quota_hits: 0 });
    const view = await jobView(flexJob);
    expect(view.phase).toBe("waiting_for_capacity");
    expect(view.resumeAt).not.toBeNull();
    // Another standard job after the wait began still runs: nothing holds the other plans back.
    const proAgain = await app.enqueueOk(pro);
    expect(await runJob(deps, proAgain)).toEqual({ retry: false, outcome: "completed" });

    // Capacity returns; the job's resume time passes (backdated: no sleeping).
    capacity = true;
    await app.admin.query(
      "update public.generation_jobs set resume_at = now() - interval '1 second' where id = $1",
      [flexJob],
    );
    expect(await runJob(deps, flexJob)).toEqual({ retry: false, outcome: "completed" });
    expect(await app.jobRow(flexJob)).toMatchObject({
      status: "succeeded",
      provider_quota_hits: 0,
      attempts: 2,
    });
    expect(await app.unitsUsed(economy.id)).toBe(1);
  });

  test("many flex 429s never give up by hits (a quota's rule); past the max age the job fails capacity_unavailable, refunded exactly once", async () => {
    const { model } = doubleModel({ flexCapacity: () => false });
    const deps = { ...app.workerDeps, model };
    const user = await userOn("economy");
    const id = await app.enqueueOk(user);
    for (let i = 0; i < 5; i++) {
      expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "requeued" });
      await app.admin.query(
        "update public.generation_jobs set resume_at = now() - interval '1 second' where id = $1",
        [id],
      );
    }
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", provider_quota_hits: 0 });
    // The job is almost as old as it may be: the next wait would take it past its max age.
    await app.admin.query(
      "update public.generation_jobs set created_at = now() - make_interval(secs => $2) where id = $1",
      [id, app.workerDeps.config.jobMaxAgeSeconds - 10],
    );
    expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "gave_up" });
    const row = await app.jobRow(id);
    expect(row).toMatchObject({ status: "failed", failure_reason: "capacity_unavailable" });
    expect(row.refunded_at).not.toBeNull();
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(await refundEvents(id)).toBe(1);
    expect(await app.redis.get(GATE)).toBeNull();
    // A redelivery of its last message changes nothing: no second refund.
    expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "already_final" });
    expect(await refundEvents(id)).toBe(1);
    expect((await jobView(id)).phase).toBe("failed");
  });

  test("a plan with a fallback: the wait ends when the fallback is due, and the next attempt runs on the standard tier", async () => {
    const plan = `flex-fallback-${randomUUID().slice(0, 8)}`;
    await app.admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
         max_output_tokens, meter, service_tier, flex_fallback_after_seconds, model)
       values ($1, 'Flex with fallback', 'month', 10, 1, 256, 'jobs', 'flex', 20, 'gpt-5.4-mini')`,
      [plan],
    );
    const { model, calls } = doubleModel({ flexCapacity: () => false });
    const deps = { ...app.workerDeps, model };
    const user = await userOn(plan);
    const id = await app.enqueueOk(user);

    const before = Date.now();
    expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "requeued" });
    const after = Date.now();
    const waiting = await app.jobRow(id);
    // PROVIDER_BACKOFF_SECONDS is 30; the fallback is due in 20: the job resumes then. (Each
    // side measured from its own end of the run, however long a loaded machine made it.)
    const resumeAt = new Date(waiting.resume_at as unknown as string).getTime();
    expect((resumeAt - before) / 1000).toBeGreaterThan(15);
    expect((resumeAt - after) / 1000).toBeLessThanOrEqual(21);
    expect(calls.at(-1)?.serviceTier).toBe("flex");

    // Not yet waited long enough: still flex.
    await app.admin.query(
      "update public.generation_jobs set resume_at = now() - interval '1 second', capacity_wait_since = now() - interval '10 seconds' where id = $1",
      [id],
    );
    expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "requeued" });
    expect(calls.at(-1)?.serviceTier).toBe("flex");

    // Waited 21 s: the standard tier, named explicitly, and the job succeeds.
    await app.admin.query(
      "update public.generation_jobs set resume_at = now() - interval '1 second', capacity_wait_since = now() - interval '21 seconds' where id = $1",
      [id],
    );
    expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "completed" });
    expect(calls.at(-1)?.serviceTier).toBe("default");
    const started = (await app.events(id)).filter((e) => e.event === "started");
    expect(started.map((e) => (e.detail as { service_tier: string }).service_tier)).toEqual([
      "flex",
      "flex",
      "default",
    ]);
    expect(await app.jobRow(id)).toMatchObject({ status: "succeeded", provider_quota_hits: 0 });
  });

  test("the economy plan never falls back: every attempt asks for flex", async () => {
    const { model, calls } = doubleModel({ flexCapacity: () => false });
    const deps = { ...app.workerDeps, model };
    const id = await app.enqueueOk(await userOn("economy"));
    for (let i = 0; i < 3; i++) {
      await app.admin.query(
        "update public.generation_jobs set resume_at = null, capacity_wait_since = now() - interval '2 hours' where id = $1",
        [id],
      );
      expect(await runJob(deps, id)).toEqual({ retry: false, outcome: "requeued" });
    }
    expect(calls.map((c) => c.serviceTier)).toEqual(["flex", "flex", "flex"]);
    await app.deps.jobs.cancel(id, (await app.jobRow(id)).user_id);
  });
});

describe("thinking, and what reasoning costs", () => {
  test("while the model reasons, the progress write says thinking with the reported reasoning tokens; they are billed output on a token plan", async () => {
    // The test moves the model on once it has seen each state: no timing to race.
    let release = () => {};
    const next = () => new Promise<void>((r) => (release = r));
    const { model } = doubleModel({
      flexCapacity: () => true,
      reasoning: { counts: [0, 1200, 1500], next },
    });
    const deps = { ...app.workerDeps, model };
    const user = await app.newUser("team");
    const id = await app.enqueueOk(user);
    // What the page reads: GET /api/jobs/:id, until it shows `want`.
    const shows = async (want: Record<string, unknown>) => {
      const deadline = Date.now() + 15_000;
      let last: unknown;
      for (;;) {
        const res = await app.call("job", `/api/jobs/${id}`, { headers: user.headers });
        const { job } = (await res.json()) as { job: ReturnType<typeof toJob> };
        last = job;
        if (Object.entries(want).every(([k, v]) => job[k as keyof typeof job] === v)) return;
        if (Date.now() > deadline) expect(last).toMatchObject(want);
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    const run = runJob(deps, id);
    // Thinking before any count, then with the count, which is inside the completion tokens.
    await shows({ phase: "running", thinking: true, reasoningTokens: null, partialTokens: 0 });
    release();
    await shows({ phase: "running", thinking: true, reasoningTokens: 1200, partialTokens: 1200 });
    release();
    await shows({ phase: "running", thinking: true, reasoningTokens: 1500, partialTokens: 1500 });
    release();
    expect(await run).toEqual({ retry: false, outcome: "completed" });
    // Captured: the prompt plus every output token, the reasoning ones included.
    expect(await app.jobRow(id)).toMatchObject({ status: "succeeded", captured: 12 + 7 + 1500 });
  });
});

describe("the safety identifier", () => {
  test("every call names the user by an HMAC of the id under the server's key: stable per user, never the id", async () => {
    const { model, calls } = doubleModel({ flexCapacity: () => true });
    const deps = { ...app.workerDeps, model };
    const a = await app.newUser("pro");
    const b = await app.newUser("pro");
    for (const user of [a, a, b]) await runJob(deps, await app.enqueueOk(user));
    const ids = calls.map((c) => c.safetyIdentifier);
    const expected = (id: string) =>
      createHmac("sha256", KEY).update(`quota-jobs safety identifier:${id}`).digest("hex");
    expect(ids).toEqual([expected(a.id), expected(a.id), expected(b.id)]);
    for (const id of ids) {
      expect(id).toMatch(/^[0-9a-f]{64}$/);
      expect(id).not.toContain(a.id.replace(/-/g, "").slice(0, 8));
    }
    // Not a plain hash of the id: nobody who knows the id can compute it without the key.
    const { createHash } = await import("node:crypto");
    expect(ids[0]).not.toBe(createHash("sha256").update(a.id).digest("hex"));
  });

  test("without a key configured, no identifier is sent (never the raw id)", async () => {
    const { model, calls } = doubleModel({ flexCapacity: () => true });
    const { workerDeps } = app.makeDeps({ OPENAI_SAFETY_IDENTIFIER_KEY: "" });
    await runJob({ ...workerDeps, model }, await app.enqueueOk(await app.newUser("pro")));
    expect(calls).toHaveLength(1);
    expect(calls[0]?.safetyIdentifier).toBeUndefined();
  });
});
