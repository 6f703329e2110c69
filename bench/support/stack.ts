/**
 * Starts bench/support/stack-child.ts in a child process and talks to it: the environment a
 * deployment would set, the database URL for setup, and the stand-ins' own counters.
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

export interface StandInStats {
  rpcCalls: number;
  qstash: { published: number; delivered: number; pending: number; inFlight: number; dlq: number };
  modelCalls: number;
  sink: { worker: number; dlq: number };
}

export interface BenchStack {
  env: Record<string, string>;
  databaseUrl: string;
  postgres: string;
  appUrl: string;
  stats(): Promise<StandInStats>;
  stop(): Promise<void>;
}

export async function startBenchStack(options: { rateLimit?: number } = {}): Promise<BenchStack> {
  const child = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      fileURLToPath(new URL("./stack-child.ts", import.meta.url)),
      String(options.rateLimit ?? 10),
    ],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const ready = await new Promise<{
    env: Record<string, string>;
    databaseUrl: string;
    postgres: string;
    appUrl: string;
  }>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    const timer = setTimeout(
      () => reject(new Error("bench stack did not start in 120 s")),
      120_000,
    );
    lines.on("line", (line) => {
      if (line.startsWith("READY ")) {
        clearTimeout(timer);
        resolve(JSON.parse(line.slice(6)));
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`bench stack exited with ${code}`));
    });
  });
  return {
    ...ready,
    async stats() {
      const res = await fetch(`${ready.appUrl}/__bench/stats`);
      return (await res.json()) as StandInStats;
    },
    async stop() {
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
    },
  };
}
