/**
 * The README's commands, run as written against a local stack serving the built artifact
 * (test/unit/readme-commands.test.ts checks that every command the README shows is run here,
 * in test/e2e/dev-command.test.ts or by CI, or says why it cannot run offline). Each command is
 * taken from README.md (test/support/readme.ts) and run by bash, or, for SQL, by the `pg` client
 * as the SQL editor would run it. Only what a reader fills in changes: the address (the stack is
 * on free ports, not 3000; `https://<app>` is the stack's app), `<id>`, `<uuid>`, `<plan>`, and
 * `$CRON_SECRET` comes from the stack's environment.
 */
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { assert, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";
import { readmeCommand, readmeCommands, sh } from "../support/readme.ts";
import { alertsAbout, apiAs, until, useStack } from "../support/stack.ts";

const fixture = useStack();

/** The README's deployed app, here: the stack's app URL. */
const here = (command: string) => command.replaceAll("https://<app>", fixture.stack.urls.app);

/** The README's way to add the cron secret to a check: `-H "Authorization: Bearer $CRON_SECRET"`. */
const BEARER = '-H "Authorization: Bearer $CRON_SECRET"';

test("the README's quick start works as written: a token, a job that succeeds, the usage", async () => {
  const { stack } = fixture;
  const local = "http://127.0.0.1:3000";
  const commands = readmeCommands().filter(
    (c) =>
      c.startsWith("TOKEN=$(npm run -s dev:token") ||
      c.startsWith(`curl -s -X POST ${local}`) ||
      c.startsWith(`curl -s ${local}`),
  );
  expect(commands.map((c) => c.split(" ").slice(0, 3).join(" "))).toEqual([
    "TOKEN=$(npm run -s",
    "curl -s -X",
    "curl -s http://127.0.0.1:3000/api/jobs/<id>",
    "curl -s http://127.0.0.1:3000/api/usage",
  ]);
  const env: Record<string, string> = {
    DEV_DATABASE_URL: stack.urls.postgres,
    SUPABASE_JWT_SECRET: stack.env.SUPABASE_JWT_SECRET ?? "",
  };
  const [token, enqueue, poll, usage] = commands.map((c) =>
    c.replaceAll(local, stack.urls.app),
  ) as [string, string, string, string];
  // The first line is run once, as a reader would; its TOKEN stays set for the others.
  env.TOKEN = (await sh(`${token}\nprintf %s "$TOKEN"`, env)).trim();
  const created = JSON.parse(await sh(enqueue, env)) as { job: { id: string } };
  expect(created.job).toMatchObject({ status: "queued", prompt: "Write a haiku about queues" });

  const deadline = Date.now() + 20_000;
  let job: { status: string; output?: string } = { status: "queued" };
  while (Date.now() < deadline && job.status !== "succeeded") {
    const polled = await sh(poll.replace("<id>", created.job.id), env);
    job =
      (JSON.parse(polled) as { job?: typeof job }).job ?? assert.fail(`poll answered ${polled}`);
    if (job.status !== "succeeded") await new Promise((r) => setTimeout(r, 200));
  }
  expect(job.status).toBe("succeeded");
  expect(job.output).toContain("Write a haiku about queues");
  expect(JSON.parse(await sh(usage, env))).toMatchObject({ plan: "pro", used: 1 });
});

test("the README's operator lines: a token with the operator role reads the operator page's data; a user's token does not", async () => {
  const { stack } = fixture;
  const local = "http://127.0.0.1:3000";
  const token = readmeCommand("OPS_TOKEN=$(npm run -s dev:token");
  const metrics = readmeCommand(`curl -s "${local}/api/ops/metrics`).replaceAll(
    local,
    stack.urls.app,
  );
  const env: Record<string, string> = { DEV_DATABASE_URL: stack.urls.postgres };
  env.OPS_TOKEN = (await sh(`${token}\nprintf %s "$OPS_TOKEN"`, env)).trim();
  const body = JSON.parse(await sh(metrics, env)) as { window?: string; now?: unknown };
  expect(body.window).toBe("hour");
  expect(body.now).toMatchObject({ driftRows: 0 });
  // The same request with a token without the role: 403, no data.
  env.OPS_TOKEN = (await sh("npm run -s dev:token", env)).trim();
  const refused = JSON.parse(await sh(metrics, env)) as { error?: { code: string } };
  expect(refused).toEqual({ error: expect.objectContaining({ code: "forbidden" }) });
});

test("the README's after-the-first-deploy checks: health, security headers, the sweeper's bearer, no drift, an alert for a job with no message", async () => {
  const { stack } = fixture;
  const env = { CRON_SECRET: stack.env.CRON_SECRET ?? assert.fail("no CRON_SECRET") };
  // `-w` only prints the status after the body, so the test can read it.
  const status = " -w '\\n%{http_code}'";
  const answer = async (command: string) => {
    const out = (await sh(command + status, env)).split("\n");
    return { status: out.pop(), body: out.join("\n") };
  };

  const health = here(readmeCommand("curl https://<app>/api/health"));
  expect(await answer(health)).toEqual({ status: "200", body: '{"status":"ok"}' });
  const operator = await answer(`${health} ${BEARER}`);
  expect(operator.status).toBe("200");
  expect(JSON.parse(operator.body)).toEqual({ status: "ok", database: "ok", redis: "ok" });

  const headers = (await sh(here(readmeCommand("curl -sI https://<app>/")), env)).toLowerCase();
  expect(headers).toMatch(/^http\/1\.1 200/);
  expect(headers).toMatch(/^content-security-policy: [^\n]*frame-ancestors 'none'/m);
  expect(headers).toMatch(/^x-content-type-options: nosniff\r?$/m);
  expect(headers).toMatch(/^referrer-policy: no-referrer\r?$/m);

  const sweep = here(readmeCommand("curl -i https://<app>/api/cron/sweep"));
  expect(await sh(sweep, env)).toMatch(/^HTTP\/1\.1 401/);
  const swept = await sh(`${sweep} ${BEARER}`, env);
  expect(swept).toMatch(/^HTTP\/1\.1 200/);
  expect(JSON.parse(swept.split(/\r?\n\r?\n/)[1] ?? "")).toMatchObject({ failed: {} });

  const drift = readmeCommand("select * from quota_drift");
  expect((await stack.sql.query(drift)).rows).toEqual([]);

  // The alert check: a job enqueued in SQL has no message. The stack's undelivered window is
  // the smallest allowed (SWEEP_UNDELIVERED_AFTER_SECONDS=60): the job's queued_at is moved back
  // past it instead of waiting a minute; then the README's sweep (the cron's call) republishes it.
  expect(stack.env.SWEEP_UNDELIVERED_AFTER_SECONDS).toBe("60");
  const user = await stack.signIn({ plan: "free" });
  const enqueue = readmeCommand("select enqueue_job(");
  const { rows } = await stack.sql.query<{ enqueue_job: { outcome: string; job: { id: string } } }>(
    enqueue.replace("<a user id>", user.userId),
  );
  const job = rows[0]?.enqueue_job ?? assert.fail("enqueue_job answered nothing");
  expect(job.outcome).toBe("enqueued");
  await stack.sql.query(
    "update public.generation_jobs set queued_at = now() - interval '61 seconds' where id = $1",
    [job.job.id],
  );
  const republished = await sh(`${sweep} ${BEARER}`, env);
  expect(JSON.parse(republished.split(/\r?\n\r?\n/)[1] ?? "")).toMatchObject({ republished: 1 });
  const alerts = await until(
    async () => alertsAbout(stack, "republished 1", "stuck_jobs"),
    (found) => found.length > 0,
    { what: "a stuck_jobs alert at the webhook" },
  );
  expect(alerts).toHaveLength(1);
  // Republished, the job runs, and the quota is still whole.
  const api = apiAs(stack, user.accessToken);
  expect(await api.waitTerminal(job.job.id)).toMatchObject({ status: "succeeded" });
  expect((await stack.sql.query(drift)).rows).toEqual([]);
});

test("the README's SQL for plans: the insert puts a user on pro, the update gives anonymous users a plan", async () => {
  const { stack } = fixture;
  // A fresh user with no plan row: free, until the README's insert.
  const user = await stack.signIn({ plan: "free" });
  const api = apiAs(stack, user.accessToken);
  expect((await api.usage()).body).toMatchObject({ plan: "free" });
  const insert = readmeCommand("insert into user_plans");
  await stack.sql.query(insert.replace("<uuid>", user.userId));
  expect((await api.usage()).body).toMatchObject({ plan: "pro", used: 0 });

  // The update, in a transaction that is rolled back (the plans are shared by every test): an
  // anonymous sign-in is on no plan ('none': no units) before it, and on the named plan after.
  const update = readmeCommand("update plans set for_anonymous_users = true");
  const client = await stack.sql.connect();
  try {
    await client.query("begin");
    const anonymous = randomUUID();
    await client.query("insert into auth.users (id, is_anonymous) values ($1, true)", [anonymous]);
    const planOf = async () =>
      (await client.query<{ id: string | null }>("select (private.plan_for($1)).id", [anonymous]))
        .rows[0]?.id;
    expect(await planOf()).toBe("none");
    const updated = await client.query(update.replace("<plan>", "free"));
    expect(updated.rowCount).toBe(1);
    expect(await planOf()).toBe("free");
  } finally {
    await client.query("rollback");
    client.release();
  }
});

test("the README's `npx supabase db push --include-seed` (with --db-url for the local database) is what made the stack's database: run again, it has nothing to push", async () => {
  const { stack } = fixture;
  const push = readmeCommand("npx supabase db push");
  expect(push).toBe("npx supabase db push --include-seed");
  // The stack's database was made by dev/postgres/migrate.ts with the same command.
  const migrate = readFileSync(join(root, "dev", "postgres", "migrate.ts"), "utf8");
  expect(migrate).toContain('["db", "push", "--db-url", url.href, "--include-seed", "--yes"]');
  const url = new URL(stack.urls.postgres);
  url.searchParams.set("sslmode", "disable");
  const before = await stack.sql.query("select version from supabase_migrations.schema_migrations");
  const out = await sh(`${push} --db-url "$DB_URL" 2>&1`, { DB_URL: url.href, DO_NOT_TRACK: "1" });
  expect(out).toMatch(/up to date/i);
  const after = await stack.sql.query("select version from supabase_migrations.schema_migrations");
  expect(after.rows).toEqual(before.rows);
});
