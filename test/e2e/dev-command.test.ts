/**
 * `npm run dev`, as the README and docs/FAILURE-PATHS.md run it (each with variables set in
 * front of it): it comes up, says where the app is, the app answers with the configuration the
 * variables make, and Ctrl-C stops everything. Each runs in a process group of its own, as a
 * terminal's foreground job, and Ctrl-C is SIGINT to that group, as a terminal sends it.
 * `DEV_PORTS=any` and `DEV_DATA_DIR` (dev/cli.ts) keep it off the design's ports and `.data/`,
 * which a developer's own `npm run dev` may be using.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, expect, test } from "vitest";
import { portIsFree } from "../../dev/ports.ts";
import { root } from "../../dev/postgres/migrate.ts";
import { LOCAL_VALUES } from "../../dev/stack.ts";
import { failurePathCommands, readmeCommand, readmeCommands, sh } from "../support/readme.ts";
import { until } from "../support/stack.ts";

let dev: ChildProcess | undefined;
let dataDir = "";

/** Whether any process of the group is still alive. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

afterEach(async () => {
  // Only when a test failed before its Ctrl-C stopped it.
  if (dev?.pid && groupAlive(dev.pid)) process.kill(-dev.pid, "SIGKILL");
  dev = undefined;
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
  dataDir = "";
}, 30_000);

/**
 * Starts `command` in a process group of its own, on free ports and a temp data dir, and waits
 * until it has printed its banner or exited. `out()` is everything it printed so far.
 */
async function startDev(command: string) {
  dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-dev-"));
  const child = spawn("bash", ["-c", command], {
    cwd: root,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, DEV_PORTS: "any", DEV_DATA_DIR: dataDir },
  });
  dev = child;
  let out = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    out += chunk.toString();
  });
  child.stderr?.on("data", (chunk: Buffer) => {
    out += chunk.toString();
  });
  const exited = new Promise<string>((resolve) =>
    child.on("exit", (code, signal) => resolve(signal ?? `exit ${code}`)),
  );
  // 'exit' can come before the last of what the process printed has been read: 'close' comes
  // once its output streams have ended.
  const closed = new Promise<void>((resolve) => child.on("close", () => resolve()));
  await until(
    async () => out,
    (text) => text.includes("Ctrl-C stops everything.") || child.exitCode !== null,
    { timeoutMs: 90_000, intervalMs: 200, what: `the banner of ${command}` },
  );
  return { pgid: child.pid ?? 0, out: () => out, exited, closed };
}

/**
 * Runs `command` (an `npm run dev` line) until its banner, calls `check` with the app's and
 * Postgres's URLs, then Ctrl-C: it must stop, and leave no process and no port behind.
 */
