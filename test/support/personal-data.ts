/**
 * Personal data, planted and searched for: a user's jobs in every status, each carrying a unique
 * marker in every place a user's text can reach (prompt, input, idempotency key, output, partial
 * output, error text), and a search of the WHOLE database for it: every row of every table and
 * materialized view in every schema but PostgreSQL's own (the row as text, so every column of
 * every type counts), and the large objects.
 */
import { randomUUID } from "node:crypto";
import type { Redis as IORedis } from "ioredis";
import type pg from "pg";
import { expect } from "vitest";
import { rpc } from "./db.ts";

/** A marker no other test writes: letters and digits only, so no escaping hides it. */
export const newMarker = (): string => `PIImark${randomUUID().replaceAll("-", "")}`;

/** A job plan of the file's own with room for many active jobs (the seed's allow 3). */
export async function roomyPlan(admin: pg.Pool, id: string): Promise<void> {
  await admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs, meter)
     values ($1, $1, 'month', 100000, 100, 'jobs') on conflict (id) do nothing`,
    [id],
  );
}

const usage = { prompt_tokens: 40, completion_tokens: 60, source: "provider" };

export interface Planted {
  /** Job id by what happened to it. */
  jobs: Record<
    "succeeded" | "failed" | "canceled" | "released" | "requeued" | "running" | "queued",
    string
  >;
}

/**
 * Seven jobs of `user`, the marker in each: succeeded (output, and a partial output before),
 * failed with an error, canceled while queued, released after a transient error (queued, error
 * kept), requeued after a quota hit (queued, error kept, and its first message's failure
 * callback superseded, its attempt's usage recorded apart), running with a partial output, and
 * queued; inputs carry it beyond the prompt, idempotency keys too. Every kind of row a job has:
 * the job, its events (transitions, progress, attempt usage), a superseded callback.
 */
export async function plantJobs(
  svc: pg.Pool,
  user: string,
  marker: string,
  now: Date,
): Promise<Planted> {
  const enqueue = async (name: string) => {
    const r = await rpc(svc, "enqueue_job", {
      p_user_id: user,
      p_prompt: `${name} prompt ${marker}`,
      p_idempotency_key: `${name}-${marker}`,
      p_input: { prompt: `${name} prompt ${marker}`, note: `input ${marker}` },
      p_now: now,
    });
    expect(r.outcome).toBe("enqueued");
    return r.job.id as string;
  };
  const start = async (id: string) => {
    expect((await rpc(svc, "start_job", { p_job_id: id, p_now: now })).outcome).toBe("started");
  };
  const progress = async (id: string, attempt = 1) => {
    const r = await rpc(svc, "record_progress", {
      p_job_id: id,
      p_attempt: attempt,
      p_offset: 0,
      p_text: `partial ${marker}`,
      p_completion_tokens: 12,
      p_now: now,
    });
    expect(r.outcome).toBe("recorded");
  };
  /** `fn` at `now`, which must answer `outcome`. */
  const expectCall = async (fn: string, args: Record<string, unknown>, outcome: string) =>
    expect((await rpc(svc, fn, { ...args, p_now: now })).outcome).toBe(outcome);
  /** A job whose one attempt made progress, then `fn` ended (or released) it. */
  const ranThen = async (
    name: string,
    fn: string,
    args: Record<string, unknown>,
    outcome: string,
  ) => {
    const id = await enqueue(name);
    await start(id);
    await progress(id);
    await expectCall(fn, { p_job_id: id, p_attempt: 1, p_usage: usage, ...args }, outcome);
    return id;
  };

  const succeeded = await ranThen(
    "succeeded",
    "complete_job",
    { p_output: `output ${marker}` },
    "completed",
  );
  const failed = await ranThen(
    "failed",
    "fail_job",
    { p_reason: "output_invalid", p_error: `error ${marker}` },
    "failed",
  );
  const canceled = await enqueue("canceled");
  await expectCall("cancel_job", { p_job_id: canceled, p_user_id: user }, "canceled");
  const released = await ranThen(
    "released",
    "release_job",
    { p_error: `transient ${marker}` },
    "released",
  );

  const requeued = await enqueue("requeued");
  await start(requeued);
  const resumeAt = new Date(now.getTime() + 60_000);
  await expectCall(
    "requeue_job",
    { p_job_id: requeued, p_attempt: 1, p_resume_at: resumeAt, p_error: `quota ${marker}` },
    "requeued",
  );
  // The requeue published a second message (publish_seq 2): the first one's failure callback,
  // due after its last retry, is superseded and leaves a row in superseded_callbacks.
  await expectCall(
    "fail_job",
    { p_job_id: requeued, p_reason: "delivery_failed", p_seq: 1 },
    "superseded",
  );
  // Its first attempt's usage, recorded apart from the requeue (an attempt_usage event).
  await expectCall(
    "record_attempt_usage",
    { p_job_id: requeued, p_attempt: 1, p_usage: usage },
    "recorded",
  );

  const running = await enqueue("running");
  await start(running);
  await progress(running);

  const queued = await enqueue("queued");
  return { jobs: { succeeded, failed, canceled, released, requeued, running, queued } };
}

/**
 * Where the marker is: `schema.table` for every table (and materialized view) holding a row whose
 * text contains it, and `pg_largeobject` when a large object does.
 */
export async function findMarker(admin: pg.Pool, marker: string): Promise<string[]> {
  const { rows: tables } = await admin.query<{ name: string }>(`
    select format('%I.%I', n.nspname, c.relname) as name
    from pg_class c join pg_namespace n on n.oid = c.relnamespace
    where c.relkind in ('r', 'm')
      and n.nspname not in ('pg_catalog', 'information_schema')
      and n.nspname not like 'pg\\_toast%' and n.nspname not like 'pg\\_temp%'
    order by 1`);
  expect(tables.length).toBeGreaterThan(5);
  const found: string[] = [];
  for (const { name } of tables) {
    const { rows } = await admin.query<{ n: number }>(
      `select count(*)::int as n from only ${name} t where strpos(t::text, $1) > 0`,
      [marker],
    );
    if ((rows[0]?.n ?? 0) > 0) found.push(name);
  }
  const { rows: lo } = await admin.query<{ n: number }>(
    "select count(*)::int as n from pg_largeobject where position(convert_to($1, 'UTF8') in data) > 0",
    [marker],
  );
  if ((lo[0]?.n ?? 0) > 0) found.push("pg_largeobject");
  return found;
}

/**
 * Every Redis key whose name or content holds `needle` (strings, hashes, sets, sorted sets and
 * lists read whole), over the whole keyspace: for a test's own redis-server.
 */
export async function findInRedis(redis: IORedis, needle: string): Promise<string[]> {
  const found: string[] = [];
  let cursor = "0";
  do {
    const [next, keys] = await redis.scan(cursor, "COUNT", 1000);
    cursor = next;
    for (const key of keys) {
      const type = await redis.type(key);
      const content =
        type === "string"
          ? await redis.get(key)
          : type === "hash"
            ? await redis.hgetall(key)
            : type === "set"
              ? await redis.smembers(key)
              : type === "zset"
                ? await redis.zrange(key, "0", "-1")
                : type === "list"
                  ? await redis.lrange(key, 0, -1)
                  : type;
      if (key.includes(needle) || JSON.stringify(content).includes(needle)) found.push(key);
    }
  } while (cursor !== "0");
  return found.sort();
}
