/**
 * The whole local stack for one end-to-end test file: free ports, a temp data folder, QStash
 * retries scaled down (notBefore stays real time), and tunables that keep the suite fast. Tests
 * reach the app over HTTP exactly as the page does (fetch + Bearer token); QStash deliveries are
 * made by the stand-in; no handler is called directly.
 *
 * After every test: nothing left queued or running (polled with a deadline) and no drift.
 */
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, expect, inject } from "vitest";
import { ANY_FREE_PORTS } from "../../dev/ports.ts";
import { DEV_TOKEN } from "../../dev/qstash/index.ts";
import { type Stack, type StackOptions, startStack } from "../../dev/stack.ts";

/** Tunables for the e2e suite (lib/config.ts names). Each file may override some. */
export const E2E_ENV: Record<string, string> = {
  QSTASH_RETRIES: "1",
  PROVIDER_QUOTA_MAX_HITS: "3",
  PROVIDER_BACKOFF_SECONDS: "1",
  WORKER_MAX_DURATION_SECONDS: "10",
  MODEL_TIMEOUT_MS: "8000",
  JOB_LEASE_SECONDS: "12",
  SWEEP_UNDELIVERED_AFTER_SECONDS: "60",
  SWEEP_LEASE_GRACE_SECONDS: "0",
  RATE_LIMIT_REQUESTS: "100",
  // Flow control stays on (every delivery passes the stand-in's key) with limits no other test
  // reaches; test/e2e/flow-control.test.ts sets binding ones.
  QSTASH_FLOW_PARALLELISM: "50",
  QSTASH_FLOW_RATE: "1000",
  QSTASH_FLOW_PERIOD_SECONDS: "1",
};

export interface StackFixture {
  /** The running stack (after beforeAll). */
  readonly stack: Stack;
  /** Every log line of the stack so far (app JSON lines, [qstash] lines, [alert] lines). */
  readonly logs: string[];
}

/**
 * Starts a stack for this file. `waitIdle: false` skips waiting for QStash to drain after each
 * test (for files that leave slow failure-callback retries behind on purpose).
 */
export function useStack(
  options: Pick<StackOptions, "timeScale" | "shape" | "traces"> & {
    env?: Record<string, string>;
    waitIdle?: boolean;
  } = {},
): StackFixture {
  let stack: Stack | undefined;
  let dataDir = "";
  const logs: string[] = [];
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-e2e-"));
    await copyCluster(join(dataDir, "postgres"));
    stack = await startStack({
      ports: ANY_FREE_PORTS,
      dataDir,
      // The copied cluster is this file's: nothing to reset, its migrations already applied.
      reset: false,
      timeScale: options.timeScale ?? 0.01,
      ...(options.shape ? { shape: options.shape } : {}),
      ...(options.traces ? { traces: true } : {}),
      env: { ...E2E_ENV, ...options.env },
      log: (line) => {
        logs.push(line);
      },
    });
  }, 60_000);

  afterEach(async (ctx) => {
    if (!stack) return;
    if (options.waitIdle !== false) await stack.qstash.waitIdle(20_000).catch(() => undefined);
    try {
      await expectAllSettled(stack);
    } finally {
      if (ctx.task.result?.state === "fail") {
        process.stderr.write(`--- last stack log lines (${ctx.task.name}) ---\n`);
        process.stderr.write(`${logs.slice(-60).join("\n")}\n`);
      }
    }
  }, 40_000);

  afterAll(async () => {
    await stack?.stop();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  }, 30_000);

  return {
    get stack() {
      if (!stack) throw new Error("the stack is not started yet (use it inside a test)");
      return stack;
    },
    logs,
  };
}

/**
 * A copy of the migrated cluster the global setup made (the folder the stack's PostgreSQL
 * uses): `cp -a` keeps the postgres user as its owner and its 0700 mode.
 */
async function copyCluster(to: string): Promise<void> {
  await promisify(execFile)("cp", ["-a", inject("clusterTemplate"), to]);
}

