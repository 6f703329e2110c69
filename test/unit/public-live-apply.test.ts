/**
 * What a push of the live channel does to the card's job (public/live-apply.js): a delta applies
 * at its offset and only there, a gap or an unseen attempt asks for one read, a state message is
 * news once, and nothing follows an ending.
 */
import { describe, expect, test } from "vitest";
import type { Job } from "../../lib/view.ts";
import { progressApplied, stateNews, viewApplied } from "../../public/live-apply.js";
import { viewJob } from "../support/page-fixtures.ts";

const running = (over: Partial<Job> = {}): Job =>
  viewJob({
    id: "j",
    kind: "document",
    input: { prompt: "p" },
    status: "running",
    phase: "running",
    attempts: 1,
    partialOutput: "Hello",
    partialTokens: 2,
    ...over,
  });

const delta = (over: Record<string, unknown> = {}) => ({
  job_id: "j",
  attempt: 1,
  offset: 5,
  text: ", world",
  tokens: 4,
  thinking: false,
  reasoning_tokens: null,
  ...over,
});

describe("job_progress", () => {
  test("appends at its offset; what overlaps the card's text is not shown twice", () => {
    expect(progressApplied(running(), delta())).toMatchObject({
      partialOutput: "Hello, world",
      partialTokens: 4,
      thinking: false,
    });
    // the same delta again, or one starting inside what the card has (a retried write)
    expect(progressApplied(running({ partialOutput: "Hello, world" }), delta())).toMatchObject({
      partialOutput: "Hello, world",
    });
    expect(progressApplied(running(), delta({ offset: 3, text: "lo, there" }))).toMatchObject({
      partialOutput: "Hello, there",
    });
  });

  test("offsets count code points, as Postgres stores them", () => {
    const job = running({ partialOutput: "🙂🙂" });
    expect(progressApplied(job, delta({ offset: 2, text: "!" }))).toMatchObject({
      partialOutput: "🙂🙂!",
    });
    expect(progressApplied(job, delta({ offset: 1, text: "🙂?" }))).toMatchObject({
      partialOutput: "🙂🙂?",
    });
  });

  test("a gap (a missed delta) or a newer attempt asks for one read", () => {
    expect(progressApplied(running(), delta({ offset: 9 }))).toBe("read");
    expect(progressApplied(running(), delta({ offset: -1 }))).toBe("read");
    expect(progressApplied(running(), delta({ attempt: 2, offset: 0 }))).toBe("read");
    expect(
      progressApplied(running({ status: "queued", phase: "queued" }), delta({ attempt: 2 })),
    ).toBe("read");
  });

  test("an older attempt's, or an ended job's, changes nothing", () => {
    expect(progressApplied(running({ attempts: 2 }), delta())).toBeNull();
    expect(progressApplied(running({ status: "canceled", phase: "canceled" }), delta())).toBeNull();
  });

  test("thinking while no text streamed; tokens never go back", () => {
    const job = running({ partialOutput: null, partialTokens: 10 });
    expect(
      progressApplied(
        job,
        delta({ offset: 0, text: "", tokens: 7, thinking: true, reasoning_tokens: 7 }),
      ),
    ).toMatchObject({ partialOutput: null, partialTokens: 10, thinking: true, reasoningTokens: 7 });
  });
});

describe("job_state", () => {
  test("news once, by seq; a read only for a state the card does not show", () => {
    expect(stateNews(running(), -1, { state: "succeeded", seq: 5 })).toEqual({
      seq: 5,
      read: true,
    });
    expect(stateNews(running(), 5, { state: "succeeded", seq: 5 })).toBeNull();
    expect(stateNews(running(), 6, { state: "succeeded", seq: 5 })).toBeNull();
    expect(stateNews(running(), 1, { state: "running", seq: 2 })).toEqual({ seq: 2, read: false });
    expect(
      stateNews(running({ status: "succeeded", phase: "succeeded" }), 1, {
        state: "queued",
        seq: 3,
      }),
    ).toEqual({ seq: 3, read: false });
  });
});

describe("job_view", () => {
  test("an ended job's view is shown with the card's prompt and input; nothing follows an ending", () => {
    const ended = viewApplied(running(), {
      id: "j",
      status: "succeeded",
      phase: "succeeded",
      output: "Hello, world.",
      partialOutput: null,
    });
    expect(ended).toMatchObject({
      status: "succeeded",
      output: "Hello, world.",
      prompt: "a prompt",
    });
    expect(
      viewApplied(running({ status: "canceled", phase: "canceled" }), {
        id: "j",
        status: "succeeded",
      }),
    ).toBeNull();
    expect(viewApplied(running(), { id: "j", status: "running", phase: "running" })).toBeNull();
    expect(viewApplied(running(), { id: "other", status: "succeeded" })).toBeNull();
  });
});

describe("job_view of a claim", () => {
  const queued = () =>
    running({
      status: "queued",
      phase: "queued",
      attempts: 0,
      startedAt: null,
      partialOutput: null,
    });
  const claim = { id: "j", status: "running", phase: "running", attempts: 1 } as const;

  test("a queued card shows the claim; the same attempt again, or an older one, does not", () => {
    expect(viewApplied(queued(), claim)).toMatchObject({ status: "running", attempts: 1 });
    expect(viewApplied(running({ attempts: 1, partialOutput: "Hel" }), claim)).toBeNull();
    expect(viewApplied(queued(), { ...claim, attempts: 0 })).toBeNull();
  });

  test("a claim heard after a later state is not shown: the database's state came first", () => {
    expect(viewApplied(queued(), claim, "running")).toMatchObject({ status: "running" });
    expect(viewApplied(queued(), claim, "queued")).toBeNull();
    expect(viewApplied(queued(), claim, "canceled")).toBeNull();
  });
});
