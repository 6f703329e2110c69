/**
 * The Idempotency-Key's unique index holds only jobs that have a key: a keyless job writes no
 * entry into it at its claim, while a keyed job still does, and a second enqueue with the same
 * key still finds the first job. Counted by the database itself: the B-tree insert records in
 * the WAL that name that index's file (pg_walinspect), on a database of this file's own, so no
 * other test's writes and no page prune or autovacuum visit (which a count of all the claim's
 * WAL records met under load) can change the figure.
 */
import { beforeAll, describe, expect, test } from "vitest";
import { rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture({ fresh: true });
const { svc, admin } = db;

beforeAll(async () => {
  await admin.query("create extension if not exists pg_walinspect");
});

/** B-tree inserts into the idempotency index that the claim of `jobId` writes to the WAL. */
async function claimIndexInserts(jobId: string): Promise<number> {
  const before = (await admin.query("select pg_current_wal_insert_lsn() as lsn")).rows[0].lsn;
  await rpc(svc, "start_job", { p_job_id: jobId });
  const after = (await admin.query("select pg_current_wal_insert_lsn() as lsn")).rows[0].lsn;
  const { rows } = await admin.query(
    `select count(*)::int as n from pg_get_wal_records_info($1, $2) w
     where w.resource_manager = 'Btree' and w.record_type like 'INSERT%'
       and w.block_ref like '% rel %/' ||
         (select oid from pg_database where datname = current_database()) || '/' ||
         pg_relation_filenode('public.generation_jobs_idempotency_key_per_user') || ' %'`,
    [before, after],
  );
  // Ended at once, so the plan's active-job limit never stops the next enqueue.
  await rpc(svc, "complete_job", { p_job_id: jobId, p_attempt: 1, p_output: "done" });
  return rows[0].n;
}

describe("the idempotency index holds keyed jobs only", () => {
  test("a keyless claim writes no entry into it, a keyed one does; the key still replays", async () => {
    const user = await db.user("pro");
    const enqueue = (key: string | null) =>
      rpc(svc, "enqueue_job", { p_user_id: user, p_prompt: "same words", p_idempotency_key: key });
    const keyed = await enqueue("k-1");
    const keyless = await enqueue(null);
    expect({
      keyed: await claimIndexInserts(keyed.job.id),
      keyless: await claimIndexInserts(keyless.job.id),
    }).toEqual({ keyed: 1, keyless: 0 });

    const replay = await enqueue("k-1");
    expect(replay).toMatchObject({ outcome: "replayed", job: { id: keyed.job.id } });
  });
});
