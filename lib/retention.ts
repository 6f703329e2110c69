/**
 * Retention (docs/DESIGN.md#retention-and-erasure): a finished job's prompt, input, output,
 * partial output and error text are erased `RETENTION_DAYS` after it ended, in batches of
 * `retention_batch` (an index walk, oldest first, rows another run holds skipped), called by the
 * sweeper's cron tick. What accounting reads stays, so usage, `quota_drift` and reconcile are
 * unchanged by it.
 */
import { log } from "./log.ts";
import type { Deps } from "./ports.ts";

/** Jobs erased per `retention_batch` call: one short transaction each (docs/BENCHMARKS.md). */
export const RETENTION_BATCH = 1000;

export interface RetentionReport {
  /** Jobs whose text this run erased. */
  erased: number;
  batches: number;
  /** Stopped by the deadline or the batch bound with more left (the next tick goes on). */
  more: boolean;
}

/**
 * Erases the text of jobs finished more than `retentionDays` ago, batch after batch, until none
 * is left, `maxBatches` ran or the deadline passed.
 *
 * @example
 * const r = await runRetention(deps); // { erased: 1000, batches: 2, more: false }
 */
export async function runRetention(
  deps: Pick<Deps, "jobs" | "config" | "now">,
  options: { batchSize?: number; maxBatches?: number; deadlineMs?: number } = {},
): Promise<RetentionReport> {
  const batchSize = options.batchSize ?? RETENTION_BATCH;
  const before = new Date(deps.now().getTime() - deps.config.retentionDays * 86_400_000);
  const deadline = Date.now() + (options.deadlineMs ?? 20_000);
  const report: RetentionReport = { erased: 0, batches: 0, more: false };
  for (;;) {
    const n = await deps.jobs.retentionBatch(before, batchSize);
    report.batches++;
    report.erased += n;
    report.more = n >= batchSize;
    if (!report.more || report.batches >= (options.maxBatches ?? 100) || Date.now() > deadline) {
      break;
    }
  }
  if (report.erased > 0) log.info("retention_erased", { ...report, before: before.toISOString() });
  return report;
}
