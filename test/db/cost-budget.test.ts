/**
 * A job's database cost as numbers the suite holds: each flow (test/support/cost-flows.ts) is
 * measured on a PostgreSQL of its own (test/support/cost.ts says how and why) and held to
 * test/db/cost-budget.json. A flow that departs from it fails here with measured vs budget.
 *
 * Updating the budget is deliberate: `COST_BUDGET_UPDATE=1 npx vitest run
 * test/db/cost-budget.test.ts` rewrites it from a fresh measurement, and review reads the diff
 * as what the change costs (docs/BENCHMARKS.md, "Database cost per flow").
 */
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { type CostDb, startCostDb } from "../support/cost.ts";
import {
  type Budget,
  type FlowBudget,
  growthExponent,
  type Measured,
  overBudget,
  readBudget,
  summarise,
  table,
  writeBudget,
} from "../support/cost-budget.ts";
import { FLOWS, type Flow, STREAMED, streamed } from "../support/cost-flows.ts";

/** Runs of each flow: the counts must agree across them, WAL is the least of them. */
const RUNS = 3;
const UPDATE = process.env.COST_BUDGET_UPDATE === "1";

let db: CostDb;
beforeAll(async () => {
  db = await startCostDb();
});
afterAll(async () => {
  await db?.stop();
});

/**
 * `flows` measured with a regression planted: a trigger `name` (`trigger` says when and on
 * which table) running `body`, the plpgsql between begin and end; dropped again after.
 */
async function measurePlanted(
  flows: Flow[],
  plant: { name: string; trigger: string; body: string },
): Promise<Measured> {
  const table = plant.trigger.split(" on ")[1];
  await db.admin.query(`
    create function public.${plant.name}() returns trigger language plpgsql
    set search_path = '' as $$
    begin${plant.body}
    end $$;
    create trigger ${plant.name} ${plant.trigger}
    for each row execute function public.${plant.name}();`);
  try {
    return await measure(flows);
  } finally {
    await db.admin.query(`
      drop trigger ${plant.name} on ${table};
      drop function public.${plant.name}();`);
  }
}

async function measure(flows: Flow[]): Promise<Measured> {
  const out: Record<string, FlowBudget> = {};
  const progressWal: Record<string, number> = {};
  for (const flow of flows) {
    const runs = [];
    for (let i = 0; i < RUNS; i++) runs.push(await db.measure(await flow.run(db)));
    out[flow.name] = summarise(flow.name, runs);
    progressWal[flow.name] = Math.min(...runs.map((r) => r.walByCall.record_progress ?? 0));
  }
  const atN = progressWal[streamed(STREAMED).name];
  const at4N = progressWal[streamed(4 * STREAMED).name];
  return {
    flows: out,
    ...(atN && at4N ? { progressWal: [atN, at4N] as [number, number] } : {}),
    progressExponent: atN && at4N ? growthExponent(atN, at4N) : Number.NaN,
  };
}

/** A budget that is exactly `baseline` (the checked-in tolerances), for the self-tests. */
const budgetOf = (baseline: Measured): Budget => {
  const checkedIn = readBudget();
  return {
    ...checkedIn,
    flows: baseline.flows,
    progressGrowth: { ...checkedIn.progressGrowth, exponent: baseline.progressExponent },
  };
};

test("every flow costs what test/db/cost-budget.json says", async () => {
  const measured = await measure(FLOWS);
  const budget = readBudget();
  if (UPDATE) {
    writeBudget(budget, measured);
    console.info(`cost budget rewritten:\n${table(measured, readBudget())}`);
    return;
  }
  expect(
    overBudget(measured, budget),
    `measured vs budget (COST_BUDGET_UPDATE=1 rewrites it, on purpose):\n${table(measured, budget)}`,
  ).toEqual([]);
});

