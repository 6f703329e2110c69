/**
 * A progress write costs the same at the end of a long answer as at its start: record_progress
 * appends only the new text (job_output_chunks), so the WAL one write makes does not grow with
 * what streamed before it. Measured per statement by the database itself (EXPLAIN ANALYZE's WAL
 * counters, this backend's only: other test files writing at the same time do not count). And
 * the worker's cursor (lib/partial-text.ts) against the real function: whatever answers are
 * lost, the stored text is the streamed text.
 */
import { randomBytes } from "node:crypto";
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { storable, textCursor } from "../../lib/partial-text.ts";
import { rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture();
const { svc, admin } = db;

async function runningJob() {
  const user = await db.user("pro");
  const job = await db.enqueued(user, { prompt: "write a long story" });
  const s = await db.started(job.id);
  return { id: job.id as string, attempt: s.job.attempts as number };
}

/** One progress write, run under EXPLAIN ANALYZE: its outcome and the WAL bytes it wrote. */
async function measuredWrite(
  job: { id: string; attempt: number },
  offset: number,
  text: string,
  tokens: number,
): Promise<{ stored: number; walBytes: number }> {
  const c = await svc.connect();
  try {
    await c.query("begin");
    const { rows } = await c.query(
      `explain (analyze, wal, format json)
       select public.record_progress(p_job_id => $1, p_attempt => $2, p_offset => $3,
         p_text => $4, p_completion_tokens => $5)`,
      [job.id, job.attempt, offset, text, tokens],
    );
    const plan = rows[0]["QUERY PLAN"][0].Plan;
    const { rows: stored } = await c.query(
      "select max(end_char) as n from public.job_output_chunks where job_id = $1",
      [job.id],
    );
    await c.query("commit");
    return { stored: stored[0].n, walBytes: plan["WAL Bytes"] };
  } finally {
    c.release();
  }
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
};

describe("a progress write's WAL does not grow with the answer", () => {
  test("the 100th write of 160 characters costs what the 3rd did (the whole text would be 16,000 characters by then)", async () => {
    // Text that does not compress (pglz would hide the growth of a repetitive one): 160
    // characters a write, 40 tokens' worth at ~4 characters a token.
    const job = await runningJob();
    const wal: number[] = [];
    let stored = 0;
    for (let i = 0; i < 100; i++) {
      const text = randomBytes(120).toString("base64");
      const w = await measuredWrite(job, stored, text, 40 * (i + 1));
      expect(w.stored).toBe(stored + 160);
      stored = w.stored;
      wal.push(w.walBytes);
    }
    const early = median(wal.slice(2, 12));
    const late = median(wal.slice(-10));
    expect(early).toBeGreaterThan(0);
    // Before, the last writes wrote the whole 16 kB text (its TOAST) each: ~15 × the early ones.
    expect(late, `WAL per write: early ${early} B, late ${late} B`).toBeLessThan(early * 1.25);
    const got = await rpc(svc, "get_job", {
      p_job_id: job.id,
      p_user_id: (
        await admin.query("select user_id from public.generation_jobs where id = $1", [job.id])
      ).rows[0].user_id,
    });
    expect(got.job.partial_output).toHaveLength(16_000);
  });
});

describe("the worker's cursor and record_progress together", () => {
  test("whatever answers are lost, the stored text is what streamed (surrogate pairs, lone halves and NULs included)", async () => {
    const piece = fc.oneof(
      fc.string({ unit: "grapheme", maxLength: 12 }),
      fc.constantFrom("\u{1F600}", "\uD83D", "\uDE00", "\u0000", "é", "e\u0301"),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(piece, fc.boolean()), { minLength: 1, maxLength: 25 }),
        async (steps) => {
          const job = await runningJob();
          const cursor = textCursor();
          let text = "";
          for (const [more, lost] of steps) {
            text += more;
            const d = cursor.next(text);
            const r = await rpc(svc, "record_progress", {
              p_job_id: job.id,
              p_attempt: job.attempt,
              p_offset: d.offset,
              p_text: d.text,
              p_completion_tokens: text.length,
            });
            expect(r.outcome).toBe("recorded");
            // A lost answer: the write committed, the worker never heard.
            if (!lost) cursor.stored(text, d, r.stored);
          }
          // A last write whose answer arrives (the worker's writes go on while it streams).
          const d = cursor.next(text);
          await rpc(svc, "record_progress", {
            p_job_id: job.id,
            p_attempt: job.attempt,
            p_offset: d.offset,
            p_text: d.text,
            p_completion_tokens: text.length,
          });
          const { rows } = await admin.query(
            "select private.job_json(j) ->> 'partial_output' as p from public.generation_jobs j where j.id = $1",
            [job.id],
          );
          // All of it but a trailing high surrogate, which waits for its pair.
          const expected = storable(/[\uD800-\uDBFF]$/.test(text) ? text.slice(0, -1) : text);
          expect(rows[0].p).toBe(expected);
        },
      ),
      { numRuns: 40 },
    );
  });
});
