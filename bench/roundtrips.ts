/**
 * Section 1: round trips per flow, counted at the stand-ins (the PostgREST stand-in's RPC
 * count, QStash publishes, fake model calls) while the real api/ handlers run in this process,
 * and cross-checked by counting what this process sent.
 *
 * The comparison row wires the same flows with the refund scattered across callers (load plan, reserve, count
 * active jobs, insert; separate claim / refund / mark calls), as plain SQL statements in this
 * file only, on the same database but on copies of the tables without our constraints and
 * trigger (which would refuse a "failed but not yet refunded" row, the very state that wiring
 * passes through). Each statement stands for one PostgREST request; they are counted as sent.
 */

import { randomUUID } from "node:crypto";
import { Redis } from "@upstash/redis";
import pg from "pg";
import { type BenchApp, type Counts, createBenchApp, diff } from "./support/app.ts";
import { bulkJobs, createUsers } from "./support/pg.ts";
import { pollCost } from "./support/poll-cost.ts";
import { type BenchStack, type StandInStats, startBenchStack } from "./support/stack.ts";
import { log, table, writeResult } from "./support/util.ts";

interface Measured {
  status: number;
  body: unknown;
  atStandIns: { db: number; publish: number; model: number };
  sent: Counts;
}

interface Row {
  flow: string;
  target: string;
  ours: Measured["atStandIns"] & { realtime: number; redis: number; status: number };
  seed: { db: number; publish: number; model: number } | null;
  met: boolean | null;
}

async function measure(
  stack: BenchStack,
  app: BenchApp,
  fn: () => Promise<Response>,
): Promise<Measured> {
  const s0: StandInStats = await stack.stats();
  const c0 = app.sent();
  const res = await fn();
  const body = await res.json().catch(() => null);
  const c1 = app.sent();
  const s1 = await stack.stats();
  return {
    status: res.status,
    body,
    atStandIns: {
      db: s1.rpcCalls - s0.rpcCalls,
      publish: s1.qstash.published - s0.qstash.published,
      model: s1.modelCalls - s0.modelCalls,
    },
    sent: diff(c1, c0),
  };
}

/** The scattered wiring (docs/DESIGN.md#refunds-scattered-across-callers), one SQL statement per PostgREST request it would make. */
class SeedWiring {
  statements = 0;
  constructor(
    private readonly client: pg.Client,
    private readonly app: BenchApp,
  ) {}

  private async q<T extends pg.QueryResultRow>(text: string, values: unknown[] = []) {
    this.statements++;
    return this.client.query<T>(text, values);
  }

  static async setup(client: pg.Client) {
    await client.query(`
      create schema if not exists seedwire;
      create table seedwire.jobs (like public.generation_jobs including defaults);
      alter table seedwire.jobs add primary key (id);
      alter table seedwire.jobs add column quota_rolled_back boolean not null default false;
      create table seedwire.quota_usage (like public.quota_usage including defaults including indexes);
      create table seedwire.generations (job_id uuid primary key, output text not null);`);
  }

  async plan(userId: string) {
    const { rows } = await this.q<{
      id: string;
      units_per_period: number;
      max_active_jobs: number;
    }>(
      `select p.* from public.plans p
       where p.id = coalesce((select plan_id from public.user_plans where user_id = $1), 'free')`,
      [userId],
    );
    return rows[0] as { id: string; units_per_period: number; max_active_jobs: number };
  }

  /** reserveGenerationSlot + the /process call: returns the job id or the refusal. */
  async enqueue(userId: string): Promise<string | "quota_exceeded" | "concurrency_limited"> {
    const plan = await this.plan(userId);
    const period = "date_trunc('month', now())";
    const reserved = await this.q(
      `insert into seedwire.quota_usage as q (user_id, period_start, units_used)
       values ($1, ${period}, 1)
       on conflict (user_id, period_start, meter) do update set units_used = q.units_used + 1
       where q.units_used < $2 returning units_used`,
      [userId, plan.units_per_period],
    );
    if (reserved.rowCount === 0) return "quota_exceeded";
    const active = await this.q<{ n: number }>(
      `select count(*)::int n from seedwire.jobs where user_id = $1 and status in ('queued', 'running')`,
      [userId],
    );
    if ((active.rows[0]?.n ?? 0) >= plan.max_active_jobs) {
      await this.rollbackQuota(userId);
      return "concurrency_limited";
    }
    const { rows } = await this.q<{ id: string }>(
      `insert into seedwire.jobs (user_id, status, prompt, input, request_hash, plan_id,
         period_start, created_at, queued_at, updated_at)
       values ($1, 'queued', 'seed prompt', '{"prompt": "seed prompt"}', md5('seed prompt'), $2,
         ${period}, now(), now(), now())
       returning id`,
      [userId, plan.id],
    );
    const id = rows[0]?.id as string;
    await this.app.deps.queue.publishJob({ jobId: id, seq: 1, dedupId: `seed-${id}` });
    return id;
  }

