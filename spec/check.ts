/**
 * Runs spin on a model: the job model (spec/job.pml) or the organization pool's (spec/pool.pml).
 * Generates the model's transitions from its table, then `spin -a`, `gcc` and `./pan` in a temp
 * dir, and reads the verdict (states, depth, memory, time, errors and, on an error, the
 * counterexample replayed). `npm run spec:check` is the full run.
 */
import { execFile } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import { existsSync } from "node:fs";
import {
  copyFile,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  utimes,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { mutants, poolMutants } from "./mutants.ts";
import { type PoolTable, poolTransitions } from "./pool.ts";
import { generatePoolPromela } from "./pool-promela.ts";
import { generatePromela } from "./promela.ts";
import { type Table, transitions } from "./transitions.ts";

const run = promisify(execFile);

/**
 * The models: the Promela file, the file it includes (generated from its table) and how it is
 * checked for liveness. The job model's liveness claim holds under weak fairness (`pan -a -f`);
 * the pool model's is checked without fairness on a variant whose every run is finite
 * (`-DLIVENESS`, spec/pool.pml): with weak fairness over its dozen processes the search took 30
 * times as long.
 */
const MODELS = {
  job: {
    file: "job.pml",
    include: "transitions.pml",
    generate: (o: CheckOptions) => generatePromela(o.table ?? transitions),
    liveness: { defines: [] as string[], pan: ["-a", "-f"] },
  },
  pool: {
    file: "pool.pml",
    include: "pool-transitions.pml",
    generate: (o: CheckOptions) => generatePoolPromela(o.poolTable ?? poolTransitions),
    liveness: { defines: ["-DLIVENESS"], pan: ["-a"] },
  },
};

export type Bounds = Record<string, number>;

/**
 * The environment's bounds. `bounded` (every `npm test`) has one worker and one sweeper and
 * no duplicate, early or repeated deliveries. The full run (`npm run spec:check`) has two
 * workers and two sweepers throughout, and adds the environment's extra moves in two groups
 * (all of them at once does not finish in minutes on two cores): duplicates with a repeated
 * failure callback, and clock skew with the shared provider gate (the gate's requeue is what
 * makes a message wait for its notBefore there; the 429 requeue is in the other two).
 */
export const PROFILES = {
  bounded: {
    WORKERS: 1,
    SWEEPERS: 1,
    QUOTA_429: 1,
    GATE_CLOSED: 0,
    DUPS: 0,
    EARLY: 0,
    CB_AGAIN: 0,
  },
  "two workers": {
    WORKERS: 2,
    SWEEPERS: 2,
    QUOTA_429: 2,
    GATE_CLOSED: 0,
    DUPS: 0,
    EARLY: 0,
    CB_AGAIN: 0,
  },
  duplicates: {
    WORKERS: 2,
    SWEEPERS: 2,
    QUOTA_429: 1,
    GATE_CLOSED: 0,
    DUPS: 1,
    EARLY: 0,
    CB_AGAIN: 1,
  },
  "skew and gate": {
    WORKERS: 2,
    SWEEPERS: 2,
    QUOTA_429: 0,
    GATE_CLOSED: 1,
    DUPS: 0,
    EARLY: 1,
    CB_AGAIN: 0,
  },
} satisfies Record<string, Bounds>;

/**
 * The pool model's bounds (spec/pool.pml; 255 is no cap). `bounded` (every `npm test`): two
 * members sending two enqueues each at once on a pool with room for two holds and a bit (5
 * units, holds of 2), capped at 4 and 3 (the second member's second job fits only after their
 * first captured at most 1), the plan's active bound 1 and its bound of refunds after spend 1:
 * every enqueue refusal is reached, the race the reserving statement's guard exists for too.
 * `three tries` (`npm run spec:check`): three enqueues each, a pool of 6, the first member
 * without a cap, two active jobs a member and two refunds after spend.
 */
export const POOL_PROFILES = {
  bounded: { TRIES: 2, LIMIT: 5, CAP0: 4, CAP1: 3, MAX_ACTIVE: 1, BOUND: 1 },
  "three tries": { TRIES: 3, LIMIT: 6, CAP0: 255, CAP1: 3, MAX_ACTIVE: 2, BOUND: 2 },
} satisfies Record<string, Bounds>;

export interface CheckOptions {
  /** The model to check. @default "job" */
  model?: keyof typeof MODELS;
  /** The transition table to generate the model from (a mutant's, to prove the check can fail). */
  table?: Table;
  /** The pool model's table (a mutant's, to prove the check can fail). */
  poolTable?: PoolTable;
  bounds: Bounds;
  /** `safety`: every assertion in every reachable state; `liveness`: the `ends` claim
   * (acceptance cycles: the job model's under weak fairness, `pan -a -f`; the pool's `pan -a`). */
  mode: "safety" | "liveness";
  /** Extra preprocessor flags, e.g. `NO_MAX_AGE`. */
  flags?: string[];
  timeoutMs?: number;
  /**
   * Spin's memory bound; a search that reaches it is reported incomplete, not passed. The full
   * duplicates liveness profile needs about 3.9 GB, so the default leaves it room.
   * @default 8192
   */
  memLimitMb?: number;
  /** Look for the shortest counterexample (slower; for mutants, whose trail is read). */
  shortest?: boolean;
  /** Compile pan without optimisation: for small state spaces the compile dominates. */
  quickCompile?: boolean;
}

/**
 * Compiled pans, named by a hash of everything they are built from (the generated Promela,
 * job.pml, the defines, gcc's flags, spin's and gcc's versions): a run that checks a model
 * already checked on this machine skips `spin -a` and gcc (an -O2 compile is most of a small
 * search's time). A pan is moved in whole (rename), so a reader never sees half of one; one
 * unused for a week is removed when another is built.
 */
export const PAN_CACHE = join(tmpdir(), "quota-jobs-pan");

let toolVersions: Promise<string> | undefined;
const versions = () => {
  toolVersions ??= Promise.all([run("spin", ["-V"]), run("gcc", ["-dumpfullversion"])]).then(
    (outs) => outs.map((o) => o.stdout.trim()).join("\n"),
  );
  return toolVersions;
};

const WEEK_MS = 7 * 24 * 3600 * 1000;

async function pruneCache(): Promise<void> {
  for (const name of await readdir(PAN_CACHE)) {
    const file = join(PAN_CACHE, name);
    const age = Date.now() - (await stat(file).catch(() => ({ mtimeMs: Date.now() }))).mtimeMs;
    if (age > WEEK_MS) await rm(file, { force: true });
  }
}

/** The pan for these sources and flags: from the cache, else built in `dir` and cached. */
async function compiledPan(
  dir: string,
  file: string,
  sources: string[],
  spinArgs: string[],
  gccArgs: string[],
  timeout: number,
): Promise<{ pan: string; cached: boolean }> {
  const key = createHash("sha256")
    .update(JSON.stringify([await versions(), sources, spinArgs, gccArgs]))
    .digest("hex")
    .slice(0, 32);
  const pan = join(PAN_CACHE, key);
  if (existsSync(pan)) {
    const now = new Date();
    await utimes(pan, now, now);
    return { pan, cached: true };
  }
  await run("spin", [...spinArgs, "-a", file], { cwd: dir, timeout });
  await run("gcc", [...gccArgs, "-o", "pan", "pan.c"], { cwd: dir, timeout });
  await mkdir(PAN_CACHE, { recursive: true });
  await pruneCache();
  // Two runs may build the same pan at once: each moves its own in, either one is right.
  const staged = `${pan}.${randomUUID()}`;
  await copyFile(join(dir, "pan"), staged);
  await rename(staged, pan);
  return { pan, cached: false };
}

export interface CheckResult {
  errors: number;
  /** The search covered the whole state space (no depth or memory bound cut it short). */
  complete: boolean;
  states: number;
  transitions: number;
  depth: number;
  memoryMb: number;
  seconds: number;
  /** The violated assertion or claim, as pan reports it. */
  violation: string | null;
  /** The pan came from the cache (PAN_CACHE): neither spin -a nor gcc ran. */
  cached: boolean;
  /** On an error: the counterexample replayed by `spin -t`, one line per step. */
  trail: string[];
  /** Transitions (generated rows and actor steps) no run reached. */
  unreached: string[];
  output: string;
}

/** Fails with a clear message when spin or gcc is missing: the check is never skipped. */
export async function requireTools(): Promise<void> {
  for (const [tool, hint] of [
    ["spin", "Debian's package: apt-get install -y spin"],
    ["gcc", "apt-get install -y gcc"],
  ]) {
    try {
      await run("sh", ["-c", `command -v ${tool}`]);
    } catch {
      throw new Error(`the model check needs \`${tool}\` on the PATH (${hint})`);
    }
  }
}

const num = (out: string, re: RegExp): number => {
  const m = out.match(re);
  return m?.[1] ? Number(m[1]) : Number.NaN;
};

export async function checkModel(o: CheckOptions): Promise<CheckResult> {
  await requireTools();
  const dir = await mkdtemp(join(tmpdir(), "quota-jobs-model-"));
  const timeout = o.timeoutMs ?? 600_000;
  const m = MODELS[o.model ?? "job"];
  try {
    const generated = m.generate(o);
    const model = await readFile(fileURLToPath(new URL(`./${m.file}`, import.meta.url)), "utf8");
    await writeFile(join(dir, m.include), generated);
    await writeFile(join(dir, m.file), model);
    const defines = [
      ...Object.entries(o.bounds).map(([k, v]) => `-D${k}=${v}`),
      ...(o.flags ?? []).map((f) => `-D${f}`),
      ...(o.mode === "liveness" ? m.liveness.defines : []),
    ];
    const cflags =
      o.mode === "safety" ? ["-DSAFETY", "-DNOCLAIM"] : ["-DNFAIR=5", "-DNOBOUNDCHECK"];
    const gccArgs = [
      o.quickCompile ? "-O0" : "-O2",
      "-DCOLLAPSE",
      `-DMEMLIM=${o.memLimitMb ?? 8192}`,
      ...cflags,
    ];
    const { pan, cached } = await compiledPan(
      dir,
      m.file,
      [generated, model],
      defines,
      gccArgs,
      timeout,
    );
    const panArgs = ["-m1000000", ...(o.mode === "safety" ? [] : m.liveness.pan)];
    if (o.shortest && o.mode === "safety") panArgs.push("-i"); // iteratively shorten the trail
    const started = performance.now();
    // pan reports violations in its output; a non-zero exit without a verdict is a failure.
    let stdout: string;
    try {
      stdout = (await run(pan, panArgs, { cwd: dir, timeout, maxBuffer: 64 * 1024 * 1024 })).stdout;
    } catch (error) {
      const out = (error as { stdout?: string }).stdout ?? "";
      if (!/errors: \d+/.test(out)) throw new Error(`pan failed: ${out}`, { cause: error });
      stdout = out;
    }
    const seconds = (performance.now() - started) / 1000;
    const errors = num(stdout, /errors: (\d+)/);
    const violation =
      stdout.match(/pan:\d+: (.+?) \(at depth \d+\)/)?.[1] ??
      stdout.match(/pan:\d+: (acceptance cycle|non-progress cycle|invalid end state).*/)?.[1] ??
      null;
    let trail: string[] = [];
    if (errors > 0) {
      // The model prints one line per step that matters (generated transitions and actors).
      const replay = await run("spin", [...defines, "-t", m.file], {
        cwd: dir,
        timeout,
        maxBuffer: 64 * 1024 * 1024,
      });
      trail = replay.stdout
        .split("\n")
        .map((l) => l.trim())
        .filter((l) =>
          /^\[\d+\]|^<<<<<|^spin: (text of failed|trail ends)|assertion violated/.test(l),
        );
    }
    const unreached = [...stdout.matchAll(/^\s+([\w-]+\.pml:\d+), state \d+, "(.*)"$/gm)].map(
      (m) => `${m[1]} ${m[2]}`,
    );
    return {
      errors,
      complete: !/Search not completed|max search depth too small|reached -DMEMLIM/.test(stdout),
      states: num(stdout, /(\d+) states, stored/),
      transitions: num(stdout, /(\d+) transitions \(=/),
      depth: num(stdout, /depth reached (\d+)/),
      memoryMb: num(stdout, /([\d.]+)\s+total actual memory usage/),
      seconds: num(stdout, /elapsed time ([\d.e+]+) seconds/) || seconds,
      violation,
      cached,
      trail,
      unreached,
      output: stdout,
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function summary(name: string, r: CheckResult): string {
  const verdict = r.errors === 0 ? "holds" : `VIOLATED: ${r.violation ?? "error"}`;
  return `${name.padEnd(48)} ${verdict.padEnd(12)} states ${r.states.toLocaleString("en")}, depth ${r.depth}, ${r.memoryMb} MB, ${r.seconds.toFixed(1)} s${r.complete ? "" : " (INCOMPLETE)"}`;
}

type Report = (name: string, r: CheckResult, wantErrors: boolean) => void;

/** The pool model on the profiles named, then each of its mutants on the bounded profile. */
async function poolChecks(report: Report, profiles: (keyof typeof POOL_PROFILES)[]): Promise<void> {
  for (const name of profiles) {
    const bounds = POOL_PROFILES[name];
    console.log(`\npool model, profile "${name}": ${JSON.stringify(bounds)}`);
    report("safety", await checkModel({ model: "pool", bounds, mode: "safety" }), false);
    report("liveness", await checkModel({ model: "pool", bounds, mode: "liveness" }), false);
  }
  console.log(`\npool mutants, profile "bounded" (shortest counterexample):`);
  for (const [name, m] of Object.entries(poolMutants)) {
    const r = await checkModel({
      model: "pool",
      bounds: POOL_PROFILES.bounded,
      mode: "safety",
      poolTable: m.table,
      shortest: true,
      ...(m.flags ? { flags: m.flags } : {}),
    });
    report(`pool mutant: ${name}`, r, true);
  }
}

/**
 * `npm run spec:check [-- <profile>...]`: the job model on each profile, then every mutant, then
 * the pool model (the full run: each of its profiles; named profiles: its bounded one) and its
 * mutants. `-- pool`: the pool model alone, every profile.
 */
async function main(): Promise<void> {
  const args = process.argv.slice(2);
  let failed = false;
  const report: Report = (name, r, wantErrors) => {
    console.log(summary(name, r));
    // A mutant's search stops at its counterexample; the real model's must cover everything.
    if (wantErrors ? r.errors === 0 : r.errors > 0 || !r.complete) failed = true;
    if (r.errors > 0) console.log(r.trail.map((l) => `    ${l}`).join("\n"));
  };
  const allPool = Object.keys(POOL_PROFILES) as (keyof typeof POOL_PROFILES)[];
  if (args.length === 1 && args[0] === "pool") {
    await poolChecks(report, allPool);
    if (failed) process.exitCode = 1;
    return;
  }
  const names = (args.length > 0 ? args : ["full"]).flatMap((n) =>
    n === "full" ? ["two workers", "duplicates", "skew and gate"] : [n],
  ) as (keyof typeof PROFILES)[];
  for (const name of names) {
    const bounds = PROFILES[name];
    if (!bounds) throw new Error(`unknown profile ${name}: ${Object.keys(PROFILES).join(", ")}`);
    console.log(`\nprofile "${name}": ${JSON.stringify(bounds)}`);
    report("safety", await checkModel({ bounds, mode: "safety" }), false);
    report("liveness (weak fairness)", await checkModel({ bounds, mode: "liveness" }), false);
    report(
      "liveness without the max age",
      await checkModel({ bounds, mode: "liveness", flags: ["NO_MAX_AGE"] }),
      false,
    );
  }
  // A metered plan (tokens or money) on the bounded profile: its state space is about 2.5 times
  // the job plan's (the model's reasoning chosen both ways, the amounts consumed and billed).
  console.log(`\nmetered plan, profile "bounded": ${JSON.stringify(PROFILES.bounded)}`);
  const metered = { bounds: PROFILES.bounded, flags: ["METERED"] };
  report("safety", await checkModel({ ...metered, mode: "safety" }), false);
  report("liveness (weak fairness)", await checkModel({ ...metered, mode: "liveness" }), false);
  console.log(`\nmutants, profile "bounded" (shortest counterexample):`);
  for (const [name, m] of Object.entries(mutants)) {
    const r = await checkModel({
      bounds: PROFILES.bounded,
      mode: m.mode,
      table: m.table,
      shortest: true,
      ...(m.flags ? { flags: m.flags } : {}),
    });
    report(`mutant: ${name}`, r, true);
  }
  // A known gap, kept visible: the failure callback of the job's *current* message may still
  // end a job another message's live worker runs (docs/RELIABILITY.md, "Model checking"). When
  // a change closes it, this line fails: update the document and drop STRICT_CLAIM's exception.
  console.log(`\nknown gap, profile "bounded" (shortest counterexample):`);
  report(
    "no live claim taken by any failure callback",
    await checkModel({
      bounds: PROFILES.bounded,
      mode: "safety",
      flags: ["STRICT_CLAIM"],
      shortest: true,
    }),
    true,
  );
  await poolChecks(report, args.length === 0 || args.includes("full") ? allPool : ["bounded"]);
  if (failed) process.exitCode = 1;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  await main();
}