/** Polls `read` until `done(value)` holds; fails with the last value after the deadline. */
export async function until<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  { timeoutMs = 20_000, intervalMs = 50, what = "condition" } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline)
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}: ${JSON.stringify(value)}`,
      );
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

const TERMINAL = new Set(["succeeded", "failed", "canceled"]);
export const isTerminal = (status: string): boolean => TERMINAL.has(status);

/** No drift and nothing stuck (docs/DESIGN.md#invariants) at the end of a test: nothing active (after a deadline), no drift. */
export async function expectAllSettled(stack: Stack, timeoutMs = 20_000): Promise<void> {
  await until(
    async () =>
      (
        await stack.sql.query<{ id: string; status: string }>(
          "select id, status from public.generation_jobs where status in ('queued', 'running')",
        )
      ).rows,
    (rows) => rows.length === 0,
    { timeoutMs, intervalMs: 100, what: "every job to reach a terminal state" },
  );
  const drift = await stack.sql.query("select * from public.quota_drift");
  expect(drift.rows).toEqual([]);
}

// biome-ignore lint/suspicious/noExplicitAny: JSON bodies as the API returns them
export type Json = any;
export interface Reply {
  status: number;
  headers: Headers;
  body: Json;
}

/** The frontend's view of the API: fetch with the user's Bearer token. */
export function apiAs(stack: Stack, accessToken: string) {
  const call = async (method: string, path: string, body?: unknown): Promise<Reply> => {
    const res = await fetch(`${stack.urls.app}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${accessToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    let parsed: Json = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    return { status: res.status, headers: res.headers, body: parsed };
  };
  const api = {
    call,
    enqueue: (prompt: string) => call("POST", "/api/jobs", { prompt }),
    job: (id: string) => call("GET", `/api/jobs/${id}`),
    cancel: (id: string) => call("DELETE", `/api/jobs/${id}`),
    usage: () => call("GET", "/api/usage"),
    list: () => call("GET", "/api/jobs"),
    /** Polls GET /api/jobs/:id until `done(job)`. */
    waitFor: (id: string, done: (job: Json) => boolean, what: string, timeoutMs = 20_000) =>
      until(
        async () => (await api.job(id)).body.job as Json,
        (job) => job !== undefined && done(job),
        { timeoutMs, what: `job ${id}: ${what}` },
      ),
    /** Polls until the job runs (a worker claimed it). */
    waitRunning: (id: string, timeoutMs = 20_000) =>
      api.waitFor(id, (job) => job.status === "running", "running", timeoutMs),
    /** Polls until the job is succeeded, failed or canceled. */
    waitTerminal: (id: string, timeoutMs = 20_000) =>
      api.waitFor(id, (job) => isTerminal(job.status), "a terminal state", timeoutMs),
  };
  return api;
}

/** A signed-in user of the stack (pro unless asked) and their API client. */
export async function newUser(stack: Stack, plan: "free" | "pro" | "team" = "pro") {
  const session = await stack.signIn({ plan });
  return { ...session, api: apiAs(stack, session.accessToken) };
}

/**
 * A fresh user (pro unless asked) enqueues `prompt`: the stack, their API client, the enqueue's
 * reply and the job's id; `modelCalls()`, the model calls the stack has made since (this job's,
 * as long as the test runs one job at a time); the job's `events()` and `refundEvents()`; and
 * `redeliver()`, its worker message delivered once more (QStash is at-least-once).
 */
export async function newUserJob(
  fixture: StackFixture,
  prompt: string,
  plan: "free" | "pro" | "team" = "pro",
) {
  const { stack } = fixture;
  const user = await newUser(stack, plan);
  const before = stack.model.calls();
  const created = await user.api.enqueue(prompt);
  const id: string = created.body.job.id;
  return {
    ...user,
    stack,
    created,
    id,
    modelCalls: () => stack.model.calls() - before,
    events: () => events(stack, id),
    refundEvents: () => refundEvents(stack, id),
    redeliver: () => publishThroughQStash(stack, "/api/worker", { jobId: id }),
  };
}

/** Refund-bearing transitions of a job (ended failed or canceled): 0 or 1, never more. */
export async function refundEvents(stack: Stack, jobId: string): Promise<number> {
  const { rows } = await stack.sql.query<{ n: number }>(
    "select count(*)::int as n from public.job_events where job_id = $1 and to_status in ('failed', 'canceled') and from_status is distinct from to_status",
    [jobId],
  );
  return rows[0]?.n ?? 0;
}

/** The job's event names in order (started, requeued, completed, canceled, ...). */
export async function events(stack: Stack, jobId: string): Promise<string[]> {
  const { rows } = await stack.sql.query<{ event: string }>(
    "select event from public.job_events where job_id = $1 order by id",
    [jobId],
  );
  return rows.map((r) => r.event);
}

/** Alerts the receiver got that mention `text` (a job id), optionally of one kind. */
export function alertsAbout(stack: Stack, text: string, kind?: string): unknown[] {
  return stack.alerts
    .received()
    .filter((a) => JSON.stringify(a).includes(text))
    .filter(
      (a) => kind === undefined || String((a as { text?: string }).text).startsWith(`[${kind}]`),
    );
}

/** Publishes a message through the QStash stand-in, as QStash would deliver it (signed). */
export async function publishThroughQStash(
  stack: Stack,
  path: string,
  body: unknown,
): Promise<{ messageId: string }> {
  const res = await fetch(`${stack.urls.qstash}/v2/publish/${stack.env.APP_URL}${path}`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${DEV_TOKEN}`,
      "content-type": "application/json",
      "Upstash-Retries": "0",
    },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { messageId: string };
}
