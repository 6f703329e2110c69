import { describe, expect, test } from "vitest";
import {
  createPoller,
  type Pace,
  POLL_MAX_MS,
  paceOf,
  pollDelay,
  type TickResult,
} from "../../public/poll.js";

describe("polling backoff schedule", () => {
  test("starts at 1.5 s, grows by half, and stops growing at 10 s", () => {
    expect([0, 1, 2, 3, 4, 5, 6, 20].map((a) => pollDelay(a))).toEqual([
      1500, 2250, 3375, 5063, 7594, 10_000, 10_000, 10_000,
    ]);
  });

  test("never exceeds the cap and never shrinks", () => {
    let previous = 0;
    for (let i = 0; i < 50; i++) {
      const d = pollDelay(i);
      expect(d).toBeGreaterThanOrEqual(previous);
      expect(d).toBeLessThanOrEqual(POLL_MAX_MS);
      previous = d;
    }
  });
});

/** A hand-driven clock: `fire()` runs the one pending timer and says after how long. */
function manualTimers() {
  let pending: { fn: () => void; ms: number; id: number } | null = null;
  let next = 1;
  return {
    timers: {
      setTimeout(fn: () => void, ms: number) {
        pending = { fn, ms, id: next++ };
        return pending.id;
      },
      clearTimeout(id: unknown) {
        if (pending?.id === id) pending = null;
      },
    },
    pendingMs: () => pending?.ms ?? null,
    async fire() {
      const p = pending;
      if (!p) throw new Error("nothing scheduled");
      pending = null;
      p.fn();
      // let the tick's promise settle
      for (let i = 0; i < 5; i++) await Promise.resolve();
      return p.ms;
    },
  };
}

/**
 * A poller on a hand-driven clock whose look number `n` (from 0) answers `answer(n)`, at the
 * pace `pace` gives (the poller's default without one); `ticks()` counts the looks so far.
 */
function pollerOnClock(answer: (n: number) => TickResult, pace?: () => Pace) {
  const clock = manualTimers();
  let ticks = 0;
  const poller = createPoller({ tick: async () => answer(ticks++), pace, timers: clock.timers });
  return { clock, poller, ticks: () => ticks };
}

describe("the poller", () => {
  test("backs off while nothing changes, resets on a change, stops when the job ends", async () => {
    const results: TickResult[] = ["same", "same", "changed", "same", "stop"];
    const { clock, poller, ticks } = pollerOnClock((n) => results[n] ?? "stop");
    poller.start();
    const waits: number[] = [];
    while (clock.pendingMs() !== null) waits.push(await clock.fire());
    expect(waits).toEqual([1500, 2250, 3375, 1500, 2250]);
    expect(ticks()).toBe(5);
    expect(poller.stopped()).toBe(true);
  });

  test("a failed look counts as no change: polling slows down, it does not stop", async () => {
    const { clock, poller, ticks } = pollerOnClock(() => {
      throw new Error("offline");
    });
    poller.start();
    await clock.fire();
    await clock.fire();
    expect(ticks()).toBe(2);
    expect(clock.pendingMs()).toBe(3375);
    poller.stop();
  });

  test("paused while the tab is hidden: no request; resumed: one look right away", async () => {
    const { clock, poller, ticks } = pollerOnClock(() => "same");
    poller.start();
    await clock.fire();
    expect(ticks()).toBe(1);
    poller.pause();
    expect(clock.pendingMs()).toBeNull();
    poller.resume();
    for (let i = 0; i < 5; i++) await Promise.resolve();
    expect(ticks()).toBe(2);
    // and the backoff carries on from where it was
    expect(clock.pendingMs()).toBe(3375);
    poller.stop();
    expect(clock.pendingMs()).toBeNull();
  });
});

describe("the pace follows the job", () => {
  test("queued and starting are fast, streaming follows the progress writes, waiting is slow", () => {
    expect(paceOf({ phase: "queued" })).toBe("fast");
    expect(paceOf({ phase: "running", partialOutput: null })).toBe("fast");
    expect(paceOf({ phase: "running", partialOutput: "Once upon" })).toBe("streaming");
    expect(paceOf({ phase: "waiting_for_provider" })).toBe("slow");
    expect(paceOf(undefined)).toBe("slow");
    expect([0, 1, 2, 3].map((a) => pollDelay(a, "fast"))).toEqual([250, 375, 563, 844]);
    expect([0, 1, 2].map((a) => pollDelay(a, "streaming"))).toEqual([1000, 1500, 2250]);
  });

  test("a job that does not move is looked at less and less, whatever its pace", () => {
    for (const pace of ["fast", "streaming", "slow"] as Pace[]) {
      const waits = Array.from({ length: 30 }, (_, a) => pollDelay(a, pace));
      // backs off: every wait at least the one before, and the last ones at the cap
      for (let i = 1; i < waits.length; i++)
        expect(waits[i]).toBeGreaterThanOrEqual(waits[i - 1] ?? 0);
      expect(waits.at(-1)).toBe(POLL_MAX_MS);
      expect(waits[0]).toBeLessThan(POLL_MAX_MS / 4);
      // a minute of nothing costs at most 13 looks (fast: 13, slow: 9)
      let t = 0;
      let looks = 0;
      for (const w of waits) {
        t += w;
        if (t > 60_000) break;
        looks++;
      }
      expect(looks).toBeLessThanOrEqual(13);
    }
  });

  test("the poller asks the pace before each wait: fast while queued, backing off, reset on a change", async () => {
    let job: { phase: string; partialOutput: string | null } = {
      phase: "queued",
      partialOutput: null,
    };
    const script: [TickResult, typeof job][] = [
      ["same", { phase: "queued", partialOutput: null }],
      ["same", { phase: "queued", partialOutput: null }],
      ["changed", { phase: "running", partialOutput: null }],
      ["changed", { phase: "running", partialOutput: "A" }],
      ["same", { phase: "running", partialOutput: "A" }],
      ["changed", { phase: "running", partialOutput: "AB" }],
      ["stop", { phase: "succeeded", partialOutput: null }],
    ];
    const { clock, poller } = pollerOnClock(
      (n) => {
        const [result, next] = script[n] ?? ["stop", job];
        job = next;
        return result;
      },
      () => paceOf(job),
    );
    poller.start();
    const waits: number[] = [];
    while (clock.pendingMs() !== null) waits.push(await clock.fire());
    expect(waits).toEqual([250, 375, 563, 250, 1000, 1500, 1000]);
    expect(poller.stopped()).toBe(true);
  });
});
