/**
 * A real `redis-server` (Debian's package) for the local stack and tests: loopback only, no
 * persistence (`--save "" --appendonly no`), gone when stopped.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { connect } from "node:net";
import { tmpdir } from "node:os";

export interface RedisServerOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  /** The executable to run. @default "redis-server" (looked up on PATH) */
  binary?: string;
  /** How long to wait for the first PING answer. @default 10_000 */
  startTimeoutMs?: number;
}

export interface RunningRedisServer {
  /** `redis://127.0.0.1:<port>` */
  url: string;
  port: number;
  stop(): Promise<void>;
}

export async function startRedisServer(options: RedisServerOptions): Promise<RunningRedisServer> {
  const host = options.host ?? "127.0.0.1";
  const { port } = options;
  const deadline = Date.now() + (options.startTimeoutMs ?? 10_000);
  const child = spawn(
    options.binary ?? "redis-server",
    [
      "--port",
      String(port),
      "--bind",
      host,
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      tmpdir(),
      "--daemonize",
      "no",
      "--logfile",
      "",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString("utf8")).slice(-8_000);
  };
  child.stdout?.on("data", collect);
  child.stderr?.on("data", collect);

  // Settles once: the spawn failed (no binary) or the process ended.
  const ended = new Promise<Error>((resolve) => {
    child.once("error", (error: NodeJS.ErrnoException) => {
      resolve(
        error.code === "ENOENT"
          ? new Error('redis-server not found: install it with "apt-get install -y redis-server"')
          : new Error(`redis-server could not start: ${error.message}`),
      );
    });
    child.once("exit", (code, signal) => {
      if (/address already in use/i.test(output)) {
        resolve(
          new Error(`redis-server could not listen on ${host}:${port}: the port is already in use`),
        );
      } else {
        const last = output.trim().split("\n").pop()?.trim() ?? "";
        resolve(
          new Error(
            `redis-server exited (${signal ?? `code ${code}`}) before answering PING${last ? `: ${last}` : ""}`,
          ),
        );
      }
    });
  });
  let exited = false;
  void ended.then(() => {
    exited = true;
  });
  const killOnExit = () => child.kill("SIGKILL");
  process.once("exit", killOnExit);

  // Poll until *our* process answers (checking its pid, so another server already on the
  // port is not mistaken for ours), the process ends, or the deadline passes.
  for (;;) {
    if (exited) {
      process.off("exit", killOnExit);
      throw await ended;
    }
    const pid = await serverPid(host, port).catch(() => undefined);
    if (pid !== undefined && pid === child.pid) break;
    if (Date.now() > deadline) {
      process.off("exit", killOnExit);
      await stopChild(child);
      throw new Error(`redis-server did not answer PING on ${host}:${port} within the deadline`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }

  return {
    url: `redis://${host}:${port}`,
    port,
    stop: async () => {
      process.off("exit", killOnExit);
      await stopChild(child);
    },
  };
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const gone = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
  await gone;
  clearTimeout(timer);
}

/** Asks the server on host:port for `INFO server` and returns its `process_id`. */
function serverPid(host: string, port: number): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let reply = "";
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error("timeout"));
    }, 1_000);
    const finish = (value: number | undefined, error?: Error) => {
      clearTimeout(timer);
      socket.destroy();
      if (error) reject(error);
      else resolve(value);
    };
    socket.on("error", (error) => finish(undefined, error));
    socket.on("connect", () => socket.write("*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"));
    socket.on("data", (chunk) => {
      reply += chunk.toString("utf8");
      // Loading or other error reply: not ready yet.
      if (reply.startsWith("-")) return finish(undefined, new Error(reply.trim()));
      const header = /^\$(\d+)\r\n/.exec(reply);
      if (!header?.[1]) return;
      const body = reply.slice(header[0].length);
      if (Buffer.byteLength(body) < Number(header[1])) return;
      const pid = /process_id:(\d+)/.exec(body)?.[1];
      finish(pid === undefined ? undefined : Number(pid));
    });
  });
}
