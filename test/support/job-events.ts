/**
 * The job_events a job's history is expected to show, by the path it took, for the tests that
 * read a job's events in order (the database's and the stack's alike).
 */

/**
 * A job the provider refused (429) `hits` times and the worker then gave up on: each refusal
 * but the last requeues it, the last ends it.
 */
export function gaveUpAfterHits(hits: number): string[] {
  const requeues = Array.from({ length: hits - 1 }, () => ["started", "requeued"]).flat();
  return ["enqueued", ...requeues, "started", "gave_up"];
}
