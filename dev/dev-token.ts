/**
 * `npm run dev:token -- [--plan <plan>] [--user <uuid>] [--expires <seconds>] [--operator]`:
 * a signed access token for a local user, printed alone on stdout (so `TOKEN=$(npm run -s
 * dev:token)` works). `--operator` puts the operator role in the token's `app_metadata`, as the
 * service role would through Auth's admin API (docs/RUNBOOK.md#operators): the key to
 * `GET /api/ops/metrics`. `--plan` takes any plan of the database's `public.plans` (the seeded
 * ones: free, the default, pro, team, economy, ...). Creates the user in the RUNNING dev stack's
 * database (auth.users, and user_plans for any plan but free), signed by the running local
 * project's Auth stand-in (dev/auth/: ES256 on the default, new-shape project; HS256 with
 * `DEV_SUPABASE_SHAPE=legacy`). A command, never an API route: nothing here can ship.
 */
import { dirname } from "node:path";
import pg from "pg";
import { type ProjectFile, projectFilePath, readProject } from "./auth/index.ts";
import { parseSignIn, signInDevUser, UnknownPlan } from "./dev-users.ts";
import { DEFAULT_PORTS } from "./ports.ts";

function option(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i === -1 ? undefined : args[i + 1];
}

function fail(message: string): never {
  process.stderr.write(`dev:token: ${message}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
if (args.includes("--help")) {
  process.stdout.write(
    "usage: npm run -s dev:token -- [--plan <a plan id of public.plans>] [--user <uuid>] [--expires <seconds>] [--operator]\n",
  );
  process.exit(0);
}
const input = parseSignIn({
  ...(option(args, "--plan") ? { plan: option(args, "--plan") } : {}),
  ...(option(args, "--user") ? { userId: option(args, "--user") } : {}),
});
if (typeof input === "string") fail(input);
const expires = Number(option(args, "--expires") ?? 8 * 3600);
if (!Number.isInteger(expires) || expires < 1) fail("--expires must be a whole number of seconds");

// A dev command, not lib/: reading the environment directly is fine here.
const databaseUrl =
  process.env.DEV_DATABASE_URL ??
  `postgres://postgres:postgres@127.0.0.1:${DEFAULT_PORTS.postgres}/postgres`;
const db = new pg.Client({ connectionString: databaseUrl, connectionTimeoutMillis: 3_000 });
try {
  await db.connect();
} catch {
  fail(
    `no dev database at ${databaseUrl.replace(/:[^:@/]+@/, ":***@")}: start it with "npm run dev" first`,
  );
}
// The running stack's Auth stand-in wrote its project (shape, issuer, signing key) into its
// data folder, the one its database lives in (`<data>/postgres`): ask the database where.
let project: ProjectFile;
try {
  const { rows } = await db.query<{ dir: string }>(
    "select current_setting('data_directory') as dir",
  );
  project = await readProject(projectFilePath(dirname(rows[0]?.dir ?? "")));
} catch {
  await db.end();
  fail('the running database has no local Auth project beside it: start it with "npm run dev"');
}
try {
  const operator = args.includes("--operator");
  const session = await signInDevUser(db, {
    ...input,
    project,
    expiresInSeconds: expires,
    ...(operator ? { appMetadata: { role: "operator" } } : {}),
  });
  process.stderr.write(
    `user ${session.userId} (${session.plan}${operator ? ", operator" : ""}), token expires ${session.expiresAt}\n`,
  );
  process.stdout.write(`${session.accessToken}\n`);
} catch (error) {
  if (error instanceof UnknownPlan) fail(error.message);
  fail(`could not create the user: ${(error as Error).message}`);
} finally {
  await db.end();
}