async function runDev(
  command: string,
  check: (urls: { app: string; postgres: string }) => Promise<void>,
): Promise<void> {
  const started = Date.now();
  const { pgid, out: printed, exited, closed } = await startDev(command);
  let out = printed();
  const upInMs = Date.now() - started;
  expect(out).toContain("quota-jobs: the whole system is up in");
  expect(out).toMatch(/migrations \(supabase db push\): [1-9]\d* applied now/);
  // It names the data folder it really uses (DEV_DATA_DIR here), not the default `.data/`.
  expect(out).toContain(`already in the kept database (${dataDir})`);
  expect(out).not.toContain(".data/");
  // Each variable set in front of the command is in the app's environment.
  for (const [, name, value = ""] of command.matchAll(/(?:^| )([A-Z][A-Z0-9_]*)=(\S*)/g))
    expect(out).toContain(`    ${name}=${value.length > 8 ? value.slice(0, 6) : value}`);
  const app = /app \(\.vercel\/output\) +(http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1] ?? "";
  const postgres = /Postgres +(postgres:\/\/\S+)/.exec(out)?.[1] ?? "";
  expect(app).not.toBe("");
  expect(postgres).not.toBe("");

  const health = await fetch(`${app}/api/health`);
  expect(health.status).toBe(200);
  expect(await health.json()).toEqual({ status: "ok" });
  // With the cron secret the app checks its dependencies, which also proves its configuration
  // (the variables set in front of the command included) is valid: an invalid one answers 500.
  const operator = await fetch(`${app}/api/health`, {
    headers: { authorization: `Bearer ${LOCAL_VALUES.cronSecret}` },
  });
  expect(await operator.json()).toEqual({ status: "ok", database: "ok", redis: "ok" });
  await check({ app, postgres });

  process.kill(-pgid, "SIGINT");
  const ended = await Promise.race([
    exited,
    new Promise<string>((resolve) => setTimeout(() => resolve("still running after 30 s"), 30_000)),
  ]);
  // All it printed before it ended, read to the end (bounded: a process left holding the output
  // open is the check below's to find).
  await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 5_000))]);
  out = printed();
  // npm ends itself with the signal its script got (a shell shows 130), once the script is done.
  expect(["exit 0", "SIGINT"], out.slice(-2000)).toContain(ended);
  expect(out).toContain("SIGINT: stopping the stack...");
  expect(out).toContain("stopped.");
  // Nothing left: no process of the group (Postgres, redis-server, the app's process, the
  // servers), and the app's and Postgres's ports free again.
  await until(
    async () => groupAlive(pgid),
    (alive) => !alive,
    { timeoutMs: 10_000, what: "every process of npm run dev to exit" },
  );
  expect(await portIsFree(Number(new URL(app).port))).toBe(true);
  expect(await portIsFree(Number(new URL(postgres).port))).toBe(true);
  process.stderr.write(`${command}: up in ${(upInMs / 1000).toFixed(1)} s\n`);
}

test("`npm run dev`, as the README runs it: up with its banner, the app healthy, Ctrl-C leaves nothing running", async () => {
  expect(readmeCommands()).toContain("npm run dev");
  const command = readmeCommand("JOB_LEASE_SECONDS=");
  expect(command).toMatch(/^JOB_LEASE_SECONDS=\d+ npm run dev$/);
  await runDev(command, async () => {});
}, 150_000);

test.each(
  failurePathCommands().filter(
    (c) => /^([A-Z_]+=\S+ )+npm run dev$/.test(c) && !c.startsWith("QSTASH_"),
  ),
)(
  "`npm run dev` with the tunables docs/FAILURE-PATHS.md sets: %s",
  async (command) => {
    await runDev(command, async () => {});
  },
  150_000,
);

test("`npm run dev` with QStash unreachable, as docs/FAILURE-PATHS.md starts it: POST /api/jobs answers 503 unavailable", async () => {
  const command = readmeCommand("QSTASH_TOKEN=x", failurePathCommands());
  await runDev(command, async ({ app, postgres }) => {
    const token = (
      await sh("npm run -s dev:token -- --plan pro", { DEV_DATABASE_URL: postgres })
    ).trim();
    const refused = await fetch(`${app}/api/jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "Nobody will deliver this" }),
    });
    expect(refused.status).toBe(503);
    expect(Number(refused.headers.get("retry-after"))).toBeGreaterThan(0);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("unavailable");
  });
}, 150_000);

test("`npm run dev` with a configuration the app would refuse: it says which rule, exits 1 and leaves nothing running", async () => {
  const { pgid, out: printed, exited } = await startDev("JOB_LEASE_SECONDS=10 npm run dev");
  expect(printed(), "it came up with a configuration the app refuses").not.toContain(
    "Ctrl-C stops everything.",
  );
  const ended = await exited;
  const out = printed();
  expect(ended, out.slice(-2000)).toBe("exit 1");
  expect(out).toContain(
    "quota-jobs dev: the app's invalid configuration:\n  - JOB_LEASE_SECONDS must exceed WORKER_MAX_DURATION_SECONDS (300)",
  );
  await until(
    async () => groupAlive(pgid),
    (alive) => !alive,
    { timeoutMs: 10_000, what: "every process of npm run dev to exit" },
  );
}, 150_000);
