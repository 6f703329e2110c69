/**
 * What the page's polling costs per job: public/poll.js's poller driven on a virtual clock
 * against job timelines, counting the status reads (1 db each, section 1) until the job ends,
 * and the wait from the job's first text to the look that shows it. The old schedule is the
 * same poller at one pace (`slow`: 1.5 s first, the page's schedule before the adaptive one).
 */
import { createPoller, type Pace, paceOf } from "../../public/poll.js";

interface State {
  phase: string;
  partialOutput: string | null;
}

/** A job's life: the state from each time (ms after the 202) on; the last one ends it. */
export interface Timeline {
  name: string;
  steps: { at: number; state: State }[];
  firstTextAt: number;
}

function streaming(claimAt: number, firstTextAt: number, doneAt: number): Timeline["steps"] {
  const steps: Timeline["steps"] = [
    { at: 0, state: { phase: "queued", partialOutput: null } },
    { at: claimAt, state: { phase: "running", partialOutput: null } },
  ];
  // The first write on the first text, then one a second (PROGRESS_INTERVAL_MS).
  for (let t = firstTextAt, n = 1; t < doneAt; t += 1000, n++)
    steps.push({ at: t, state: { phase: "running", partialOutput: "x".repeat(n) } });
  steps.push({ at: doneAt, state: { phase: "succeeded", partialOutput: null } });
  return steps;
}

export const TIMELINES: Timeline[] = [
  {
    name: "a 10 s answer, claimed at 0.3 s, first text at 0.8 s",
    steps: streaming(300, 800, 10_800),
    firstTextAt: 800,
  },
  {
    name: "a 2 s answer, claimed at 0.3 s, first text at 0.8 s",
    steps: streaming(300, 800, 2_800),
    firstTextAt: 800,
  },
  {
    name: "queued for 60 s (a backlog), then a 10 s answer",
    steps: streaming(60_000, 60_500, 70_500),
    firstTextAt: 60_500,
  },
  {
    name: "waiting 60 s for the AI provider, then a 10 s answer",
    steps: [
      { at: 0, state: { phase: "queued", partialOutput: null } },
      { at: 300, state: { phase: "waiting_for_provider", partialOutput: null } },
      ...streaming(60_300, 60_800, 70_800).slice(1),
    ],
    firstTextAt: 60_800,
  },
];

function stateAt(t: Timeline, ms: number): State {
  let s = t.steps[0]?.state as State;
  for (const step of t.steps) if (step.at <= ms) s = step.state;
  return s;
}

/** Runs the poller on a virtual clock over one timeline: reads until the end, first-text wait. */
async function simulate(t: Timeline, schedule: "adaptive" | "fixed") {
  let now = 0;
  let pending: { fn: () => void; at: number } | null = null;
  let seen: State = t.steps[0]?.state as State;
  let reads = 0;
  let shownAt = Number.NaN;
  const poller = createPoller({
    pace: (): Pace => (schedule === "adaptive" ? paceOf(seen) : "slow"),
    timers: {
      setTimeout: (fn, ms) => {
        pending = { fn, at: now + ms };
        return 1;
      },
      clearTimeout: () => {
        pending = null;
      },
    },
    tick: async () => {
      reads++;
      const s = stateAt(t, now);
      const changed = s.phase !== seen.phase || s.partialOutput !== seen.partialOutput;
      seen = s;
      if (Number.isNaN(shownAt) && (s.partialOutput || s.phase === "succeeded")) shownAt = now;
      if (s.phase === "succeeded") return "stop";
      return changed ? "changed" : "same";
    },
  });
  poller.start();
  for (let guard = 0; guard < 10_000 && pending; guard++) {
    const p = pending as { fn: () => void; at: number };
    pending = null;
    now = p.at;
    p.fn();
    for (let i = 0; i < 5; i++) await Promise.resolve();
  }
  return { reads, firstTextShownAfterMs: shownAt - t.firstTextAt };
}

export async function pollCost() {
  const rows = [];
  for (const t of TIMELINES) {
    const fixed = await simulate(t, "fixed");
    const adaptive = await simulate(t, "adaptive");
    rows.push({ timeline: t.name, fixed, adaptive, extraReads: adaptive.reads - fixed.reads });
  }
  return rows;
}
