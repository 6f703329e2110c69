/**
 * The client's `watch` with a push source (public/client.js), as the page uses it with the live
 * channel: no read while the source is quiet, one read each time it says a push was missed,
 * polling as soon as it is no longer quiet, and the caller's own `from` never yielded again.
 * The HTTP side is a `fetch` answering GET /api/jobs/j from a script.
 */
import { describe, expect, test } from "vitest";
import type { Job } from "../../lib/view.ts";
import { createClient, type WatchSource } from "../../public/client.js";

const job = (over: Partial<Job>): Job =>
  ({
    id: "j",
    status: "queued",
    phase: "queued",
    attempts: 0,
    partialOutput: null,
    partialTokens: 0,
    thinking: false,
    resumeAt: null,
    output: null,
    ...over,
  }) as Job;

/** A client whose every GET answers the current `served` job, counted. */
function scripted(first: Job) {
  const state = { served: first, gets: 0 };
  const client = createClient({
    token: async () => "t",
    fetch: async () => {
      state.gets++;
      return new Response(JSON.stringify({ job: state.served }), {
        headers: { "content-type": "application/json" },
      });
    },
  });
  return { client, state };
}

/** A source the test drives: `quiet` as set, `state` and `stale` call the watch's handlers. */
function drivenSource() {
  let handlers: { onState: (j: Job) => void; onStale: () => void } | null = null;
  const flags = { quiet: true };
  const s = {
    get quiet() {
      return flags.quiet;
    },
    set quiet(on: boolean) {
      flags.quiet = on;
    },
    source: {
      quiet: () => flags.quiet,
      subscribe(_id, onState, onStale = () => {}) {
        handlers = { onState, onStale };
        return () => {
          handlers = null;
        };
      },
    } satisfies WatchSource,
    state: (j: Job) => handlers?.onState(j),
    stale: () => handlers?.onStale(),
    subscribed: () => handlers !== null,
  };
  return s;
}

const tick = (ms = 30) => new Promise((r) => setTimeout(r, ms));

/** Runs a watch in the background, collecting what it yields. */
function collect(iterable: AsyncIterable<Job>) {
  const seen: Job[] = [];
  const done = (async () => {
    for await (const j of iterable) seen.push(j);
  })();
  return { seen, done };
}

describe("watch with a push source", () => {
  test("quiet: pushes only, no read; a stale hint is one read; the ending's push ends it", async () => {
    const queued = job({});
    const { client, state } = scripted(queued);
    const live = drivenSource();
    const w = collect(client.watch("j", { source: live.source, from: queued, delay: () => 5 }));
    await tick(100);
    expect(state.gets).toBe(0);
    expect(w.seen).toEqual([]);

    live.state(job({ status: "running", phase: "running", attempts: 1 }));
    live.state(job({ status: "running", phase: "running", attempts: 1, partialOutput: "Hi" }));
    await tick();
    expect(w.seen.at(-1)?.partialOutput).toBe("Hi");
    expect(state.gets).toBe(0);

    state.served = job({ status: "running", phase: "running", attempts: 1, partialOutput: "Hi!" });
    live.stale();
    live.stale();
    await tick(100);
    expect(state.gets).toBe(1);
    expect(w.seen.at(-1)?.partialOutput).toBe("Hi!");

    live.state(job({ status: "succeeded", phase: "succeeded", attempts: 1, output: "Hi!" }));
    await w.done;
    expect(w.seen.at(-1)?.status).toBe("succeeded");
    expect(live.subscribed()).toBe(false);
    expect(state.gets).toBe(1);
  });

  test("no longer quiet: the hint reads at once and polling carries on until the end", async () => {
    const running = job({ status: "running", phase: "running", attempts: 1 });
    const { client, state } = scripted(running);
    const live = drivenSource();
    const w = collect(client.watch("j", { source: live.source, from: running, delay: () => 10 }));
    await tick(60);
    expect(state.gets).toBe(0);

    live.quiet = false;
    live.stale();
    await tick(100);
    expect(state.gets).toBeGreaterThanOrEqual(3);
    // the same job read again and again is not yielded: `from` was already shown
    expect(w.seen).toEqual([]);

    state.served = job({ status: "failed", phase: "failed", attempts: 1 });
    await w.done;
    expect(w.seen.map((j) => j.status)).toEqual(["failed"]);
  });

  test("without a source or `from`, the first look is at once and each change is yielded", async () => {
    const { client, state } = scripted(job({}));
    const w = collect(client.watch("j", { delay: () => 10 }));
    await tick(5);
    expect(state.gets).toBe(1);
    state.served = job({ status: "running", phase: "running", attempts: 1, partialTokens: 3 });
    await tick(40);
    state.served = job({ status: "running", phase: "running", attempts: 1, partialTokens: 9 });
    await tick(40);
    state.served = job({ status: "canceled", phase: "canceled", attempts: 1 });
    await w.done;
    // a counter alone is a change too (the page shows it), yielded once
    expect(w.seen.map((j) => `${j.status}:${j.partialTokens}`)).toEqual([
      "queued:0",
      "running:3",
      "running:9",
      "canceled:0",
    ]);
  });
});
