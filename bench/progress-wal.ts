/**
 * What a streamed job's progress writes cost the database: `tsx bench/progress-wal.ts`.
 *
 * For answers of 2,000 and 8,000 tokens (~4 characters a token, text that does not compress), a
 * job streams its answer as the worker writes it, one `record_progress` per 40 tokens' worth
 * (160 characters), then completes. Measured on the bench's own PostgreSQL (nothing else writes
 * to it): the WAL of the progress writes (`pg_current_wal_lsn` before and after, after a
 * checkpoint), the WAL of the completion, and the writes' time. It runs against either shape of
 * record_progress: the whole text so far (`p_partial_output`, before) or the new text after an
 * offset (`p_offset`, `p_text`), so the same script measures both commits.
 */
import { randomBytes } from "node:crypto";
import type pg from "pg";
import { createUsers, startBenchDb } from "./support/pg.ts";
import { log, median, round, table, writeResult } from "./support/util.ts";

const CHARS_PER_TOKEN = 4;
const TOKENS_PER_WRITE = 40;
const ANSWERS = [2_000, 8_000];

interface Run {
  tokens: number;
  writes: number;
  progressWalBytes: number;
  lastWriteWalBytes: number;
  completeWalBytes: number;
  writeMsMedian: number;
  writeMsTotal: number;
}

const lsn = async (db: pg.Pool): Promise<string> =>
  (await db.query<{ l: string }>("select pg_current_wal_lsn()::text l")).rows[0]?.l ?? "0/0";
const walSince = async (db: pg.Pool, from: string): Promise<number> =>
  Number(
    (await db.query<{ n: string }>("select pg_wal_lsn_diff(pg_current_wal_lsn(), $1) n", [from]))
      .rows[0]?.n ?? 0,
  );

async function streamOne(
  admin: pg.Pool,
  svc: pg.Pool,
  user: string,
  tokens: number,
  deltas: boolean,
): Promise<Run> {
  const call = async (fn: string, args: Record<string, unknown>) => {
    const names = Object.keys(args);
    const { rows } = await svc.query(
      `select public.${fn}(${names.map((n, i) => `${n} => $${i + 1}`).join(", ")}) r`,
      Object.values(args),
    );
    return rows[0].r;
  };
  const job = (await call("enqueue_job", { p_user_id: user, p_prompt: "write a long story" })).job;
  const started = await call("start_job", { p_job_id: job.id, p_lease_seconds: 600 });
  const attempt = started.job.attempts as number;
  const writes = tokens / TOKENS_PER_WRITE;
  const perWrite = TOKENS_PER_WRITE * CHARS_PER_TOKEN;
  await admin.query("checkpoint");
  const from = await lsn(admin);
  let text = "";
  let stored = 0;
  const ms: number[] = [];
  let lastFrom = from;
  for (let i = 0; i < writes; i++) {
    const more = randomBytes((perWrite * 3) / 4).toString("base64");
    text += more;
    if (i === writes - 1) lastFrom = await lsn(admin);
    const t = performance.now();
    const r = deltas
      ? await call("record_progress", {
          p_job_id: job.id,
          p_attempt: attempt,
          p_offset: stored,
          p_text: text.slice(stored),
          p_completion_tokens: (i + 1) * TOKENS_PER_WRITE,
        })
      : await call("record_progress", {
          p_job_id: job.id,
          p_attempt: attempt,
          p_partial_output: text,
          p_completion_tokens: (i + 1) * TOKENS_PER_WRITE,
        });
    ms.push(performance.now() - t);
    if (r.outcome !== "recorded") throw new Error(`record_progress: ${r.outcome}`);
    stored = deltas ? r.stored : text.length;
  }
  const lastWriteWalBytes = await walSince(admin, lastFrom);
  const progressWalBytes = await walSince(admin, from);
  const beforeComplete = await lsn(admin);
  const done = await call("complete_job", { p_job_id: job.id, p_attempt: attempt, p_output: text });
  if (done.outcome !== "completed") throw new Error(`complete_job: ${done.outcome}`);
  return {
    tokens,
    writes,
    progressWalBytes,
    lastWriteWalBytes,
    completeWalBytes: await walSince(admin, beforeComplete),
    writeMsMedian: round(median(ms), 2),
    writeMsTotal: round(
      ms.reduce((a, b) => a + b, 0),
      1,
    ),
  };
}

async function main() {
  const db = await startBenchDb();
  try {
    const { rows } = await db.admin.query<{ deltas: boolean }>(
      `select exists (select from pg_proc p, unnest(p.proargnames) a
                      where p.proname = 'record_progress' and a = 'p_offset') deltas`,
    );
    const deltas = rows[0]?.deltas ?? false;
    log(`progress-wal: record_progress takes ${deltas ? "the new text" : "the whole text"}`);
    const svc = db.service(1);
    const users = await createUsers(db.admin, ANSWERS.length, "pro");
    const runs: Run[] = [];
    for (const [i, tokens] of ANSWERS.entries())
      runs.push(await streamOne(db.admin, svc, users[i] as string, tokens, deltas));
    const [small, large] = runs as [Run, Run];
    const ratio = round(large.progressWalBytes / small.progressWalBytes, 1);
    await writeResult("progress-wal", { deltas, postgres: db.version, runs, ratio });
    console.log(
      table(
        [
          "answer",
          "writes",
          "progress WAL",
          "per write",
          "last write",
          "complete WAL",
          "write ms (median)",
          "writes ms (total)",
        ],
        runs.map((r) => [
          `${r.tokens} tokens`,
          r.writes,
          r.progressWalBytes,
          Math.round(r.progressWalBytes / r.writes),
          r.lastWriteWalBytes,
          r.completeWalBytes,
          r.writeMsMedian,
          r.writeMsTotal,
        ]),
      ),
    );
    console.log(`\nprogress WAL, 8,000 / 2,000 tokens: ${ratio} (linear: 4, quadratic: 16)`);
  } finally {
    await db.stop();
  }
}

await main();
