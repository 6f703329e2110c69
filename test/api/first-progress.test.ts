/**
 * The worker's first progress write goes out on the first streamed text, not a whole
 * `PROGRESS_INTERVAL_MS` later: it is what the page shows first. In-process against the real
 * database, the PostgREST stand-in and the fake model behind the real OpenAI SDK. The stream
 * (~40 tokens, 100 ms apart) ends long before the first interval (15 s) would: with the old
 * throttle (the timer alone) no progress is ever written while it runs, and this test fails.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { useApi } from "../support/api.ts";

const INTERVAL_MS = 15_000;
const app = useApi({
  env: { PROGRESS_INTERVAL_MS: String(INTERVAL_MS), MODEL_TIMEOUT_MS: "20000" },
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe("the first progress write", () => {
  test("is made on the first token, while the stream runs, not an interval later", async () => {
    app.model.setChunkMs(100);
    const user = await app.newUser("free");
    const id = await app.enqueueOk(user, `Write a report ${randomUUID()} [fake:tokens:40]`);
    const delivery = app.deliver(app.qstash.latestFor(id));
    let firstTokenAt: number | null = null;
    let firstWriteAt: number | null = null;
    let settled = false;
    void delivery.finally(() => {
      settled = true;
    });
    while (!settled && firstWriteAt === null) {
      if (firstTokenAt === null && app.model.stats().streamedTokens > 0) firstTokenAt = Date.now();
      const { rows } = await app.admin.query(
        "select status, partial_tokens from public.generation_jobs where id = $1",
        [id],
      );
      if (rows[0]?.status === "running" && (rows[0]?.partial_tokens ?? 0) > 0)
        firstWriteAt = Date.now();
      await sleep(20);
    }
    const res = await delivery;
    expect(((await res.json()) as { outcome: string }).outcome).toBe("completed");
    expect(firstTokenAt).not.toBeNull();
    // Seen while the job was still running: the stream lasts ~4 s, the interval is 15 s.
    expect(firstWriteAt).not.toBeNull();
    const ms = (firstWriteAt ?? 0) - (firstTokenAt ?? 0);
    expect(ms).toBeLessThan(2_000);
    process.stdout.write(`[first-progress] first token → first progress write seen ${ms} ms\n`);
  }, 30_000);
});
