/**
 * The progress write test/db files repeated as a step: record_progress from offset 0, as a
 * streaming worker's first write of an attempt, asserting it was recorded so a broken setup
 * fails where it is.
 *
 * @example
 * const progressed = progressWriter(db.svc, T0);
 * await progressed(job.id, { tokens: 30 });
 */
import type pg from "pg";
import { expect } from "vitest";
import { type Json, rpc } from "./db.ts";

export interface ProgressOptions {
  /** Completion tokens counted so far. */
  tokens: number;
  /** @default "so far" */
  text?: string;
  /** @default 1 */
  attempt?: number;
  /** The worker's count of the prompt (`p_prompt_tokens`); none when unset, as an older worker. */
  promptTokens?: number;
  /** @default the writer's clock */
  now?: Date;
}

/** A progress step on `svc`, at `clock` unless a write names its own time (else the real now). */
export function progressWriter(svc: pg.Pool, clock?: Date) {
  return async (jobId: string, o: ProgressOptions): Promise<Json> => {
    const r = await rpc(svc, "record_progress", {
      p_job_id: jobId,
      p_attempt: o.attempt ?? 1,
      p_offset: 0,
      p_text: o.text ?? "so far",
      p_completion_tokens: o.tokens,
      ...(o.promptTokens === undefined ? {} : { p_prompt_tokens: o.promptTokens }),
      p_now: o.now ?? clock ?? new Date(),
    });
    expect(r.outcome).toBe("recorded");
    return r;
  };
}
