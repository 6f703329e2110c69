/**
 * The Idempotency-Key's unique index holds only jobs that have a key: a keyless job writes no
 * entry into it at its claim (nor at its insert or ending), while a keyed job still does, and a
 * second enqueue with the same key still finds the first job. Counted by the database itself
 * (EXPLAIN ANALYZE's WAL records, this backend's only).
 */
import { describe, expect, test } from "vitest";
import { rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture();
const { svc } = db;

/** WAL records the claim of `jobId` writes: its row, an entry per index, its event. */
async function claimWalRecords(jobId: string): Promise<number> {
  const records = await claimed(jobId);
  // Ended at once, so the plan's active-job limit never stops the next enqueue.
  await rpc(svc, "complete_job", { p_job_id: jobId, p_attempt: 1, p_output: "done" });
  return records;
}

async function claimed(jobId: string): Promise<number> {
  const c = await svc.connect();
  try {
    await c.query("begin");
    const { rows } = await c.query(
      "explain (analyze, wal, format json) select public.start_job(p_job_id => $1)",
      [jobId],
    );
    await c.query("commit");
    return rows[0]["QUERY PLAN"][0].Plan["WAL Records"] as number;
  } finally {
    c.release();
  }
}

describe("the idempotency index holds keyed jobs only", () => {
  test("a keyless claim writes one WAL record fewer than a keyed one; the key still replays", async () => {
    const user = await db.user("pro");
    const enqueue = (key: string | null) =>
      rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "same words", p_idempotency_key: key });
    const first = await enqueue("k-0");
    // The first claim on a fresh page writes more than the rest (page set-up): not counted.
    await claimWalRecords(first.job.id);
    // Seven pairs, the most frequent difference: a page prune (or an autovacuum's visit, under
    // load) may add a record to any one claim, and did to two of three pairs in a loaded run.
    const differences: number[] = [];
    let keyed = first;
    for (let i = 1; i <= 7; i++) {
      keyed = await enqueue(`k-${i}`);
      const keyless = await enqueue(null);
      differences.push(
        (await claimWalRecords(keyed.job.id)) - (await claimWalRecords(keyless.job.id)),
      );
    }
    const seen = new Map<number, number>();
    for (const d of differences) seen.set(d, (seen.get(d) ?? 0) + 1);
    const mode = [...seen].sort((a, b) => b[1] - a[1])[0]?.[0];
    expect({ mode, differences }).toMatchObject({ mode: 1 });

    const replay = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: "same words",
      p_idempotency_key: "k-7",
    });
    expect(replay).toMatchObject({ outcome: "replayed", job: { id: keyed.job.id } });
  });
});
