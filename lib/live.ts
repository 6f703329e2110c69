/**
 * What the worker pushes to a job's watchers over Supabase Realtime's REST broadcast
 * (docs/DESIGN.md#live-status): the answer as it is stored, and the job's view once the worker
 * ended it. The transitions themselves are broadcast by the database, in their own
 * transactions (`job_state`, `{job_id, state, seq}`); these are what the database does not send,
 * because they carry the user's text: a REST broadcast goes from Realtime to the joined sockets
 * and is stored nowhere, where a database broadcast is a row of `realtime.messages` (WAL, and a
 * copy of the answer that erasure would have to find).
 *
 * Both go to the private topic `job:<user id>`, which only that user may join (the read policy
 * on `realtime.messages`). Only what the database accepted is sent: a delta after its progress
 * write recorded it, a view after its transition committed. A push is a hint, never the record:
 * it is sent once, unawaited by the stream, with a short timeout, and a failure is a log line;
 * the page reads the job when it misses one (a gap in the offsets, a state message with no view).
 */
import { keyHeaders } from "./db.ts";
import { log } from "./log.ts";
import type { Job } from "./view.ts";

/** The answer grew: `text` follows the first `offset` characters (code points) of the attempt's text. */
export interface ProgressPush {
  job_id: string;
  attempt: number;
  offset: number;
  text: string;
  /** Completion tokens so far (reasoning included), as the progress write recorded them. */
  tokens: number;
  thinking: boolean;
  reasoning_tokens: number | null;
}

/**
 * A job's view as the worker knows it after a transition it made (a claim, a success):
 * `cancelRefunds` only where it knows it (not at a claim: on a job plan it depends on the
 * period's refunds).
 */
export type WorkerView = Omit<Job, "cancelRefunds"> & { cancelRefunds?: boolean };

/** A job's view, pushed; `prompt` and `input` left out (the page has them). */
export type ViewPush = { job: Omit<WorkerView, "prompt" | "input"> };

export interface Live {
  progress(userId: string, push: ProgressPush): Promise<void>;
  view(userId: string, job: WorkerView): Promise<void>;
}

export const topicOf = (userId: string): string => `job:${userId}`;

/** A push that does nothing: no Realtime configured, or a test that does not watch. */
export const noLive: Live = { progress: async () => {}, view: async () => {} };

export function createLive(options: {
  supabaseUrl: string;
  serverKey: string;
  /** @default 1500 */
  timeoutMs?: number;
  fetch?: typeof fetch;
}): Live {
  const fetchImpl = options.fetch ?? globalThis.fetch;
  const url = `${options.supabaseUrl}/realtime/v1/api/broadcast`;
  const timeoutMs = options.timeoutMs ?? 1500;

  async function send(userId: string, event: string, payload: object): Promise<void> {
    try {
      const res = await fetchImpl(url, {
        method: "POST",
        headers: { ...keyHeaders(options.serverKey), "content-type": "application/json" },
        body: JSON.stringify({
          messages: [{ topic: topicOf(userId), event, payload, private: true }],
        }),
        signal: AbortSignal.timeout(timeoutMs),
      });
      await res.body?.cancel();
      if (res.status !== 202) log.warn("live_push_refused", { event, status: res.status });
    } catch (error) {
      log.warn("live_push_failed", { event, error });
    }
  }

  return {
    progress: (userId, push) => send(userId, "job_progress", push),
    view: (userId, job) => {
      const { prompt: _prompt, input: _input, ...rest } = job;
      return send(userId, "job_view", { job: rest } satisfies ViewPush);
    },
  };
}
