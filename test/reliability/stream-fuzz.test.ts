/**
 * Whatever the model streams, the worker still hears a cancel: fast-check makes adversarial
 * model output (special-token strings, lone surrogates, huge words, mixed scripts and emoji),
 * the fake model streams exactly that (`[fake:say:…]`) to the real worker (api/worker.ts →
 * lib/worker/) over the real database and the PostgREST stand-in, and a user cancels once a
 * progress write has landed. Every run: the stream is cut within one progress interval plus a
 * round trip, no progress write failed, and the attempt's usage is on record (and captured).
 * Bounded: a few runs of a second or two each.
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { expect, test } from "vitest";
import { eventually, outcomeOf, useApi } from "../support/api.ts";
import { SPECIAL_TOKENS } from "../support/special-tokens.ts";

const PROGRESS_INTERVAL_MS = 250;
/** One progress write's round trip on this shared machine, generously. */
const ROUND_TRIP_MS = 750;
const RUNS = Number(process.env.QUOTA_JOBS_STREAM_FUZZ_RUNS ?? 6);
const SEED = process.env.QUOTA_JOBS_FUZZ_SEED;

const app = useApi({
  env: { PROGRESS_INTERVAL_MS: String(PROGRESS_INTERVAL_MS), MODEL_TIMEOUT_MS: "20000" },
});

const piece = fc.oneof(
  fc.constantFrom(...SPECIAL_TOKENS),
  fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)),
  fc.string({ unit: "binary", minLength: 1, maxLength: 20 }),
  fc.constantFrom(
    "👨‍👩‍👧‍👦",
    "😀😀😀",
    "தமிழ் மொழி",
    "日本語",
    "Ünïcödé",
    "\u0000",
    "\uFEFF",
    "\uFFFD",
  ),
  fc
    .tuple(fc.constantFrom("a", "😀", "தமிழ்", "中", "x<|"), fc.integer({ min: 50, max: 300 }))
    .map(([c, n]) => c.repeat(n)),
);
const output = fc.array(piece, { minLength: 1, maxLength: 6 }).map((parts) => parts.join(""));

test(`adversarial model output (${RUNS} runs): a cancel cuts the stream within one progress interval + a round trip, and the attempt's usage is recorded`, async () => {
  app.model.setChunkMs(10);
  const cuts: number[] = [];
  await fc.assert(
    fc.asyncProperty(output, async (text) => {
      app.logs.length = 0;
      const user = await app.newUser("team");
      // Repeated so the stream outlasts a few progress intervals (the team plan's bound: 2,048).
      const prompt = `Echo ${randomUUID()} [fake:say:${JSON.stringify(`${text} and `).replaceAll("<", "\\u003c")}*400]`;
      const id = await app.enqueueOk(user, prompt);
      const answered = app.model.stats().requests.length;
      const delivery = app.deliver(app.qstash.latestFor(id));
      await eventually(async () => (await app.jobRow(id)).status === "running", {
        what: "the job to run",
      });
      await eventually(
        async () => {
          const { rows } = await app.admin.query(
            "select partial_tokens from public.generation_jobs where id = $1",
            [id],
          );
          return (rows[0]?.partial_tokens ?? 0) > 0;
        },
        { what: "a progress write", timeoutMs: 10_000 },
      );
      const canceledAt = Date.now();
      const cancel = await app.cancel(user, id);
      expect(cancel.status).toBe(200);
      const res = await delivery;
      const cutMs = Date.now() - canceledAt;
      cuts.push(cutMs);
      expect(await outcomeOf(res)).toBe("aborted");
      expect(cutMs).toBeLessThan(PROGRESS_INTERVAL_MS + ROUND_TRIP_MS);
      await eventually(() => app.model.stats().requests.length > answered, {
        what: "the fake to see the stream cut",
      });
      expect(app.model.stats().requests.at(-1)?.finishReason).toBe("client_closed");
      expect(app.logs.filter((l) => l.includes("progress_write_failed"))).toEqual([]);

      const events = await app.events(id);
      const usage = (
        events.find((e) => e.event === "attempt_usage")?.detail as {
          usage?: { prompt_tokens: number; completion_tokens: number; source: string };
        }
      )?.usage;
      expect(usage?.source).toBe("counted");
      expect(usage?.prompt_tokens).toBeGreaterThan(0);
      expect(usage?.completion_tokens).toBeGreaterThan(0);
      const { rows } = await app.admin.query(
        "select captured, prompt_tokens, partial_tokens from public.generation_jobs where id = $1",
        [id],
      );
      expect(rows[0]?.captured).toBeGreaterThan(rows[0]?.prompt_tokens);
    }),
    { numRuns: RUNS, endOnFailure: true, ...(SEED ? { seed: Number(SEED) } : {}) },
  );
  process.stdout.write(`[stream-fuzz] cancel→cut (ms): ${cuts.join(", ")}\n`);
}, 60_000);
