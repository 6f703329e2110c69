/**
 * The ports the flows (lib/enqueue.ts, lib/worker/, lib/failure-callback.ts,
 * lib/sweeper.ts) are written against. Types only: a flow imports this, never the wiring
 * (lib/deps.ts), so it loads nothing it does not call and a test can hand it real local
 * services.
 */

import type { Alerter } from "./alerts.ts";
import type { AuthUser } from "./auth.ts";
import type { Config } from "./config.ts";
import type { Rpc } from "./db.ts";
import type { Jobs } from "./jobs.ts";
import type { Live } from "./live.ts";
import type { Model } from "./model.ts";
import type { FlowBacklog, PublishInput } from "./queue.ts";
import type { RateLimitResult } from "./rate-limit.ts";

export interface RateLimiter {
  check(userId: string): Promise<RateLimitResult>;
  forget(userId: string): Promise<void>;
}

export interface Deps {
  config: Config;
  jobs: Jobs;
  /**
   * The database, for the calls no other port owns (the operator page's reads, the history's
   * upkeep): the one client `jobs` is made on. Only lib/deps.ts makes it.
   */
  rpc: Rpc;
  queue: {
    publishJob(input: PublishInput): Promise<{ messageId: string; deduplicated: boolean }>;
    /** QStash's waitlist for the worker's Flow Control key (the sweeper reads it); absent: none. */
    flowBacklog?(): Promise<FlowBacklog | null>;
  };
  auth: { userFromRequest(req: Request): Promise<AuthUser> };
  /** `forget`: the erasure deletes the user's keys (throws when Redis does). */
  rateLimiter: RateLimiter;
  /** GET /api/me/export's own limit: an export reads the user's whole history. */
  exportLimiter: RateLimiter;
  gate: { resumeAt(now?: Date): Promise<Date | null>; holdUntil(at: Date): Promise<void> };
  /** Pages (`send`), user-caused failures counted for the window summary (`record`, `flush`). */
  alerts: Alerter;
  redis: { ping(): Promise<unknown> };
  now(): Date;
}

/**
 * What the worker flow needs besides the edges' ports: the model. Its timing settings (lease,
 * backoff, progress interval, provider-quota bounds) are read from `config`, the one parsed
 * object, never copied next to it.
 */
export interface WorkerDeps
  extends Pick<Deps, "jobs" | "queue" | "gate" | "alerts" | "now" | "config"> {
  model: Model;
  /** Pushes to the job's watchers (lib/live.ts); none: nobody is told but the database. */
  live?: Live;
}
