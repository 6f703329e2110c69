/**
 * The single invocations the fault matrix breaks, each on a fresh schedule: what to set up,
 * then the one command under test (sim.ts runs it; a fault is added to it by the matrix).
 */
import type { Cmd, Sim } from "./sim.ts";

export interface Flow {
  name: string;
  setup(sim: Sim): Promise<void>;
  act: Cmd;
}

const enqueue = { t: "enqueue", user: 0, key: null } as const satisfies Cmd;
type Deliver = Extract<Cmd, { t: "deliver" }>;
const deliver = (model: Deliver["model"]): Deliver => ({
  t: "deliver",
  msg: 0,
  model,
  duplicate: false,
  early: false,
});

/** One queued extraction of a `pro` user: a 2-unit hold, its output read through its kind. */
async function oneQueuedExtraction(sim: Sim) {
  await sim.addUsers(["pro"]);
  await sim.command({ ...enqueue, kind: "extract" });
}

async function oneQueuedJob(sim: Sim) {
  await sim.addUsers(["pro"]);
  await sim.command(enqueue);
}

/** One queued job of a `team` user: a token plan, so every ending captures and releases tokens. */
async function oneQueuedTokenJob(sim: Sim) {
  await sim.addUsers(["team"]);
  await sim.command(enqueue);
}

/**
 * The progress interval of the mid-stream flows. Short, for the test's time: the trace does not
 * depend on it (the "stream" model holds the first progress write in flight until its answer
 * is in, so no second tick can write; see holdFirstProgress in sim.ts).
 */
export const MID_STREAM_PROGRESS_MS = 20;

function midStream(plan: "pro" | "team") {
  return async (sim: Sim) => {
    sim.workerDeps = {
      ...sim.workerDeps,
      config: { ...sim.workerDeps.config, progressIntervalMs: MID_STREAM_PROGRESS_MS },
    };
    await sim.addUsers([plan]);
    await sim.command(enqueue);
  };
}

export const FLOWS: Flow[] = [
  {
    name: "enqueue",
    setup: (sim) => sim.addUsers(["pro"]),
    act: enqueue,
  },
  { name: "delivery, model answers", setup: oneQueuedJob, act: deliver("ok") },
  { name: "delivery, 429 rate_limit_exceeded", setup: oneQueuedJob, act: deliver("rate_limit") },
  {
    name: "delivery, 429 insufficient_quota",
    setup: oneQueuedJob,
    act: deliver("insufficient_quota"),
  },
  { name: "delivery, model 500", setup: oneQueuedJob, act: deliver("server_error") },
  { name: "delivery, model refuses (400)", setup: oneQueuedJob, act: deliver("bad_request") },
  { name: "failure callback", setup: oneQueuedJob, act: { t: "callback", msg: 0 } },
  { name: "cancel", setup: oneQueuedJob, act: { t: "cancel", user: 0, job: 0 } },
  {
    name: "sweep (a dead worker's job, a lost message)",
    async setup(sim) {
      await sim.addUsers(["pro"]);
      await sim.command(enqueue);
      await sim.command(enqueue);
      // The first job's worker dies after its claim; the second job's message is lost.
      await sim.command({ ...deliver("ok"), fault: { at: "rpc:start_job", action: "kill-after" } });
      sim.queue.pending.length = 0;
      sim.tick(1000);
    },
    act: { t: "sweep" },
  },
  // The worker mid-stream: its progress write is a boundary call like any other.
  {
    name: "delivery, worker mid-stream (a progress write)",
    setup: midStream("pro"),
    act: deliver("stream"),
  },
  // An extraction: the same flows, its output read and validated through its kind.
  {
    name: "extraction: enqueue",
    setup: (sim) => sim.addUsers(["pro"]),
    act: { ...enqueue, kind: "extract" },
  },
  { name: "extraction: delivery, model answers", setup: oneQueuedExtraction, act: deliver("ok") },
  {
    name: "extraction: delivery, output breaks the schema",
    setup: oneQueuedExtraction,
    act: deliver("json_invalid"),
  },
  // The same on a token plan: every ending captures what was used and releases the rest.
  { name: "team: delivery, model answers", setup: oneQueuedTokenJob, act: deliver("ok") },
  {
    name: "team: delivery, 429 rate_limit_exceeded",
    setup: oneQueuedTokenJob,
    act: deliver("rate_limit"),
  },
  { name: "team: delivery, model 500", setup: oneQueuedTokenJob, act: deliver("server_error") },
  {
    name: "team: delivery, model refuses (400)",
    setup: oneQueuedTokenJob,
    act: deliver("bad_request"),
  },
  { name: "team: failure callback", setup: oneQueuedTokenJob, act: { t: "callback", msg: 0 } },
  { name: "team: cancel", setup: oneQueuedTokenJob, act: { t: "cancel", user: 0, job: 0 } },
  {
    name: "team: delivery, worker mid-stream (a progress write)",
    setup: midStream("team"),
    act: deliver("stream"),
  },
];
