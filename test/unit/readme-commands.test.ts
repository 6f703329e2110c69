/**
 * Every command the README shows is run by a test, or is on a short list that says why it
 * cannot run here (no network but npm's registry, no Supabase/Vercel/QStash/OpenAI account).
 * The commands are extracted from README.md (test/support/readme.ts); a new one that is in
 * neither list fails this test until it is run by a test or its reason is written down.
 * docs/FAILURE-PATHS.md's commands are held to the same rule (all of them run).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";
import { failurePathCommands, readmeCommands } from "../support/readme.ts";

/** A file that runs the command, and the text in it that does (a test's name, or the line). */
type RunBy = { file: string; by: string };

const README_E2E = "test/e2e/readme.test.ts";
const DEV_E2E = "test/e2e/dev-command.test.ts";
const QUICK_START = "the README's quick start works as written";
const DEPLOY_CHECKS = "the README's after-the-first-deploy checks";
const OPERATOR = "the README's operator lines";
const SQL = "the README's SQL for plans";
const DB_PUSH = "the README's `npx supabase db push --include-seed`";
const DEV = "`npm run dev`, as the README runs it";

/** Run by test/e2e/readme.test.ts, in the test named `name`. */
const byReadmeTest = (name: string): RunBy => ({ file: README_E2E, by: name });

/** Run by a test (or by CI's entry script, which is what runs `npm ci` and `npm test`). */
const RUN: Record<string, RunBy> = {
  "npm ci": { file: ".ci/run", by: "npm ci --no-audit --no-fund" },
  "npm test": { file: ".ci/run", by: "\nnpm test\n" },
  "npm run dev": { file: DEV_E2E, by: DEV },
  "JOB_LEASE_SECONDS=400 npm run dev": { file: DEV_E2E, by: DEV },
  // Vercel's builder rewrites .vercel/output, which the other test files serve meanwhile: the
  // suite builds once, before any of them starts, with the function the `build` script runs
  // (dev/build.ts: `buildArtifact`, through `ensureBuild` when the sources changed).
  "npm run build": { file: "test/support/global-setup.ts", by: "ensureBuild(" },
  // The test compares the committed file with what the script's function writes.
  "npm run openapi": { file: "test/unit/openapi.test.ts", by: "renderOpenApi()" },
  "apt-get install -y redis-server": { file: ".ci/run", by: "apt-get install -y -qq" },
  "TOKEN=$(npm run -s dev:token -- --plan pro)": byReadmeTest(QUICK_START),
  // biome-ignore lint/complexity/useLiteralKeys: the command holds both kinds of quote
  [`curl -s -X POST http://127.0.0.1:3000/api/jobs -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{"prompt":"Write a haiku about queues"}'`]:
    byReadmeTest(QUICK_START),
  'curl -s http://127.0.0.1:3000/api/jobs/<id> -H "authorization: Bearer $TOKEN"':
    byReadmeTest(QUICK_START),
  'curl -s http://127.0.0.1:3000/api/usage -H "authorization: Bearer $TOKEN"':
    byReadmeTest(QUICK_START),
  "OPS_TOKEN=$(npm run -s dev:token -- --operator)": byReadmeTest(OPERATOR),
  'curl -s "http://127.0.0.1:3000/api/ops/metrics?window=hour" -H "authorization: Bearer $OPS_TOKEN"':
    byReadmeTest(OPERATOR),
  "npx supabase db push --include-seed": byReadmeTest(DB_PUSH),
  "supabase db push --include-seed": byReadmeTest(DB_PUSH),
  "supabase db push": byReadmeTest(DB_PUSH),
  // The script db:check runs, on a migrated database and on a drifted one.
  'npm run db:check -- "<the project\'s postgres connection string>"': {
    file: "test/db/db-check.test.ts",
    by: '"dev/db-check.ts"',
  },
  "insert into user_plans (user_id, plan_id) values ('<uuid>', 'pro')": byReadmeTest(SQL),
  "update plans set for_anonymous_users = true where id = '<plan>'": byReadmeTest(SQL),
  "curl https://<app>/api/health": byReadmeTest(DEPLOY_CHECKS),
  "curl -sI https://<app>/": byReadmeTest(DEPLOY_CHECKS),
  "curl -i https://<app>/api/cron/sweep": byReadmeTest(DEPLOY_CHECKS),
  "select * from quota_drift": byReadmeTest(DEPLOY_CHECKS),
  "select enqueue_job('<a user id>', 'alert check')": byReadmeTest(DEPLOY_CHECKS),
};

