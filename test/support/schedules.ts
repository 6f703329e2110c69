/**
 * fast-check arbitraries for reliability schedules (see sim.ts for what each command does).
 */
import fc from "fast-check";
import type { Fault, FaultAction } from "./faults.ts";
import type { Cmd, ModelOutcome, Round, Schedule } from "./sim.ts";

/** The boundary calls each kind of invocation can make (found by tracing; see faults.test.ts). */
export const POINTS = {
  enqueue: ["redis:evalsha", "rpc:enqueue_job", "publish", "rpc:fail_job"],
  deliver: [
    "rpc:start_job",
    "redis:get",
    "model",
    "rpc:complete_job",
    "rpc:requeue_job",
    "rpc:release_job",
    "rpc:fail_job",
    "redis:set",
    "publish",
    "webhook",
  ],
  callback: ["rpc:fail_job", "redis:set", "redis:incr", "webhook"],
  cancel: ["rpc:cancel_job"],
  sweep: ["rpc:sweep_jobs", "publish", "redis:set", "webhook"],
} as const;

export const ACTIONS: FaultAction[] = ["fail", "hang", "lose", "kill-before", "kill-after"];
export const MODEL_OUTCOMES: ModelOutcome[] = [
  "ok",
  "rate_limit",
  "insufficient_quota",
  "server_error",
  "timeout",
  "bad_request",
  "refusal",
  "unreachable",
];

/** A fault at one of `points` on about a third of the invocations. */
const faultOn = (points: readonly string[]): fc.Arbitrary<Fault | undefined> =>
  fc.oneof(
    { weight: 2, arbitrary: fc.constant(undefined) },
    {
      weight: 1,
      arbitrary: fc.record({
        at: fc.constantFrom(...points),
        action: fc.constantFrom(...ACTIONS),
        nth: fc.constantFrom(1, 1, 1, 2),
      }),
    },
  );

/**
 * About a quarter of the commands go through their HTTP route (`api/` in-process: token,
 * signature, body, status) instead of calling lib/ directly; faults still hit the same ports.
 */
const edge = fc.constantFrom(false, false, false, true);

const model: fc.Arbitrary<ModelOutcome> = fc.oneof(
  { weight: 6, arbitrary: fc.constant("ok" as const) },
  { weight: 4, arbitrary: fc.constantFrom(...MODEL_OUTCOMES) },
);

export const command: fc.Arbitrary<Cmd> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant("enqueue" as const),
      user: fc.nat(7),
      key: fc.option(fc.nat(2), { nil: null }),
      fault: faultOn(POINTS.enqueue),
      edge,
    }),
  },
  {
    weight: 7,
    arbitrary: fc.record({
      t: fc.constant("deliver" as const),
      msg: fc.nat(7),
      model,
      duplicate: fc.constantFrom(false, false, false, true),
      early: fc.boolean(),
      fault: faultOn(POINTS.deliver),
      edge,
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("callback" as const),
      msg: fc.nat(7),
      fault: faultOn(POINTS.callback),
      edge,
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("cancel" as const),
      user: fc.nat(7),
      job: fc.nat(7),
      fault: faultOn(POINTS.cancel),
      edge,
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("sweep" as const),
      fault: faultOn(POINTS.sweep),
      edge,
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("clock" as const),
      seconds: fc.constantFrom(1, 30, 95, 400, 1000, 4000, 11_000, 86_400),
    }),
  },
);

export const round: fc.Arbitrary<Round> = fc.array(command, { minLength: 1, maxLength: 3 });

export const schedule = (maxRounds = 12): fc.Arbitrary<Schedule> =>
  fc.record({
    users: fc.array(
      fc.constantFrom("free" as const, "pro" as const, "tight" as const, "team" as const),
      {
        minLength: 1,
        maxLength: 4,
      },
    ),
    rounds: fc.array(round, { minLength: 1, maxLength: maxRounds }),
  });
