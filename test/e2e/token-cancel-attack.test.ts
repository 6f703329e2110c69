/**
 * The cancel loop on a token plan, over HTTP on the whole local stack: a team user enqueues a
 * long prompt, waits until the model has streamed a while, cancels, and does it again. A token
 * plan has no bound on paid refunds; instead each cancel captures what the provider
 * consumed, as SQL knows it in the cancel's transaction: the prompt plus the tokens of the last
 * progress write (docs/DESIGN.md#metering-hold-and-capture). The check: the captures add up to
 * what the fake provider actually streamed (what it would bill), never more, and less only by
 * what streamed after the last progress write: about one interval before the cancel plus the
 * time until the worker's next write cuts the stream.
 */
import { expect, test } from "vitest";
import { newUser, until, useStack } from "../support/stack.ts";

const fixture = useStack({
  env: { WORKER_MAX_DURATION_SECONDS: "40", MODEL_TIMEOUT_MS: "30000", JOB_LEASE_SECONDS: "45" },
});

const ROUNDS = 6;
const CHUNK_MS = 50;
const PROGRESS_INTERVAL_MS = 1_000;
/** Tokens that stream in two progress intervals (before the cancel, and until the cut). */
const SLACK_PER_CANCEL = (2 * PROGRESS_INTERVAL_MS) / CHUNK_MS;

/** A model output with a special-token string in it: it once made every progress write throw. */
// (`<` escaped, so the prompt itself carries no special-token string.)
const SPECIAL_OUTPUT = `[fake:say:${JSON.stringify("Say <|im_start|> and go on. ").replaceAll("<", "\\u003c")}*400]`;

test.each([
  { output: "an endless essay", marker: "[fake:tokens:5000] An endless essay" },
  { output: "<|im_start|> in the output", marker: SPECIAL_OUTPUT },
])(
  `a team user's cancel loop (${ROUNDS} rounds, $output): the captures add up to what the provider streamed`,
  async ({ marker }) => {
    const { stack } = fixture;
    stack.model.reset();
    stack.model.setChunkMs(CHUNK_MS);
    const { api, userId } = await newUser(stack, "team");
    const gaps: number[] = [];
    let capturedCompletion = 0;
    let streamedCompletion = 0;

    for (let round = 0; round < ROUNDS; round++) {
      const created = await api.enqueue(`${marker}, round ${round}`);
      expect(created.status).toBe(202);
      const id = created.body.job.id as string;
      const promptTokensOf = async () =>
        (
          await stack.sql.query<{ p: number }>(
            "select prompt_tokens as p from public.generation_jobs where id = $1",
            [id],
          )
        ).rows[0]?.p as number;
      // Enqueue holds the prompt's bound (its bytes + 8); the worker's progress writes lower it
      // to its count of the prompt, which is what the cancel charges for the prompt.
      const promptBound = await promptTokensOf();
      // Wait for a progress write, so the cancel finds tokens to capture.
      await api.waitFor(
        id,
        (j) => j.status === "running" && j.partialTokens > 0,
        "progress",
        15_000,
      );

      const answered = stack.model.stats().requests.length;
      const canceled = await api.cancel(id);
      expect(canceled.status).toBe(200);
      const job = canceled.body.job;
      expect(job).toMatchObject({ status: "canceled", meter: "tokens", refundWithheld: null });
      const stats = await until(
        async () => stack.model.stats(),
        (s) => s.requests.length > answered,
        { timeoutMs: 25_000, intervalMs: 10, what: `round ${round}: the stream to be cut` },
      );
      const streamed = stats.requests.at(-1)?.completionTokens ?? 0;
      const promptTokens = await promptTokensOf();
      expect(promptTokens).toBeLessThanOrEqual(promptBound);
      const completion = job.captured - promptTokens;
      expect(completion).toBeGreaterThan(0);
      expect(completion).toBeLessThanOrEqual(streamed);
      gaps.push(streamed - completion);
      capturedCompletion += completion;
      streamedCompletion += streamed;
    }

    process.stdout.write(
      [
        `[token-attack] ${ROUNDS} cancels: captured ${capturedCompletion} of ${streamedCompletion} streamed completion tokens`,
        `[token-attack] uncaptured per cancel (tokens): ${gaps.join(", ")}; allowed ${SLACK_PER_CANCEL} (2 × ${PROGRESS_INTERVAL_MS} ms at ${CHUNK_MS} ms a token)`,
        "",
      ].join("\n"),
    );
    expect(capturedCompletion).toBeLessThanOrEqual(streamedCompletion);
    for (const gap of gaps) expect(gap).toBeLessThanOrEqual(SLACK_PER_CANCEL);
    // Nothing held after the loop; the counter is exactly the captures.
    const usage = (await api.usage()).body;
    expect(usage).toMatchObject({ meter: "tokens", active: 0, held: 0 });
    const { rows } = await stack.sql.query<{ sum: number }>(
      "select sum(captured)::int as sum from public.generation_jobs where user_id = $1",
      [userId],
    );
    expect(usage.used).toBe(rows[0]?.sum);
  },
  120_000,
);
