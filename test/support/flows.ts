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

const enqueue: Cmd = { t: "enqueue", user: 0, key: null };
type Deliver = Extract<Cmd, { t: "deliver" }>;
const deliver = (model: Deliver["model"]): Deliver => ({
  t: "deliver",
  msg: 0,
  model,
  duplicate: false,
  early: false,
});

async function oneQueuedJob(sim: Sim) {
  await sim.addUsers(["pro"]);
  await sim.command(enqueue);
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
];