describe("the checker reports a planted regression", () => {
  test("an extra event row per enqueue: rows and statements over in every flow that enqueues", async () => {
    const flows = FLOWS.filter((f) => f.name === "enqueue" || f.name === "success");
    const baseline = await measure(flows);
    const planted = await measurePlanted(flows, {
      name: "cost_plant_event",
      trigger: "after insert on public.generation_jobs",
      // A same-status event, as a usage event is: no state change, so no Realtime broadcast.
      body: `
      insert into public.job_events (job_id, user_id, at, event, from_status, to_status)
      values (new.id, new.user_id, new.created_at, 'planted', new.status, new.status);
      return null;`,
    });
    const report = overBudget(planted, budgetOf(baseline));
    // Two statements more: the insert, and the foreign-key check it runs (job_events.job_id).
    for (const flow of ["enqueue", "success"]) {
      const b = baseline.flows[flow] as FlowBudget;
      const events = b.rows["public.job_events"]?.insert ?? 0;
      expect(report).toContain(
        `${flow}: statements ${b.statements + 2}, budget ${b.statements} (over)`,
      );
      expect(report).toContain(
        `${flow}: public.job_events inserts ${events + 1}, budget ${events} (over)`,
      );
    }
  });

  test("progress writes that store the whole answer again, against the append-only budget: WAL and its growth over", async () => {
    const flows = [STREAMED, 4 * STREAMED].map((n) => streamed(n));
    const appendOnly = await measure(flows);
    // Each write of only the new chunk costs about the same: linear.
    expect(appendOnly.progressExponent).toBeLessThan(1.15);
    // The regression the chunks removed, planted: each write also copies the whole answer so far
    // into the job row (as record_progress did into partial_output).
    const wholeAnswer = await measurePlanted(flows, {
      name: "cost_plant_whole",
      trigger: "after insert on public.job_output_chunks",
      body: `
      update public.generation_jobs j set last_error = private.partial_output(j)
      where j.id = new.job_id;
      return null;`,
    });
    const report = overBudget(wholeAnswer, budgetOf(appendOnly));
    for (const flow of Object.keys(wholeAnswer.flows)) {
      expect(report.filter((line) => line.startsWith(`${flow}: WAL`))).toHaveLength(1);
    }
    expect(report.filter((line) => line.startsWith("progress writes: WAL grows"))).toHaveLength(1);
  });

  test("a progress write that stores more than its text: WAL over in both streamed flows, nothing else", async () => {
    const flows = [STREAMED, 4 * STREAMED].map((n) => streamed(n));
    const baseline = await measure(flows);
    // A trigger of simple assignments runs no statement and writes no extra row: only bytes
    // (192 incompressible characters more in the row at each progress write).
    const planted = await measurePlanted(flows, {
      name: "cost_plant_copy",
      trigger: "before update on public.generation_jobs",
      body: `
      if new.progress_at is distinct from old.progress_at then
        new.last_error := coalesce(old.last_error, '')
          || pg_catalog.md5(pg_catalog.random()::text) || pg_catalog.md5(pg_catalog.random()::text)
          || pg_catalog.md5(pg_catalog.random()::text) || pg_catalog.md5(pg_catalog.random()::text)
          || pg_catalog.md5(pg_catalog.random()::text) || pg_catalog.md5(pg_catalog.random()::text);
      end if;
      return new;`,
    });
    const report = overBudget(planted, budgetOf(baseline));
    const wal = report.filter((line) => / WAL \d+ B, budget \d+ B .*: over$/.test(line));
    expect(wal.map((line) => line.split(":")[0])).toEqual(Object.keys(baseline.flows));
    expect(report.filter((line) => !wal.includes(line) && !line.startsWith("progress"))).toEqual(
      [],
    );
  });
});

describe("the checker's rules", () => {
  const flow: FlowBudget = {
    roundTrips: 1,
    statements: 10,
    rows: { "public.generation_jobs": { insert: 1, update: 0, delete: 0 } },
    walBytes: 2000,
  };
  const budget: Budget = {
    about: [],
    walTolerance: { percent: 10, bytes: 100 },
    progressGrowth: { exponent: 1.5, slack: 0.05 },
    flows: { f: flow },
  };
  const check = (m: Partial<FlowBudget>, progressExponent = 1.5) =>
    overBudget({ flows: { f: { ...flow, ...m } }, progressExponent }, budget);

  test("counts are exact: a saving is reported, so the budget is lowered with it", () => {
    expect(check({ statements: 9 })).toEqual([
      "f: statements 9, budget 10 (under: update the budget to keep the saving)",
    ]);
    expect(check({ rows: {} })).toEqual([
      "f: public.generation_jobs inserts 0, budget 1 (under: update the budget to keep the saving)",
    ]);
  });

  test("WAL passes within its tolerance either side (10 % + 100 B here), not one byte past it", () => {
    expect(check({ walBytes: 2300 })).toEqual([]);
    expect(check({ walBytes: 1700 })).toEqual([]);
    expect(check({ walBytes: 2301 })).toEqual([
      "f: WAL 2301 B, budget 2000 B (allowed up to 2300 B): over",
    ]);
    expect(check({ walBytes: 1699 })).toEqual([
      "f: WAL 1699 B, budget 2000 B (1700 B at least): under: update the budget to keep the saving",
    ]);
  });

  test("runs of a flow that disagree on a count are refused; WAL is the least run's", () => {
    const run = { ...flow, walByCall: {} };
    expect(
      summarise("f", [run, { ...run, walBytes: 1900 }, { ...run, walBytes: 2100 }]).walBytes,
    ).toBe(1900);
    expect(() => summarise("f", [run, { ...run, statements: 11 }])).toThrow(/f: runs disagree/);
  });

  test("a flow without a budget, a budget without a flow, and a steeper growth are each reported", () => {
    expect(
      overBudget({ flows: { g: flow }, progressExponent: 1.56 }, budget).map(
        (l) => l.split(" (")[0],
      ),
    ).toEqual([
      "g: no budget",
      "f: in the budget, not measured",
      "progress writes: WAL grows as N^1.56, budget N^1.5",
    ]);
  });

  test("a budget with a growth exponent and no streamed flows measured is reported", () => {
    expect(check({}, Number.NaN)).toEqual([
      "progress writes: growth not measured (no streamed flows at N and 4N writes)",
    ]);
  });

  test("a flatter growth is reported too: an append-only progress write lowers the budget", () => {
    expect(check({}, 1.46)).toEqual([]);
    expect(check({}, 1.44)).toEqual([
      "progress writes: WAL grows as N^1.44, budget N^1.5 (N^1.45 at least): under: update the budget to keep the saving",
    ]);
  });
});
