/**
 * The operator page's data (GET /api/ops/metrics, public/ops.html): one window (the last hour,
 * day or week, ending now) cut into buckets, every series read by one SQL call
 * (`public.ops_metrics`, supabase/migrations/20261204020000_ops_metrics.sql) and reshaped
 * here into parallel arrays, one value per bucket, as the charts draw them.
 */
import type { AuthUser } from "./auth.ts";
import type { Config } from "./config.ts";
import type { Rpc } from "./db.ts";
import { HttpError } from "./errors.ts";

/** The windows the page offers, and the bucket each is cut into (60, 96 and 84 points). */
export const WINDOWS = {
  hour: { seconds: 3600, bucketSeconds: 60 },
  day: { seconds: 86_400, bucketSeconds: 900 },
  week: { seconds: 604_800, bucketSeconds: 7200 },
} as const;
export type WindowName = keyof typeof WINDOWS;

/** `?window=` → a window name; anything else is 400 `invalid_query`. @default "day" */
export function parseWindow(url: URL): WindowName {
  const asked = url.searchParams.get("window") ?? "day";
  if (!Object.hasOwn(WINDOWS, asked))
    throw new HttpError(400, "invalid_query", "window must be one of hour, day, week.");
  return asked as WindowName;
}

/** 403 `forbidden` unless the caller's token carries the operator role. */
export function requireOperator(user: AuthUser): void {
  if (!user.operator)
    throw new HttpError(
      403,
      "forbidden",
      "This page is for operators. Ask an administrator to grant your account the operator role.",
    );
}

/** The window's span: buckets aligned to whole buckets (UTC), the last one holding `now`. */
export function windowSpan(
  name: WindowName,
  now: Date,
): { from: Date; to: Date; bucketSeconds: number } {
  const { seconds, bucketSeconds } = WINDOWS[name];
  const ms = bucketSeconds * 1000;
  const end = Math.floor(now.getTime() / ms) * ms + ms;
  return { from: new Date(end - seconds * 1000), to: now, bucketSeconds };
}

type Row = Record<string, unknown> & { bucket: string };
type Latency = {
  jobs: number[];
  p50: Array<number | null>;
  p90: Array<number | null>;
  p99: Array<number | null>;
};

/** What the page draws. Every array has one entry per `buckets` entry. */
export type OpsMetrics = {
  window: WindowName;
  /** `RUNBOOK_URL`: the page links each chart's section under it; null: it names the section. */
  runbookUrl: string | null;
  from: string;
  to: string;
  bucketSeconds: number;
  /** Bucket starts, epoch seconds (uPlot's x values). */
  buckets: number[];
  series: Record<string, number[]>;
  failuresByReason: Record<string, number[]>;
  latency: { queueLatency: Latency; runTime: Latency };
  now: {
    at: string;
    stuck: {
      running_lease_expired: number;
      active_past_max_age: number;
      queued_never_delivered: number;
    };
    /** quota_drift rows in the quota periods that can still change (see driftSince). */
    driftRows: number;
    /** Start of the oldest period counted: the UTC month of now or of the oldest active job. */
    driftSince: string;
  };
  /**
   * Each plan's model and its worst-case provider bill per period from the price book
   * (public.plan_worst_case), with the model's shutdown date as the catalogue watch last read it.
   */
  plans: {
    plan: string;
    meter: string;
    model: string | null;
    serviceTier: string;
    worstCaseMicroUsd: number | null;
    shutdownDate: string | null;
    catalogueCheckedAt: string | null;
  }[];
};

const SERIES: Record<string, [part: "jobs" | "provider", column: string]> = {
  enqueued: ["jobs", "enqueued"],
  succeeded: ["jobs", "succeeded"],
  failed: ["jobs", "failed"],
  canceled: ["jobs", "canceled"],
  refunded: ["jobs", "refunded"],
  withheld: ["jobs", "withheld"],
  tokensHeld: ["jobs", "tokens_held"],
  tokensCaptured: ["jobs", "tokens_captured"],
  failureCallbacks: ["jobs", "failure_callbacks"],
  supersededCallbacks: ["jobs", "superseded_callbacks"],
  providerTokens: ["provider", "provider_tokens"],
  provider429s: ["provider", "quota_429s"],
  gateClosedSeconds: ["provider", "gate_closed_seconds"],
};

