/**
 * The setup every test/db file repeated, once: the pools (service role as PostgREST runs our RPCs,
 * the login role for setup and reads), optionally a database of the file's own, the no-drift
 * check (docs/DESIGN.md#invariant-1-no-drift) after each test or after the file, and the few
 * steps the tests build their cases from: a user on a plan, a job enqueued, claimed, its counter
 * and its events. Each step asserts the outcome it needs, so a broken setup fails where it is.
 *
 * @example
 * const db = dbFixture({ fresh: true, service: 40, noDrift: "file" });
 * const user = await db.user("team");
 * const job = await db.running(user, { promptTokens: 100 });
 */
import type pg from "pg";
import { afterAll, afterEach, expect } from "vitest";
import {
  adminPool,
  expectNoDrift,
  type Json,
  newUser,
  rpc,
  servicePool,
  useFreshDatabase,
} from "./db.ts";

export interface DbFixtureOptions {
  /** A database of this file's own (files that sweep, race or list every object). */
  fresh?: boolean;
  /** Connections in the service-role pool. @default 10 */
  service?: number;
  /** When the no-drift invariant is checked on the whole database. @default "each" */
  noDrift?: "each" | "file" | "never";
  /** The clock the steps below pass as `p_now` unless told otherwise. */
  now?: Date;
}

export interface EnqueueOptions {
  /** @default a unique "prompt <random>" */
  prompt?: string;
  /** The hold's prompt bound (`p_prompt_tokens`); the database's own default when unset. */
  promptTokens?: number;
  now?: Date;
}

export interface DbFixture {
  /** Service-role pool: every transition runs through it. */
  svc: pg.Pool;
  /** Login-role pool: setup and reads of everything. */
  admin: pg.Pool;
  /** A user of its own in auth.users, on `plan` (a user_plans row unless free). */
  user(plan?: string): Promise<string>;
  /** enqueue_job for `user`, which must answer "enqueued"; the job row. */
  enqueued(user: string, options?: EnqueueOptions): Promise<Json>;
  /** start_job on a queued job, which must answer "started"; the whole answer. */
  started(jobId: string, options?: { now?: Date; leaseSeconds?: number }): Promise<Json>;
  /** requeue_job on a running job's `attempt` (1 unless given), which must answer "requeued". */
  requeued(jobId: string, options: { resumeAt: Date; now?: Date; attempt?: number }): Promise<Json>;
  /** The user's counter row (for `meter`, else its only one), zeros when there is none. */
  usage(user: string, meter?: string): Promise<{ units_used: number; paid_refunds: number }>;
  /** The job's events in order, as job_events holds them. */
  events(jobId: string): Promise<Json[]>;
}

export function dbFixture(options: DbFixtureOptions = {}): DbFixture {
  if (options.fresh) useFreshDatabase();
  const svc = servicePool(options.service);
  const admin = adminPool();
  const noDrift = options.noDrift ?? "each";
  if (noDrift === "each") afterEach(() => expectNoDrift(admin));
  if (noDrift === "file") afterAll(() => expectNoDrift(admin));
  const clock = (now?: Date) => now ?? options.now ?? new Date();

  return {
    svc,
    admin,
    user: (plan = "free") => newUser(admin, plan),
    async enqueued(user, { prompt, promptTokens, now } = {}) {
      const r = await rpc(svc, "enqueue_job", {
        p_user_id: user,
        p_prompt: prompt ?? `prompt ${Math.random()}`,
        ...(promptTokens === undefined ? {} : { p_prompt_tokens: promptTokens }),
        p_now: clock(now),
      });
      expect(r.outcome).toBe("enqueued");
      return r.job;
    },
    async started(jobId, { now, leaseSeconds } = {}) {
      const s = await rpc(svc, "start_job", {
        p_job_id: jobId,
        ...(leaseSeconds === undefined ? {} : { p_lease_seconds: leaseSeconds }),
        p_now: clock(now),
      });
      expect(s.outcome).toBe("started");
      return s;
    },
    async requeued(jobId, { resumeAt, now, attempt = 1 }) {
      const r = await rpc(svc, "requeue_job", {
        p_job_id: jobId,
        p_attempt: attempt,
        p_resume_at: resumeAt,
        p_now: clock(now),
      });
      expect(r.outcome).toBe("requeued");
      return r;
    },
    async usage(user, meter) {
      const r = await admin.query(
        `select units_used, paid_refunds from public.quota_usage
         where user_id = $1 and ($2::text is null or meter = $2)`,
        [user, meter ?? null],
      );
      return r.rows[0] ?? { units_used: 0, paid_refunds: 0 };
    },
    async events(jobId) {
      const r = await admin.query(
        "select event, from_status, to_status, detail from public.job_events where job_id = $1 order by id",
        [jobId],
      );
      return r.rows;
    },
  };
}