const SUPABASE_ACCOUNT = "needs a Supabase account and a hosted project";
const VERCEL_ACCOUNT = "needs a Vercel account and project";

/** Not run by any test, and why: each needs a hosted account or a service on the internet. */
const HOSTED: Record<string, string> = {
  "npx supabase login": SUPABASE_ACCOUNT,
  "npx supabase link --project-ref <project-ref>": SUPABASE_ACCOUNT,
  "npx supabase config push": SUPABASE_ACCOUNT,
  "npx vercel link": VERCEL_ACCOUNT,
  "npx vercel env add SUPABASE_URL production": VERCEL_ACCOUNT,
  "npx vercel --prod": VERCEL_ACCOUNT,
  'curl -X POST "https://qstash.upstash.io/v2/schedules/$APP_URL/api/cron/sweep" -H "Authorization: Bearer $QSTASH_TOKEN" -H "Upstash-Cron: */5 * * * *" -H "Upstash-Method: GET" -H "Upstash-Forward-Authorization: Bearer $CRON_SECRET"':
    "needs an Upstash QStash account (a schedule on qstash.upstash.io)",
  "OPENAI_API_KEY=sk-... npm run dev": "needs an OpenAI API key (the real model)",
  "QSTASH_TOKEN=... QSTASH_CURRENT_SIGNING_KEY=... QSTASH_NEXT_SIGNING_KEY=... APP_URL=https://<tunnel> npm run dev":
    "needs an Upstash QStash account and a public tunnel to this machine",
};

/** Runnable offline, but not from inside the suite, and why. */
const NOT_IN_SUITE: Record<string, string> = {
  "npx vitest run test/e2e":
    "is the test runner on a part of the suite: `npm test` (run by .ci/run) runs the same vitest over every file, test/e2e included",
  "npm run spec:check":
    "the full model check takes about 16 minutes, the organization pool's about 7 of them (docs/RELIABILITY.md); test/spec/check.test.ts runs the same checker (spec/check.ts) on the bounded profile",
};

const PATHS_E2E = "test/e2e/failure-paths-doc.test.ts";

/** docs/FAILURE-PATHS.md: each command and the test that runs it. */
const FAILURE_PATHS_RUN: Record<string, RunBy> = {
  "TOKEN=$(npm run -s dev:token -- --plan pro)": { file: PATHS_E2E, by: "model 500" },
  "TOKEN=$(npm run -s dev:token -- --plan free)": { file: PATHS_E2E, by: "past the plan's bound" },
  "QDEV=eyJVc2VySUQiOiJkZWZhdWx0VXNlciIsIlBhc3N3b3JkIjoiZGVmYXVsdFBhc3N3b3JkIn0=": {
    file: PATHS_E2E,
    by: "the doc's DLQ curl",
  },
  // biome-ignore lint/complexity/useLiteralKeys: the command holds both kinds of quote
  [`curl -s -X POST http://127.0.0.1:3000/api/jobs -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' -d '{"prompt":"Write a haiku about queues [fake:server_error]"}'`]:
    { file: PATHS_E2E, by: "the doc's POST fails" },
  "psql postgres://postgres:postgres@127.0.0.1:54322/postgres -c \"select enqueue_job('<user id>', 'lost message')\"":
    { file: PATHS_E2E, by: "the doc's two psql lines" },
  "psql postgres://postgres:postgres@127.0.0.1:54322/postgres -c \"update generation_jobs set queued_at = now() - interval '20 minutes' where status = 'queued'\"":
    { file: PATHS_E2E, by: "the doc's two psql lines" },
  "npm run dev": { file: DEV_E2E, by: DEV },
  'curl -s -X POST http://127.0.0.1:8787/__fake/fail -d \'{"kind":"rate_limit_exceeded","count":1,"retryAfterSeconds":5}\'':
    { file: PATHS_E2E, by: "the doc's one-shot 429 switch" },
  "ALERT_THROTTLE_SECONDS=60 npm run dev": {
    file: DEV_E2E,
    by: "the tunables docs/FAILURE-PATHS.md sets",
  },
  'curl -s http://127.0.0.1:8080/v2/dlq -H "authorization: Bearer $QDEV"': {
    file: PATHS_E2E,
    by: "the doc's DLQ curl",
  },
  'curl -s -X DELETE http://127.0.0.1:3000/api/jobs/$J -H "authorization: Bearer $TOKEN"': {
    file: PATHS_E2E,
    by: "the doc's DELETE refunds once",
  },
  "WORKER_MAX_DURATION_SECONDS=60 SWEEP_LEASE_GRACE_SECONDS=0 npm run dev": {
    file: DEV_E2E,
    by: "the tunables docs/FAILURE-PATHS.md sets",
  },
  // biome-ignore lint/complexity/useLiteralKeys: the command holds both kinds of quote
  [`curl -s -X POST "http://127.0.0.1:8080/v2/publish/http://127.0.0.1:3000/api/worker" -H "authorization: Bearer $QDEV" -H 'content-type: application/json' -d "{\\"jobId\\":\\"$J\\"}"`]:
    { file: PATHS_E2E, by: "the doc's QStash publish redelivers" },
  "QSTASH_TOKEN=x QSTASH_URL=http://127.0.0.1:9 QSTASH_CURRENT_SIGNING_KEY=x QSTASH_NEXT_SIGNING_KEY=x npm run dev":
    { file: DEV_E2E, by: "with QStash unreachable, as docs/FAILURE-PATHS.md starts it" },
  'curl -s http://127.0.0.1:3000/api/cron/sweep -H "authorization: Bearer local-dev-cron-secret-0123456789"':
    { file: PATHS_E2E, by: "its sweep curl republishes" },
};