  async rollbackQuota(userId: string) {
    await this.q(
      `update seedwire.quota_usage set units_used = units_used - 1
       where user_id = $1 and period_start = date_trunc('month', now()) and units_used > 0`,
      [userId],
    );
  }

  async claim(jobId: string): Promise<boolean> {
    const r = await this.q(
      `update seedwire.jobs set status = 'running', attempts = attempts + 1,
         lease_expires_at = now() + interval '90 s', started_at = now()
       where id = $1 and status = 'queued' returning id`,
      [jobId],
    );
    return r.rowCount === 1;
  }

  /** failJobAndRefund: claimFailed, rollbackQuota, markQuotaRolledBack. */
  async failAndRefund(jobId: string, userId: string, reason: string) {
    const claimed = await this.q(
      `update seedwire.jobs set status = 'failed', failure_reason = $2, finished_at = now()
       where id = $1 and status in ('queued', 'running') returning id`,
      [jobId, reason],
    );
    if (claimed.rowCount !== 1) return;
    await this.rollbackQuota(userId);
    await this.q("update seedwire.jobs set quota_rolled_back = true where id = $1", [jobId]);
  }

  async workerSuccess(jobId: string) {
    if (!(await this.claim(jobId))) return;
    const { text: output } = await this.app.workerDeps.model.generate("seed prompt", {
      maxOutputTokens: 512,
    });
    await this.q("insert into seedwire.generations (job_id, output) values ($1, $2)", [
      jobId,
      output,
    ]);
    await this.q(
      `update seedwire.jobs set status = 'succeeded', finished_at = now(), lease_expires_at = null
       where id = $1 and status = 'running' returning id`,
      [jobId],
    );
  }

  async workerQuota(jobId: string, userId: string, giveUp: boolean) {
    if (!(await this.claim(jobId))) return;
    await this.app.workerDeps.model
      .generate("seed prompt", { maxOutputTokens: 512 })
      .catch(() => null);
    if (giveUp) return this.failAndRefund(jobId, userId, "provider_quota_exhausted");
    await this.q(
      `update seedwire.jobs set status = 'queued', provider_quota_hits = provider_quota_hits + 1,
         resume_at = now() + interval '1 s', lease_expires_at = null
       where id = $1 and status = 'running' returning id`,
      [jobId],
    );
    await this.app.deps.queue.publishJob({ jobId, seq: 1, dedupId: `seed-${jobId}-r` });
  }

  async status(jobId: string, userId: string) {
    await this.q("select * from seedwire.jobs where id = $1 and user_id = $2", [jobId, userId]);
  }

  async usage(userId: string) {
    await this.plan(userId);
    await this.q(
      `select units_used from seedwire.quota_usage where user_id = $1 and period_start = date_trunc('month', now())`,
      [userId],
    );
    await this.q(
      `select count(*) from seedwire.jobs where user_id = $1 and status in ('queued', 'running')`,
      [userId],
    );
  }

  async sweep(olderThan: string) {
    const { rows } = await this.q<{ id: string; user_id: string }>(
      `select id, user_id from seedwire.jobs
       where status in ('queued', 'running') and created_at < now() - $1::interval`,
      [olderThan],
    );
    for (const r of rows) await this.failAndRefund(r.id, r.user_id, "max_age_exceeded");
  }
}

/** The fake model's next answer is this failure (its control API). */
function failModel(stack: BenchStack, kind: string, extra: Record<string, unknown> = {}) {
  return fetch(`${(stack.env.OPENAI_BASE_URL as string).replace(/\/v1$/, "")}/__fake/fail`, {
    method: "POST",
    body: JSON.stringify({ kind, count: 1, ...extra }),
  });
}

