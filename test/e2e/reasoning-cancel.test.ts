/**
 * A cancel during a reasoning model's hidden thinking, over HTTP on the whole built stack. The
 * provider bills the reasoning it generated; a stream cut short reports no usage, and reasoning
 * is never streamed, so nothing the worker sees says how much that was. Before the price book
 * this round billed ~760 reasoning tokens and captured the prompt (24): a token plan's user who
 * canceled every job while it thought made the provider bill up to the output bound per job and
 * paid for the prompt. Now such an attempt costs its bound, the job's hold
 * (docs/DESIGN.md#metering-hold-and-capture): over N rounds the provider's bill is at most what
 * the plan captured, and the page says so before the cancel.
 */
import { expect, test } from "vitest";
import { newUser, useStack } from "../support/stack.ts";

const fixture = useStack({
  env: { WORKER_MAX_DURATION_SECONDS: "40", MODEL_TIMEOUT_MS: "30000", JOB_LEASE_SECONDS: "45" },
});

const ROUNDS = 3;

test(`a team user's cancel during hidden reasoning (${ROUNDS} rounds): the captures cover what the provider billed`, async () => {
  const { stack } = fixture;
  stack.model.reset();
  // A token plan at the model's default effort (team itself sends effort none: no hidden reasoning).
  await stack.sql.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
       max_output_tokens, meter, model)
     values ('team_thinking', 'Team, thinking', 'month', 2000000, 3, 2048, 'tokens', 'gpt-5.4-mini')
     on conflict (id) do nothing`,
  );
  const { api, userId } = await newUser(stack, "team");
  await stack.sql.query(
    "update public.user_plans set plan_id = 'team_thinking' where user_id = $1",
    [userId],
  );
  let billed = 0;
  let captured = 0;
  for (let round = 0; round < ROUNDS; round++) {
    // 1,900 hidden tokens over 20 s before any text: a cancel 2 s in cuts ~190 of them.
    const created = await api.enqueue(
      `[fake:reasoning:1900:20000] Think it through, round ${round}`,
    );
    expect(created.status).toBe(202);
    const id = created.body.job.id as string;
    const thinking = await api.waitFor(
      id,
      (j) => j.status === "running" && j.thinking,
      "thinking",
      15_000,
    );
    // Told before confirming: this cancel keeps what the attempt may have cost.
    expect(thinking.cancelRefunds).toBe(true);
    expect(thinking.cancelCharges).toBe("bound");
    await new Promise((r) => setTimeout(r, 2_000));
    const answered = stack.model.stats().requests.length;
    const canceled = await api.cancel(id);
    expect(canceled.status).toBe(200);
    const job = canceled.body.job;
    expect(job).toMatchObject({ status: "canceled", meter: "tokens" });
    // The stream is cut when the worker's next progress write sees the cancel.
    let last = stack.model.stats().requests;
    for (let i = 0; i < 200 && last.length <= answered; i++) {
      await new Promise((r) => setTimeout(r, 25));
      last = stack.model.stats().requests;
    }
    const request = last.at(-1);
    expect(request).toBeDefined();
    const bill =
      (request?.promptTokens ?? 0) +
      (request?.completionTokens ?? 0) +
      (request?.reasoningTokens ?? 0);
    expect(request?.reasoningTokens ?? 0).toBeGreaterThan(0);
    // The bound: the prompt's bytes + 8 and the plan's 2,048 output tokens.
    expect(job.captured).toBe(job.hold);
    expect(job.captured).toBeGreaterThanOrEqual(bill);
    billed += bill;
    captured += job.captured;
  }
  process.stdout.write(
    `[reasoning-cancel] ${ROUNDS} cancels while thinking: the provider billed ${billed} tokens, the plan captured ${captured}\n`,
  );
  expect(billed).toBeLessThanOrEqual(captured);
}, 120_000);
