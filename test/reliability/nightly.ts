/**
 * `npm run test:nightly`: the reliability runs at nightly size, in chunks, each chunk a fresh
 * vitest process with a fresh PostgreSQL (the global setup starts one per process).
 *
 * Why chunks in fresh processes: one process running 5,000 schedules slowed with every chunk of
 * runs, and not only because of the database (emptying the tables between chunks did not keep
 * the second chunk as fast as the first): the process itself grows with every run (~2 MB a
 * run; invocations killed on purpose never settle), so later runs pay for the earlier ones. A
 * process per chunk starts every chunk from nothing.
 *
 * The fuzz runs beside the schedules, and the schedules' chunks run in several lanes at once
 * (each chunk is independent: its own process, database, Redis and clock); each chunk's totals
 * are summed and printed at the end.
 *
 *   QUOTA_JOBS_PROPERTY_RUNS   schedules in all            (default 5000)
 *   QUOTA_JOBS_FUZZ_RUNS       fuzzed requests in all      (default 20000)
 *   QUOTA_JOBS_NIGHTLY_CHUNK   schedules per process       (default 250; fuzz: 8x that)
 *   QUOTA_JOBS_NIGHTLY_LANES   schedule chunks at once     (default 4)
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const SCHEDULES = Number(process.env.QUOTA_JOBS_PROPERTY_RUNS ?? 5000);
const FUZZ = Number(process.env.QUOTA_JOBS_FUZZ_RUNS ?? 20000);
const CHUNK = Number(process.env.QUOTA_JOBS_NIGHTLY_CHUNK ?? 250);
const FUZZ_CHUNK = CHUNK * 8;
const LANES = Number(process.env.QUOTA_JOBS_NIGHTLY_LANES ?? 4);

type Totals = Record<string, number | Record<string, number>>;

/** One vitest process; resolves with the `[reliability] <what>:` lines it printed. */
function chunk(file: string, env: Record<string, string>): Promise<string[]> {
  return new Promise((resolve, reject) => {
    const child = spawn("npx", ["vitest", "run", file], {
      cwd: root,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const lines: string[] = [];
    let output = "";
    const collect = (data: Buffer) => {
      output += data.toString();
      for (const line of data.toString().split("\n")) {
        if (line.startsWith("[reliability]")) lines.push(line);
      }
    };
    child.stdout.on("data", collect);
    child.stderr.on("data", collect);
    child.on("error", reject);
    child.on("close", (code) => {
      if (code === 0) return resolve(lines);
      process.stderr.write(output.slice(-20_000));
      reject(new Error(`${file} (${JSON.stringify(env)}) failed with exit ${code}`));
    });
  });
}

function add(into: Totals, from: Totals): void {
  for (const [k, v] of Object.entries(from)) {
    if (typeof v === "number") into[k] = ((into[k] as number | undefined) ?? 0) + v;
    else if (v && typeof v === "object") {
      const inner = (into[k] ?? {}) as Record<string, number>;
      for (const [ik, iv] of Object.entries(v))
        if (typeof iv === "number") inner[ik] = (inner[ik] ?? 0) + iv;
      into[k] = inner;
    }
  }
}

async function schedules(): Promise<Totals> {
  const totals: Totals = { chunks: 0 };
  let next = 0;
  let passed = 0;
  const lane = async () => {
    while (next < SCHEDULES) {
      const runs = Math.min(CHUNK, SCHEDULES - next);
      next += runs;
      const started = Date.now();
      const lines = await chunk("test/reliability/schedules.test.ts", {
        QUOTA_JOBS_PROPERTY_RUNS: String(runs),
      });
      const summary = lines.find((l) => l.startsWith("[reliability] schedules: {"));
      if (!summary) throw new Error("a schedules chunk printed no totals");
      const parsed = JSON.parse(summary.slice(summary.indexOf("{"))) as Totals;
      delete parsed.chunkMs;
      add(totals, parsed);
      (totals.chunks as number)++;
      passed += runs;
      process.stderr.write(
        `[nightly] schedules ${passed}/${SCHEDULES} (chunk of ${runs} in ${Date.now() - started} ms)\n`,
      );
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, LANES) }, lane));
  return totals;
}

async function fuzz(): Promise<Totals> {
  const totals: Totals = { chunks: 0, sent: 0 };
  for (let done = 0; done < FUZZ; done += FUZZ_CHUNK) {
    const runs = Math.min(FUZZ_CHUNK, FUZZ - done);
    const started = Date.now();
    const lines = await chunk("test/reliability/fuzz.test.ts", {
      QUOTA_JOBS_FUZZ_RUNS: String(runs),
    });
    const summary = lines.find((l) => l.startsWith("[reliability] fuzz:"));
    const m = summary && /fuzz: (\d+) requests.* by status (\{.*\})/.exec(summary);
    if (!m?.[1] || !m[2]) throw new Error("a fuzz chunk printed no totals");
    add(totals, { sent: Number(m[1]), byStatus: JSON.parse(m[2]) as Record<string, number> });
    (totals.chunks as number)++;
    process.stderr.write(
      `[nightly] fuzz ${done + runs}/${FUZZ} (chunk of ${runs} in ${Date.now() - started} ms)\n`,
    );
  }
  return totals;
}

const started = Date.now();
try {
  const [s, f] = await Promise.all([schedules(), fuzz()]);
  process.stdout.write(
    `[nightly] done in ${Math.round((Date.now() - started) / 1000)} s\n` +
      `[nightly] schedules ${JSON.stringify(s)}\n[nightly] fuzz ${JSON.stringify(f)}\n`,
  );
} catch (error) {
  process.stderr.write(
    `[nightly] FAILED after ${Math.round((Date.now() - started) / 1000)} s: ${(error as Error).message}\n`,
  );
  process.exit(1);
}