/** Each flow through our handlers, counted at the stand-ins and as sent. */
async function measureOurs(
  stack: BenchStack,
  app: BenchApp,
  admin: pg.Client,
  sweepSizes: number[],
): Promise<Record<string, Measured>> {
  const redis = new Redis({
    url: stack.env.UPSTASH_REDIS_REST_URL as string,
    token: stack.env.UPSTASH_REDIS_REST_TOKEN as string,
    enableTelemetry: false,
  });
  const openGate = () => redis.del("quota-jobs:provider:resume-at");
  const m = (fn: () => Promise<Response>) => measure(stack, app, fn);
  const h = app.handlers;

  const enqueueReq = async (userId: string) =>
    app.request("/api/jobs", {
      method: "POST",
      token: await app.token(userId),
      body: JSON.stringify({ prompt: "Write a haiku about round trips." }),
    });
  const enqueue = async (userId: string) => {
    const res = await h.jobs(await enqueueReq(userId));
    const body = (await res.json()) as { job: { id: string } };
    return body.job.id;
  };
  const worker = (jobId: string) => app.signed("/api/worker", { jobId }).then(h.worker);

  const ours: Record<string, Measured> = {};
  const [free3, free4] = await createUsers(admin, 2, "free");
  const pros = await createUsers(admin, 5, "pro");

  // A user's first enqueue on an instance also reads their log pseudonym (beside the publish);
  // the instance keeps it, so their next enqueue there does not.
  const returning = pros[4] as string;
  const first = await m(async () => h.jobs(await enqueueReq(returning)));
  ours.enqueue = await m(async () => h.jobs(await enqueueReq(returning)));
  ours["enqueue, the user's first on this instance"] = first;
  const job1 = (ours.enqueue.body as { job: { id: string } }).job.id;
  ours["worker success"] = await m(() => worker(job1));
  // A duplicate delivery of a running job: a job claimed and still leased.
  const jobRunning = await enqueue(pros[0] as string);
  await app.deps.jobs.start(jobRunning, { leaseSeconds: 90 });
  ours["worker duplicate delivery (leased)"] = await m(() => worker(jobRunning));

  const jobQuota = await enqueue(pros[1] as string);
  await failModel(stack, "rate_limit_exceeded", { retryAfterSeconds: 1 });
  ours["worker provider-quota requeue"] = await m(() => worker(jobQuota));
  await openGate();

  const jobGiveUp = await enqueue(pros[2] as string);
  await admin.query("update public.generation_jobs set provider_quota_hits = 2 where id = $1", [
    jobGiveUp,
  ]);
  await failModel(stack, "rate_limit_exceeded", { retryAfterSeconds: 1 });
  ours["worker give-up"] = await m(() => worker(jobGiveUp));
  await openGate();

  const jobDlq = await enqueue(free3 as string);
  ours["failure callback (DLQ)"] = await m(async () =>
    h.dlq(
      await app.signed("/api/dlq", {
        sourceBody: Buffer.from(JSON.stringify({ jobId: jobDlq })).toString("base64"),
        status: 500,
        retried: 1,
        maxRetries: 1,
        dlqId: `dlq-${randomUUID()}`,
        sourceMessageId: `msg_${randomUUID()}`,
      }),
    ),
  );

  const jobCancel = await enqueue(free4 as string);
  const t4 = await app.token(free4 as string);
  ours.status = await m(() => h.job(app.request(`/api/jobs/${jobCancel}`, { token: t4 })));
  ours.cancel = await m(() =>
    h.job(app.request(`/api/jobs/${jobCancel}`, { method: "DELETE", token: t4 })),
  );
  ours.usage = await m(() => h.usage(app.request("/api/usage", { token: t4 })));
  ours.list = await m(() => h.jobs(app.request("/api/jobs", { token: t4 })));

  const full = pros[3] as string;
  for (let i = 0; i < 3; i++) await enqueue(full);
  ours["enqueue refused (too many active)"] = await m(async () => h.jobs(await enqueueReq(full)));

  const staleUsers = await createUsers(admin, 50, "bench");
  for (const n of sweepSizes) {
    await bulkJobs(admin, {
      users: staleUsers,
      from: 0,
      to: n - 1,
      statusSql: "case when i % 2 = 0 then 'queued' else 'running' end",
      createdSql: "now() - interval '4 hours'",
      leaseSeconds: 90,
    });
    ours[`sweep of ${n} stale jobs`] = await m(() =>
      h.sweep(
        app.request("/api/cron/sweep", {
          headers: { authorization: `Bearer ${stack.env.CRON_SECRET}` },
        }),
      ),
    );
  }
  return ours;
}