/** Each runner named exists and has the text (a test's name, or a line) that runs the command. */
function expectRunners(map: Record<string, RunBy>): void {
  for (const [command, { file, by }] of Object.entries(map)) {
    const path = join(root, file);
    expect(existsSync(path), `${command}: ${file} does not exist`).toBe(true);
    expect(readFileSync(path, "utf8"), `${command}: ${file} has no ${by}`).toContain(by);
  }
}

describe("every command the README shows is run by a test, or says why not", () => {
  const commands = readmeCommands();

  test("the extraction finds the README's commands (fenced sh blocks and inline commands)", () => {
    expect(commands.length).toBeGreaterThan(25);
    expect(commands).toContain("npm ci");
    expect(commands).toContain("npx vercel --prod");
    expect(commands).toContain("select * from quota_drift");
  });

  test("each README command is run by a named test, or is listed with its reason", () => {
    const unaccounted = commands.filter(
      (c) => !(c in RUN) && !(c in HOSTED) && !(c in NOT_IN_SUITE),
    );
    expect(
      unaccounted,
      "README commands that no test runs and no list explains: run each in a test (test/e2e/readme.test.ts) and map it in RUN, or say in HOSTED why it cannot run offline",
    ).toEqual([]);
  });

  test("each list names only commands the README still shows, each in one list", () => {
    const listed = [...Object.keys(RUN), ...Object.keys(HOSTED), ...Object.keys(NOT_IN_SUITE)];
    expect(listed.filter((c) => !commands.includes(c))).toEqual([]);
    expect(new Set(listed).size).toBe(listed.length);
  });

  test("each named runner exists and has the test (or line) that runs the command", () => {
    expectRunners(RUN);
  });

  test("`npm run build` is dev/build.ts, whose entry is the buildArtifact that ensureBuild runs", () => {
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      scripts: Record<string, string>;
    };
    expect(pkg.scripts.build).toBe("tsx dev/build.ts");
    const build = readFileSync(join(root, "dev", "build.ts"), "utf8");
    expect(build).toMatch(/export function ensureBuild[\s\S]*buildArtifact\(/);
    expect(build).toMatch(
      /process\.argv\[1\] === fileURLToPath\(import\.meta\.url\)[\s\S]*buildArtifact\(\)/,
    );
  });
});

describe("every command docs/FAILURE-PATHS.md shows is run by a test", () => {
  const commands = failurePathCommands();

  test("each is run by a named test, and the list names only commands the doc shows", () => {
    expect(commands.length).toBeGreaterThan(10);
    expect(
      commands.filter((c) => !(c in FAILURE_PATHS_RUN)),
      "docs/FAILURE-PATHS.md commands that no test runs: run each in test/e2e/failure-paths-doc.test.ts and map it here",
    ).toEqual([]);
    expect(Object.keys(FAILURE_PATHS_RUN).filter((c) => !commands.includes(c))).toEqual([]);
  });

  test("each named runner exists and has the test that runs the command", () => {
    expectRunners(FAILURE_PATHS_RUN);
  });
});
