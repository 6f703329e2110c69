/**
 * What the worker pushes to a job's watchers (lib/live.ts through runJob, with a recording
 * `live` port): only what the database stored, at the offsets it stored it, the claimed job's
 * view before the model is called, and the ended job's view as GET /api/jobs/<id> shows it;
 * no ended view for an attempt whose ending was refused.
 */
import { describe, expect, test } from "vitest";
import type { Live, ProgressPush, WorkerView } from "../../lib/live.ts";
import type { Generation, Model } from "../../lib/model.ts";
import type { Job } from "../../lib/view.ts";
import { runJob } from "../../lib/worker/index.ts";
import { useApi } from "../support/api.ts";

const app = useApi({ env: { PROGRESS_INTERVAL_MS: "100" } });

function recordingLive() {
  const progress: ProgressPush[] = [];
  const views: WorkerView[] = [];
  const live: Live = {
    progress: async (_user, push) => void progress.push(push),
    view: async (_user, job) => void views.push(job),
  };
  return { live, progress, views };
}

/** Streams `parts` one after another, `gapMs` apart, then answers with their whole. */
function streamingModel(parts: string[], gapMs: number, before?: () => Promise<void>): Model {
  return {
    async generate(_prompt, options): Promise<Generation> {
      let text = "";
      for (const part of parts) {
        text += part;
        options.onText?.(text);
        await new Promise((r) => setTimeout(r, gapMs));
        if (options.signal?.aborted) throw options.signal.reason;
      }
      await before?.();
      return {
        text,
        usage: { promptTokens: 5, completionTokens: parts.length, source: "provider" },
        finishReason: "stop",
      };
    },
  };
}

/** The text the pushes make, applied at their offsets (code points), as the page applies them. */
function replay(pushes: ProgressPush[]): string {
  let chars: string[] = [];
  for (const p of pushes) {
    expect(p.offset).toBeLessThanOrEqual(chars.length);
    chars = [...chars.slice(0, p.offset), ...p.text];
  }
  return chars.join("");
}

describe("the worker's pushes", () => {
  test("each delta is what the database stored; the claim's and the ended job's views are the API's", async () => {
    const { live, progress, views } = recordingLive();
    const parts = ["Hello", ", wor", "ld 🙂", " and", " more."];
    const user = await app.newUser("pro");
    const id = await app.enqueueOk(user);
    const outcome = await runJob(
      { ...app.workerDeps, model: streamingModel(parts, 120), live },
      id,
    );
    expect(outcome).toEqual({ retry: false, outcome: "completed" });
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress.every((p) => p.job_id === id && p.attempt === 1)).toBe(true);
    // what the pushes spell is a prefix of the answer the database holds
    const row = await app.jobRow(id);
    expect(row.output?.startsWith(replay(progress))).toBe(true);
    expect(replay(progress).length).toBeGreaterThan(0);
    await new Promise((r) => setTimeout(r, 50));
    expect(views).toHaveLength(2);
    const [claim, view] = views as [WorkerView, WorkerView];
    expect(view).toMatchObject({ id, status: "succeeded", output: row.output, attempts: 1 });
    const res = await app.call("job", `/api/jobs/${id}`, { headers: user.headers });
    const { job } = (await res.json()) as { job: Job };
    expect(view).toEqual(job);
    // the claim: the job as a read while it started would show it, less what it cannot know
    expect(claim).not.toHaveProperty("cancelRefunds");
    expect(claim).toEqual({
      ...job,
      status: "running",
      phase: "running",
      finishedAt: null,
      output: null,
      captured: null,
      cancelRefunds: undefined,
    });
  });

  test("canceled while it streams: only the claim's view is pushed, and the deltas spell what the database kept", async () => {
    const { live, progress, views } = recordingLive();
    const user = await app.newUser("pro");
    const id = await app.enqueueOk(user);
    const cancel = () =>
      app.call("job", `/api/jobs/${id}`, { method: "DELETE", headers: user.headers });
    const parts = ["one", " two", " three", " four", " five", " six"];
    const model = streamingModel(parts, 120);
    const run = runJob({ ...app.workerDeps, model, live }, id);
    const deadline = Date.now() + 10_000;
    while (progress.length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 20));
    await cancel();
    expect((await run).outcome).not.toBe("completed");
    expect((await app.jobRow(id)).status).toBe("canceled");
    expect(views.map((v) => v.status)).toEqual(["running"]);
    // a canceled job keeps its streamed text: exactly what the pushes spelled, nothing more
    const { rows } = await app.admin.query<{ text: string }>(
      `select coalesce(string_agg(text, '' order by end_char), '') as text
         from public.job_output_chunks where job_id = $1`,
      [id],
    );
    expect(replay(progress)).toBe(rows[0]?.text);
  });
});