/**
 * Reads the window's metrics with one `ops_metrics` call (service role), the stale-job rules
 * taken from the sweeper's own settings.
 *
 * @example
 * const metrics = await readOpsMetrics(rpc, config, "hour", new Date());
 */
export async function readOpsMetrics(
  rpc: Rpc,
  config: Pick<
    Config,
    | "sweepLeaseGraceSeconds"
    | "sweepUndeliveredAfterSeconds"
    | "jobMaxAgeSeconds"
    | "runbookUrl"
    | "openaiModel"
    | "qstashRetries"
  >,
  window: WindowName,
  now: Date,
): Promise<OpsMetrics> {
  const span = windowSpan(window, now);
  // The price book's figures, read beside the charts (one round trip, at once).
  const plansRead = rpc("ops_plans", {
    p_default_model: config.openaiModel,
    p_attempts: config.qstashRetries + 1,
  }) as Promise<{
    plans: Array<{
      plan: string;
      meter: string;
      model: string | null;
      service_tier: string;
      worst_case_micro_usd: number | null;
      shutdown_date: string | null;
      checked_at: string | null;
    }>;
  }>;
  // Awaited below; a failure of the charts' call must not leave this one unhandled.
  plansRead.catch(() => undefined);
  const r = (await rpc("ops_metrics", {
    p_from: span.from.toISOString(),
    p_to: span.to.toISOString(),
    p_bucket: `${span.bucketSeconds} seconds`,
    p_now: now.toISOString(),
    p_lease_grace_seconds: config.sweepLeaseGraceSeconds,
    p_undelivered_after_seconds: config.sweepUndeliveredAfterSeconds,
    p_max_age_seconds: config.jobMaxAgeSeconds,
  })) as {
    jobs: Row[];
    provider: Row[];
    failure_reasons: Array<{ bucket: string; reason: string; jobs: number }>;
    latency: Array<{
      bucket: string;
      metric: string;
      jobs: number;
      p50: number;
      p90: number;
      p99: number;
    }>;
    now: {
      at: string;
      stuck: OpsMetrics["now"]["stuck"];
      drift_rows: number;
      drift_since: string;
    };
  };
  const epoch = (iso: string) => Math.round(Date.parse(iso) / 1000);
  const buckets = r.jobs.map((row) => epoch(row.bucket));
  const index = new Map(buckets.map((b, i) => [b, i]));
  const series: Record<string, number[]> = {};
  for (const [name, [part, column]] of Object.entries(SERIES))
    series[name] = r[part].map((row) => Number(row[column] ?? 0));
  const failuresByReason: Record<string, number[]> = {};
  for (const f of r.failure_reasons) {
    const i = index.get(epoch(f.bucket));
    if (i === undefined) continue;
    failuresByReason[f.reason] ??= buckets.map(() => 0);
    (failuresByReason[f.reason] as number[])[i] = Number(f.jobs);
  }
  const emptyLatency = (): Latency => ({
    jobs: buckets.map(() => 0),
    p50: buckets.map(() => null),
    p90: buckets.map(() => null),
    p99: buckets.map(() => null),
  });
  const latency = { queueLatency: emptyLatency(), runTime: emptyLatency() };
  for (const l of r.latency) {
    const i = index.get(epoch(l.bucket));
    const into = l.metric === "queue_latency" ? latency.queueLatency : latency.runTime;
    if (i === undefined) continue;
    into.jobs[i] = Number(l.jobs);
    into.p50[i] = l.p50;
    into.p90[i] = l.p90;
    into.p99[i] = l.p99;
  }
  const plans = (await plansRead).plans.map((p) => ({
    plan: p.plan,
    meter: p.meter,
    model: p.model,
    serviceTier: p.service_tier,
    worstCaseMicroUsd: p.worst_case_micro_usd === null ? null : Number(p.worst_case_micro_usd),
    shutdownDate: p.shutdown_date,
    catalogueCheckedAt: p.checked_at,
  }));
  return {
    window,
    runbookUrl: config.runbookUrl ?? null,
    from: span.from.toISOString(),
    to: span.to.toISOString(),
    bucketSeconds: span.bucketSeconds,
    buckets,
    series,
    failuresByReason,
    latency,
    now: {
      at: r.now.at,
      stuck: r.now.stuck,
      driftRows: Number(r.now.drift_rows),
      driftSince: new Date(r.now.drift_since).toISOString(),
    },
    plans,
  };
}