/** The same flows through the scattered wiring, on the same database. */
async function measureSeed(
  stack: BenchStack,
  app: BenchApp,
  admin: pg.Client,
  sweepSizes: number[],
) {
  // The comparison: the scattered wiring on the same database.
  await SeedWiring.setup(admin);
  const seedClient = new pg.Client({ connectionString: stack.databaseUrl });
  // A failure below stops the stack: the section reports it, not this client's lost connection.
  seedClient.on("error", () => {});
  await seedClient.connect();
  const seed = new SeedWiring(seedClient, app);
  const seedUsers = await createUsers(admin, 8, "pro");
  const seedM = async (fn: () => Promise<unknown>) => {
    const s0 = await stack.stats();
    const n0 = seed.statements;
    await fn();
    const s1 = await stack.stats();
    return {
      db: seed.statements - n0,
      publish: s1.qstash.published - s0.qstash.published,
      model: s1.modelCalls - s0.modelCalls,
    };
  };
  const seedRows: Record<string, { db: number; publish: number; model: number }> = {};
  let sj = "";
  const u = (i: number) => seedUsers[i] as string;
  seedRows.enqueue = await seedM(async () => {
    sj = (await seed.enqueue(u(0))) as string;
  });
  seedRows["worker success"] = await seedM(() => seed.workerSuccess(sj));
  const sRun = (await seed.enqueue(u(1))) as string;
  await seed.claim(sRun);
  seedRows["worker duplicate delivery (leased)"] = await seedM(() => seed.claim(sRun));
  const sq = (await seed.enqueue(u(2))) as string;
  await failModel(stack, "rate_limit_exceeded", { retryAfterSeconds: 1 });
  seedRows["worker provider-quota requeue"] = await seedM(() => seed.workerQuota(sq, u(2), false));
  const sg = (await seed.enqueue(u(3))) as string;
  await failModel(stack, "rate_limit_exceeded", { retryAfterSeconds: 1 });
  seedRows["worker give-up"] = await seedM(() => seed.workerQuota(sg, u(3), true));
  const sd = (await seed.enqueue(u(4))) as string;
  seedRows["failure callback (DLQ)"] = await seedM(() =>
    seed.failAndRefund(sd, u(4), "delivery_failed"),
  );
  const sc = (await seed.enqueue(u(5))) as string;
  seedRows.status = await seedM(() => seed.status(sc, u(5)));
  seedRows.cancel = await seedM(() => seed.failAndRefund(sc, u(5), "canceled"));
  seedRows.usage = await seedM(() => seed.usage(u(5)));
  seedRows.list = await seedM(() => seed.status(sc, u(5)));
  for (let i = 0; i < 3; i++) await seed.enqueue(u(6));
  seedRows["enqueue refused (too many active)"] = await seedM(() => seed.enqueue(u(6)));
  for (const n of sweepSizes) {
    await admin.query(
      `insert into seedwire.jobs (user_id, status, prompt, input, request_hash, plan_id, period_start, created_at, queued_at, updated_at)
       select $1, 'queued', 'p', '{"prompt": "p"}', 'h', 'bench', now(), now() - interval '4 hours', now(), now() from generate_series(1, $2)`,
      [u(7), n],
    );
    await admin.query(
      `insert into seedwire.quota_usage (user_id, period_start, units_used) values ($1, date_trunc('month', now()), $2)
       on conflict (user_id, period_start, meter) do update set units_used = seedwire.quota_usage.units_used + $2`,
      [u(7), n],
    );
    seedRows[`sweep of ${n} stale jobs`] = await seedM(() => seed.sweep("3 hours"));
  }
  await seedClient.end();
  return seedRows;
}

