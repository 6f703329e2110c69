/**
 * What the machine spent while a measurement ran, so a latency figure says whether it was taken
 * alone: CPU seconds of this test run's processes (vitest's process tree, so the stack's app
 * process, PostgreSQL and redis-server too), of everything else on the machine, and stolen by
 * the hypervisor. Read from /proc (Linux); `undefined` where there is none.
 *
 * @example
 * const cpu = machineCpu();
 * await burst();
 * const { cpuSecondsOthers } = cpu?.stop() ?? {};
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";

/** USER_HZ: the unit of /proc's CPU times on every Linux architecture Node runs on. */
const TICKS_PER_SECOND = 100;

export interface MachineCpu {
  /** The 1-minute load average when the measurement started (as `uptime` prints it). */
  loadAverage1m: number;
  cores: number;
  seconds: number;
  /** This run's processes (alive at the end; all of the stack's are). */
  cpuSecondsThisRun: number;
  /** The machine's busy CPU less this run's: other people's builds and tests. */
  cpuSecondsOthers: number;
  cpuSecondsStolen: number;
}

/** Busy and stolen ticks of the whole machine (the first line of /proc/stat). */
function machineTicks(): { busy: number; steal: number } {
  const [user, nice, system, , , irq, softirq, steal] = readFileSync("/proc/stat", "utf8")
    .split("\n", 1)[0]
    ?.trim()
    .split(/\s+/)
    .slice(1)
    .map(Number) ?? [0, 0, 0, 0, 0, 0, 0, 0];
  return {
    busy: (user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0),
    steal: steal ?? 0,
  };
}

/** utime + stime of every process under `root` (itself included), by pid. */
function treeTicks(root: number): Map<number, number> {
  const stats = new Map<number, { ppid: number; ticks: number }>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${name}/stat`, "utf8");
    } catch {
      continue; // it exited meanwhile
    }
    // After the command's closing parenthesis: state, ppid, … utime (12th), stime (13th).
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    stats.set(Number(name), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) });
  }
  const mine = new Map<number, number>();
  for (const [pid, s] of stats) {
    for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
      if (p === root) {
        mine.set(pid, s.ticks);
        break;
      }
      p = stats.get(p)?.ppid ?? 0;
    }
  }
  return mine;
}

/** Starts measuring; `stop()` says what the machine spent since. */
export function machineCpu(): { stop(): MachineCpu } | undefined {
  if (!existsSync("/proc/stat")) return undefined;
  // vitest's main process: the worker running this file is one of its children.
  const root = process.ppid > 1 ? process.ppid : process.pid;
  const started = performance.now();
  const loadAverage1m = loadavg()[0] ?? 0;
  const machine0 = machineTicks();
  const tree0 = treeTicks(root);
  return {
    stop() {
      const machine1 = machineTicks();
      let mine = 0;
      for (const [pid, ticks] of treeTicks(root)) mine += ticks - (tree0.get(pid) ?? 0);
      const round = (ticks: number) => Math.round((ticks / TICKS_PER_SECOND) * 100) / 100;
      return {
        loadAverage1m: Math.round(loadAverage1m * 100) / 100,
        cores: availableParallelism(),
        seconds: Math.round((performance.now() - started) / 10) / 100,
        cpuSecondsThisRun: round(mine),
        cpuSecondsOthers: round(Math.max(0, machine1.busy - machine0.busy - mine)),
        cpuSecondsStolen: round(machine1.steal - machine0.steal),
      };
    },
  };
}
