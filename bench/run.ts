/**
 * `npm run bench`: every section, or some (`--only=sql,peers,cold` / `--sql --cold`), `--quick` for a
 * short run. The capacity section's length: CAPACITY_SECONDS (default 600, quick 30),
 * CAPACITY_RATE (10 a second), CAPACITY_PRELOAD (1,000,000 jobs, quick 100,000). Each section writes bench/results/<section>.json and prints its table; the run
 * writes bench/results/summary.json with the machine and the time each section took.
 */
import { printCapacity, runCapacity } from "./capacity.ts";
import { printColdStart, runColdStart } from "./cold-start.ts";
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
const run: Record<Section, (o: { quick: boolean }) => Promise<string>> = {
  roundtrips: async (o) => printRoundtrips(await runRoundtrips(o)),
  sql: async (o) => printSqlThroughput(await runSqlThroughput(o)),
  peers: async (o) => printPeers(await runPeers(o)),
  hotpath: async (o) => printHotPath(await runHotPath(o)),
  http: async (o) => printHttp(await runHttp(o)),
  cold: async (o) => printColdStart(await runColdStart(o)),
  growth: async (o) => printGrowth(await runGrowth(o)),
  first: async (o) => printFirstRequest(await runFirstRequest(o)),
  capacity: async (o) => printCapacity(await runCapacity(o)),
};

const started = performance.now();
const seconds: Record<string, number> = {};
const failed: Record<string, string> = {};
for (const section of SECTIONS) {
  if (flags.only && !flags.only.has(section)) continue;
  log(`== ${titles[section]}${flags.quick ? " (quick)" : ""}`);
  const t = performance.now();
  try {
    const text = await run[section]({ quick: flags.quick });
    console.log(`\n## ${titles[section]}\n\n${text}\n`);
  } catch (error) {
    failed[section] = error instanceof Error ? (error.stack ?? error.message) : String(error);
    console.error(`section ${section} failed:`, error);
  }
  seconds[section] = round((performance.now() - t) / 1000, 1);
  log(`   ${section} took ${seconds[section]} s`);
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