/** Each flow against its target, beside the scattered wiring's count. */
function compare(
  ours: Record<string, Measured>,
  seedRows: Record<string, { db: number; publish: number; model: number }>,
): Row[] {
  const targets: Record<string, [string, (x: Measured["atStandIns"]) => boolean]> = {
    enqueue: ["1 db + 1 publish", (x) => x.db === 1 && x.publish === 1],
    "enqueue, the user's first on this instance": [
      "1 db + 1 publish, + 1 db for the log pseudonym (beside the publish)",
      (x) => x.db === 2 && x.publish === 1,
    ],
    // The claim, the first progress write (on the first streamed text), the completion.
    "worker success": [
      "3 db (claim, first progress, complete) + 1 model",
      (x) => x.db === 3 && x.model === 1,
    ],
    "worker duplicate delivery (leased)": ["1 db, 0 model", (x) => x.db === 1 && x.model === 0],
    "worker provider-quota requeue": [
      "2 db + 1 model + 1 publish",
      (x) => x.db === 2 && x.model === 1 && x.publish === 1,
    ],
    "worker give-up": ["2 db + 1 model", (x) => x.db === 2 && x.model === 1 && x.publish === 0],
    "failure callback (DLQ)": ["1 db", (x) => x.db === 1],
    cancel: ["1 db", (x) => x.db === 1],
    status: ["1 db", (x) => x.db === 1],
    usage: ["1 db", (x) => x.db === 1],
    list: ["1 db", (x) => x.db === 1],
    "enqueue refused (too many active)": ["1 db, 0 publish", (x) => x.db === 1 && x.publish === 0],
  };
  const rows: Row[] = Object.entries(ours).map(([flow, x]) => {
    const sweepN = /^sweep of (\d+)/.exec(flow)?.[1];
    const t = sweepN
      ? ([
          `1 + floor(N/100) db (batches of 100), + 2 for the cron's upkeep = ${3 + Math.floor(Number(sweepN) / 100)}`,
          (y: Measured["atStandIns"]) => y.db === 3 + Math.floor(Number(sweepN) / 100),
        ] as [string, (y: Measured["atStandIns"]) => boolean])
      : targets[flow];
    return {
      flow,
      target: t?.[0] ?? "—",
      ours: { ...x.atStandIns, realtime: x.sent.realtime, redis: x.sent.redis, status: x.status },
      sentDb: x.sent.db,
      seed: seedRows[flow] ?? null,
      met: t ? t[1](x.atStandIns) && x.sent.db === x.atStandIns.db : null,
    };
  });
  return rows;
}

export async function runRoundtrips(opts: { quick: boolean }) {
  const stack = await startBenchStack();
  const admin = new pg.Client({ connectionString: stack.databaseUrl });
  admin.on("error", () => {});
  await admin.connect();
  try {
    const app = await createBenchApp(stack);
    const sweepSizes = opts.quick ? [250] : [250, 1000];
    const ours = await measureOurs(stack, app, admin, sweepSizes);
    const seedRows = await measureSeed(stack, app, admin, sweepSizes);
    const rows = compare(ours, seedRows);
    for (const r of rows)
      log(`  roundtrips ${r.flow}: ${JSON.stringify(r.ours)} seed ${JSON.stringify(r.seed)}`);
    const result = { rows, postgres: stack.postgres, polls: await pollCost() };
    await writeResult("roundtrips", result);
    return result;
  } finally {
    await admin.end().catch(() => {});
    await stack.stop();
  }
}

export function printRoundtrips(r: Awaited<ReturnType<typeof runRoundtrips>>): string {
  const polls = table(
    [
      "the page's status reads per job (1 db each)",
      "old fixed schedule",
      "adaptive",
      "extra",
      "first text shown after, old / adaptive (ms)",
    ],
    r.polls.map((p) => [
      p.timeline,
      p.fixed.reads,
      p.adaptive.reads,
      p.extraReads,
      `${p.fixed.firstTextShownAfterMs} / ${p.adaptive.firstTextShownAfterMs}`,
    ]),
  );
  return `${flows(r)}\n\n${polls}`;
}

function flows(r: Awaited<ReturnType<typeof runRoundtrips>>): string {
  return table(
    [
      "flow",
      "HTTP",
      "db",
      "publish",
      "model",
      "realtime",
      "redis",
      "target",
      "met",
      "scattered wiring: db",
      "publish",
      "model",
    ],
    r.rows.map((x) => [
      x.flow,
      x.ours.status,
      x.ours.db,
      x.ours.publish,
      x.ours.model,
      x.ours.realtime,
      x.ours.redis,
      x.target,
      x.met === null ? "—" : x.met ? "yes" : "NO",
      x.seed?.db ?? null,
      x.seed?.publish ?? null,
      x.seed?.model ?? null,
    ]),
  );
}
