/**
 * What enqueue pays to bound a prompt: no tokenizer (its encoding's load was 600-700 ms on an
 * instance's first enqueue, and an adversarial 8,000-character prompt took up to a second of CPU
 * to tokenize, before the database could refuse it). Its own file: a cold module graph, as a
 * fresh function instance has.
 */
import { randomUUID } from "node:crypto";
import { expect, test } from "vitest";
import { enqueueJob } from "../../lib/enqueue.ts";
import type { Deps } from "../../lib/ports.ts";
import { parseJobRequest } from "../../lib/validate.ts";

test("a cold enqueue bounds an 8,000-emoji prompt in well under 100 ms: its UTF-8 bytes + 8", async () => {
  const held: number[] = [];
  const deps = {
    rateLimiter: { check: async () => ({ ok: true }) },
    jobs: {
      // The database's answer to a prompt it refuses: nothing is held, nothing published.
      enqueue: async (input: { promptTokens: number }) => {
        held.push(input.promptTokens);
        return { outcome: "invalid_prompt" };
      },
    },
    queue: {
      publishJob: async () => {
        throw new Error("a refused prompt is not published");
      },
    },
  } as unknown as Pick<Deps, "jobs" | "queue" | "rateLimiter">;
  // Varied emoji (a tokenizer caches a repeated one): 8,000 characters of 4 bytes each.
  const emoji = ["😀", "🙂", "🚀", "🧪", "🦀", "🎉", "🌍", "🔥"];
  const prompt = Array.from({ length: 8000 }, (_, i) => emoji[(i * 7 + (i >> 3)) % 8]).join("");
  const started = performance.now();
  const request = await parseJobRequest({ prompt });
  const r = await enqueueJob(deps, { userId: randomUUID(), ...request, idempotencyKey: null });
  const ms = performance.now() - started;
  process.stdout.write(
    `[enqueue-cost] cold enqueue of 8,000 emoji: counting + call ${ms.toFixed(1)} ms\n`,
  );
  expect(ms).toBeLessThan(100);
  expect(r.outcome).toBe("invalid_prompt");
  expect(held).toEqual([32_000 + 8]);
});
