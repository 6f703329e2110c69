/**
 * `npm run bench`: every section, or some (`--only=sql,peers,cold` / `--sql --cold`), `--quick` for a
 * short run. The capacity section's length: CAPACITY_SECONDS (default 600, quick 30),
 * CAPACITY_RATE (10 a second), CAPACITY_PRELOAD (1,000,000 jobs, quick 100,000). Each section writes bench/results/<section>.json and prints its table; the run
 * writes bench/results/summary.json with the machine and the time each section took. `--docs`
 * records the figures of the sections that ran in docs/BENCHMARKS.md's "Today's figures", with
 * the date, the commit and the load average (bench/figures.ts); a `--quick` run is never recorded.
 */
import { printCapacity, runCapacity } from "./capacity.ts";
import { printColdStart, runColdStart } from "./cold-start.ts";
import { commit, load, recordRun } from "./figures.ts";
import { printFirstRequest, runFirstRequest } from "./first-request.ts";
import { printGrowth, runGrowth } from "./growth.ts";
import { printHotPath, runHotPath } from "./hot-path.ts";
import { printHttp, runHttp } from "./http.ts";
import { printPeers, runPeers } from "./peers.ts";
import { printRoundtrips, runRoundtrips } from "./roundtrips.ts";
import { printSqlThroughput, runSqlThroughput } from "./sql-throughput.ts";
import {
  log,
  machine,
  parseFlags,
  round,
  SECTIONS,
  type Section,
  writeResult,
} from "./support/util.ts";

const flags = parseFlags(process.argv.slice(2));
const titles: Record<Section, string> = {
  roundtrips: "1. Round trips per flow (counted at the stand-ins)",
  sql: "2. SQL throughput against the floor",
  peers: "2b. A job's whole life: ours, pg-boss and graphile-worker on the same database",
  hotpath: "2c. Where a job's life spends its time in the database, and what each suspect costs",
  http: "3. HTTP through the local stack",
  cold: "4. Cold start (the built .vercel/output, fresh Node 24 process)",
  growth: "5. Growth (10k to 10M jobs with their events), the audits, retention and history upkeep",
  first: "6. The first request on a fresh instance, and Generate → first visible token",
  capacity: "7. Capacity at 1/100 scale: 10 enqueues/s for 10 min over 1 M jobs (docs/CAPACITY.md)",
};
/** Each section's results and its printed table. */
const both = async <R>(result: Promise<R>, print: (r: R) => string) => {
  const r = await result;
  return { result: r as unknown, text: print(r) };
};
const run: Record<Section, (o: { quick: boolean }) => Promise<{ result: unknown; text: string }>> =
  {
    roundtrips: (o) => both(runRoundtrips(o), printRoundtrips),
    sql: (o) => both(runSqlThroughput(o), printSqlThroughput),
    peers: (o) => both(runPeers(o), printPeers),
    hotpath: (o) => both(runHotPath(o), printHotPath),
    http: (o) => both(runHttp(o), printHttp),
    cold: (o) => both(runColdStart(o), printColdStart),
    growth: (o) => both(runGrowth(o), printGrowth),
    first: (o) => both(runFirstRequest(o), printFirstRequest),
    capacity: (o) => both(runCapacity(o), printCapacity),
  };

if (flags.docs && flags.quick) throw new Error("--docs records full runs only, not --quick");
const stamp = { at: new Date().toISOString(), commit: commit(), loadBefore: load() };
const results: Record<string, unknown> = {};
const started = performance.now();
const seconds: Record<string, number> = {};
const failed: Record<string, string> = {};
for (const section of SECTIONS) {
  if (flags.only && !flags.only.has(section)) continue;
  log(`== ${titles[section]}${flags.quick ? " (quick)" : ""}`);
  const t = performance.now();
  try {
    const { result, text } = await run[section]({ quick: flags.quick });
    results[section] = result;
    console.log(`\n## ${titles[section]}\n\n${text}\n`);
  } catch (error) {
    failed[section] = error instanceof Error ? (error.stack ?? error.message) : String(error);
    console.error(`section ${section} failed:`, error);
  }
  seconds[section] = round((performance.now() - t) / 1000, 1);
  log(`   ${section} took ${seconds[section]} s`);
}
if (flags.docs) {
  const rest = recordRun(results, { ...stamp, loadAfter: load() });
  const recorded = Object.keys(results).filter((k) => !rest.includes(k));
  console.log(
    `docs/BENCHMARKS.md: today's figures recorded for ${recorded.join(", ") || "no section"}${rest.length ? ` (${rest.join(", ")}: in their sections only)` : ""}`,
  );
}
const total = round((performance.now() - started) / 1000, 1);
await writeResult("summary", {
  at: new Date().toISOString(),
  command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
  quick: flags.quick,
  machine: machine(),
  seconds,
  totalSeconds: total,
  failed,
});
console.log(
  `total: ${total} s (${Object.entries(seconds)
    .map(([k, v]) => `${k} ${v} s`)
    .join(", ")})`,
);
process.exit(Object.keys(failed).length > 0 ? 1 : 0);
