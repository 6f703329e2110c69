/**
 * The QStash message that stands for a job: `{"jobId": "<uuid>", "seq": n}`, `seq` being the
 * job's `publish_seq` when it was published. Built, read and named (its deduplication id) here
 * only: the publishers (enqueue, the worker's requeue and not-ready paths, the sweeper's
 * republish) encode it, the worker route and the failure callback decode it.
 */
import * as z from "zod";
import { HttpError } from "./errors.ts";
import { isUuid } from "./validate.ts";

/** What travels in a worker delivery's body (and, base64, in its failure callback's `sourceBody`). */
export type JobMessage = { jobId: string; seq: number };

/** A job as far as its message is concerned. */
type Stands = { id: string; publish_seq: number };

/** The QStash deduplication id of the message that currently stands for a job. */
export const dedupId = (job: Stands): string => `job-${job.id}-${job.publish_seq}`;

/**
 * The deduplication id of a message one delivery attempt publishes for its job (the worker's
 * not-ready path): the job's current id plus the attempt's own, so a retry or a replay of the
 * same signed request publishes once while a first publish under `dedupId(job)` does not drop it.
 * Only word characters and "-" (QStash refuses ":" and whitespace in an id).
 */
export const deliveryDedupId = (job: Stands, deliveryId: string | null): string =>
  `${dedupId(job)}-after-${(deliveryId ?? "unknown").replace(/[^\w-]/g, "_")}`;

/** The message that stands for a job now: its id, its `publish_seq` and the dedup id of both. */
export const messageOf = (job: Stands): JobMessage & { dedupId: string } => ({
  jobId: job.id,
  seq: job.publish_seq,
  dedupId: dedupId(job),
});

/** The body a publisher sends: exactly the two fields, nothing a caller added. */
export const encodeMessage = (m: JobMessage): JobMessage => ({ jobId: m.jobId, seq: m.seq });

/** `publish_seq` is a positive Postgres integer. */
const MAX_SEQ = 2_147_483_647;
const jobId = z.string().refine(isUuid);
const delivery = z.object({ jobId });
const source = z.object({ jobId, seq: z.number().int().min(1).max(MAX_SEQ).optional() });

/**
 * The job id of a worker delivery's raw body. Only the id is read: every message of a job is a
 * wake-up and start_job's guards decide, so a `seq` is not looked at here (it is the failure
 * callback's). Not JSON, or no UUID `jobId` → `HttpError` 400 `invalid_body`.
 */
export function decodeDelivery(raw: string): string {
  const parsed = delivery.safeParse(parseJson(raw));
  if (!parsed.success)
    throw new HttpError(400, "invalid_body", 'The delivery body must be {"jobId": "<uuid>"}.');
  return parsed.data.jobId;
}

/**
 * The message a failure callback's `sourceBody` (base64 of the published JSON) carries: the job
 * id lower-cased, and `seq`, null for a message published before messages carried it. A `seq`
 * present but not an integer in 1..2^31-1 is refused like a missing id: `null` (the caller says
 * how it refuses; see decodeFailureCallback in lib/queue.ts for why neither guess is safe).
 */
export function decodeSourceBody(base64: string): { jobId: string; seq: number | null } | null {
  const parsed = source.safeParse(parseJson(Buffer.from(base64, "base64").toString("utf8")));
  if (!parsed.success) return null;
  return { jobId: parsed.data.jobId.toLowerCase(), seq: parsed.data.seq ?? null };
}

function parseJson(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return undefined;
  }
}
