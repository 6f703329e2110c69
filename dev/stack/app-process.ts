/**
 * The app in a process of its own, as on Vercel: `dev/app-server.ts` on plain Node 22 with the
 * app's environment, serving the build's output. It can be killed mid-call and started again.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { root } from "../postgres/migrate.ts";
import { StackStartError } from "./preflight.ts";

export interface AppProcess {
  start(): Promise<void>;
  /** SIGTERM to stop it (SIGKILL after 5 s), SIGKILL for a crash. */
  stop(signal: NodeJS.Signals): Promise<void>;
}

export async function startAppProcess(
  port: number,
  env: Record<string, string>,
  databaseUrl: string,
  log: (line: string) => void,
  /** dev/auth's project file, for the dev sign-in's tokens. */
  authProjectFile?: string,
): Promise<AppProcess> {
  let child: ChildProcess | undefined;
  const app: AppProcess = {
    async start() {
      child = await spawnApp(port, env, databaseUrl, log, authProjectFile);
    },
    async stop(signal) {
      const c = child;
      child = undefined;
      if (!c || c.exitCode !== null || c.signalCode !== null) return;
      const gone = new Promise<void>((resolve) => c.once("exit", () => resolve()));
      c.kill(signal);
      const timer = setTimeout(() => c.kill("SIGKILL"), 5_000);
      await gone;
      clearTimeout(timer);
    },
  };
  await app.start();
  return app;
}

const APP_SERVER = join(root, "dev", "app-server.ts");
/**
 * Node 22 from the `node` devDependency (the runtime the build targets), not whichever node
 * runs this process; plain Node, no tsx, so the functions load as they would on Vercel.
 */
const NODE = join(root, "node_modules", "node", "bin", "node");
/** What a child app process may inherit from ours besides its own environment. */
const INHERITED = ["PATH", "HOME", "TMPDIR", "LANG", "TZ"];

async function spawnApp(
  port: number,
  env: Record<string, string>,
  databaseUrl: string,
  log: (line: string) => void,
  authProjectFile: string | undefined,
): Promise<ChildProcess> {
  const inherited = Object.fromEntries(
    INHERITED.flatMap((k) => (process.env[k] ? [[k, process.env[k]]] : [])),
  );
  const child = spawn(NODE, [APP_SERVER], {
    cwd: root,
    env: {
      ...inherited,
      ...env,
      PORT: String(port),
      DEV_DATABASE_URL: databaseUrl,
      ...(authProjectFile ? { DEV_AUTH_PROJECT_FILE: authProjectFile } : {}),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);
  child.once("exit", () => process.off("exit", killOnExit));
  const { stdout, stderr: errors } = child;
  if (!stdout || !errors) throw new Error("the app process has no output pipes");
  let stderr = "";
  errors.on("data", (c: Buffer) => {
    stderr = (stderr + c.toString("utf8")).slice(-4_000);
  });
  createInterface({ input: errors }).on("line", (line) => log(line));
  const lines = createInterface({ input: stdout });
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`the app process did not start within 30 s: ${stderr.trim()}`));
    }, 30_000);
    const onExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new StackStartError(`the app process exited (code ${code}): ${stderr.trim()}`));
    };
    child.once("exit", onExit);
    lines.on("line", (line) => {
      if (line.startsWith("app-server ready")) {
        clearTimeout(timer);
        child.off("exit", onExit);
        resolve();
      } else {
        log(line);
      }
    });
  });
  return child;
}
