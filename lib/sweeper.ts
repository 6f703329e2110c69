/**
 * The sweeper: ends what nobody else will (docs/DESIGN.md#sweeper). Batches of `sweep_jobs` (rows claimed
 * with skip locked, so two sweepers at once share the work), republishes queued jobs whose
 * message was lost, and pages on-call with a summary when it had to end jobs.
 */
import { createHash } from "node:crypto";
import { log } from "./log.ts";
import { messageOf } from "./message.ts";
import type { Deps } from "./ports.ts";
import type { FlowBacklog } from "./queue.ts";
import { annotateSpan, inJobTrace, traced } from "./trace.ts";

export interface SweepReport {
  batches: number;
  failed: Record<string, number>;
  republished: number;
  republishFailed: number;
  more: boolean;
}

export async function sweepStaleJobs(
  deps: Pick<Deps, "jobs" | "queue" | "alerts" | "config" | "now">,
  options: { maxBatches?: number; deadlineMs?: number } = {},
): Promise<SweepReport> {
  const c = deps.config;
  const deadline = Date.now() + (options.deadlineMs ?? 20_000);
  const report: SweepReport = {
    batches: 0,
    failed: {},
    republished: 0,
    republishFailed: 0,
    more: false,
  };
  const failedJobs: string[] = [];
  const undeliveredAfterSeconds = await undeliveredAfter(deps);
  for (;;) {
    const r = await traced("db sweep_jobs", { "db.system.name": "postgresql" }, () =>
      deps.jobs.sweep({
        batchSize: c.sweepBatchSize,
        leaseGraceSeconds: c.sweepLeaseGraceSeconds,
        undeliveredAfterSeconds,
        maxAgeSeconds: c.jobMaxAgeSeconds,
      }),
    );
    annotateSpan({ "sweep.failed": r.failed.length, "sweep.republish": r.republish.length });
    report.batches++;
    for (const f of r.failed) {
      report.failed[f.reason] = (report.failed[f.reason] ?? 0) + 1;
      failedJobs.push(f.id);
      log.warn("job_swept", { jobId: f.id, reason: f.reason, fromStatus: f.from_status });
    }
    for (const job of r.republish) {
      try {
        // In the job's trace, linked to this tick: the delivery it causes nests under it.
        await inJobTrace(
          job.id,
          "sweeper republish",
          { "job.publish_seq": job.publish_seq, "job.republish_count": job.republish_count },
          () => deps.queue.publishJob(messageOf(job)),
        );
        report.republished++;
      } catch (error) {
        // Left queued: the next sweep fails it (republished once already) and refunds it.
        report.republishFailed++;
        log.error("republish_failed", { jobId: job.id, error });
      }
    }
    report.more = r.more;
    if (!r.more || report.batches >= (options.maxBatches ?? 1000) || Date.now() > deadline) break;
  }
  // The cron tick is what closes a quiet window of user-caused failures: its summary goes now.
  await deps.alerts.flush();
  const total = failedJobs.length;
  if (total > 0 || report.republished > 0 || report.republishFailed > 0) {
    await deps.alerts.send({
      kind: "stuck_jobs",
      // One page per distinct finding: a second sweep in the same minute that ended other jobs
      // still pages (the per-kind throttle bounds an incident), the same finding twice does not.
      dedupKey: `sweep:${createHash("sha256")
        .update([...failedJobs].sort().join(","))
        .update(`|${report.republished}|${report.republishFailed}`)
        .digest("hex")
        .slice(0, 16)}`,
      title: `Sweeper ended ${total} stuck job(s) with refunds, republished ${report.republished}`,
      fields: {
        ...Object.fromEntries(Object.entries(report.failed)),
        republished: report.republished,
        republishFailed: report.republishFailed,
        examples: failedJobs.slice(0, 5).join(", ") || null,
      },
    });
  }
  return report;
}

/**
 * How long a queued job may go undelivered before it counts as lost, this tick.
 *
 * With Flow Control on, a burst waits in QStash's waitlist for the worker's key: due, accepted,
 * not lost, delivered in order as the limits allow. Read as "never delivered", it would be
 * republished (a second message at the end of the same waitlist) and, still waiting one window
 * later, failed `never_delivered`: a job lost to the sweeper that QStash was about to deliver.
 * So the sweeper asks QStash how long the key's waitlist is and adds the longest time it can
 * take to drain ({@link drainSeconds}) to `SWEEP_UNDELIVERED_AFTER_SECONDS`. While the key is
 * paused (on-call, docs/RUNBOOK.md) nothing is read as undelivered: only the max age ends a
 * job. Capped at the max age, which ends a job whatever held it (docs/DESIGN.md#flow-control
 * gives the bound). When QStash cannot be asked, the configured window applies (logged): a
 * republish is then at worst a duplicate message, which the job's `publish_seq` makes harmless.
 */
async function undeliveredAfter(deps: Pick<Deps, "queue" | "config">): Promise<number> {
  const c = deps.config;
  const base = c.sweepUndeliveredAfterSeconds;
  if (!deps.queue.flowBacklog) return base;
  let backlog: FlowBacklog | null;
  try {
    backlog = await deps.queue.flowBacklog();
  } catch (error) {
    log.warn("flow_backlog_unread", { error });
    return base;
  }
  if (!backlog || (backlog.waitListSize === 0 && !backlog.isPaused)) return base;
  const window = backlog.isPaused
    ? c.jobMaxAgeSeconds
    : Math.min(base + drainSeconds(backlog, c.workerMaxDurationSeconds), c.jobMaxAgeSeconds);
  log.info("flow_backlog", {
    waitListSize: backlog.waitListSize,
    paused: backlog.isPaused,
    undeliveredAfterSeconds: window,
  });
  return window;
}

/**
 * The longest a waitlist of `waitListSize` takes to drain under the key's limits as QStash
 * applies them now (a pin wins over ours): one period per `rate` messages, and one worker
 * duration (the most a delivery holds its slot) per `parallelism` messages, whichever is
 * slower, plus the current period.
 */
export function drainSeconds(backlog: FlowBacklog, workerMaxDurationSeconds: number): number {
  const w = backlog.waitListSize;
  const rate = backlog.rateMax || backlog.limits.rate;
  const period = backlog.ratePeriod || backlog.limits.period;
  const parallelism = backlog.parallelismMax || backlog.limits.parallelism;
  const byRate = Math.ceil(w / rate) * period;
  const bySlots = Math.ceil(w / parallelism) * workerMaxDurationSeconds;
  return Math.max(byRate, bySlots) + period;
}
