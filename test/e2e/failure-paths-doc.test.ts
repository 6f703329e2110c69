/**
 * docs/FAILURE-PATHS.md's commands, run as written against a local stack serving the built
 * artifact, each checked for what the doc says happens (test/unit/readme-commands.test.ts maps
 * every command of the doc to its test). Only the addresses change (the stack is on free ports:
 * 3000, 8080, 8787 and 54322 become the stack's app, QStash, model and Postgres), and what a
 * reader fills in: `$J`, `<user id>`, a prompt's marker. `psql -c "<sql>"` runs its SQL with the
 * `pg` client (the CI machine has no psql); the `npm run dev` lines are run by
 * test/e2e/dev-command.test.ts.
 */
import { expect, test } from "vitest";
import { DEV_TOKEN } from "../../dev/qstash/index.ts";
import { failurePathCommands, readmeCommand, sh } from "../support/readme.ts";
import { apiAs, events, refundEvents, useStack } from "../support/stack.ts";

const fixture = useStack();

const command = (prefix: string) => readmeCommand(prefix, failurePathCommands());

/** A doc command with the design's ports replaced by the stack's. */
function here(doc: string): string {
  const { urls } = fixture.stack;
  return doc
    .replaceAll("http://127.0.0.1:3000", urls.app)
    .replaceAll("http://127.0.0.1:8080", urls.qstash)
    .replaceAll("http://127.0.0.1:8787", urls.openai.replace(/\/v1$/, ""))
    .replaceAll("postgres://postgres:postgres@127.0.0.1:54322/postgres", urls.postgres);
}

/** The second terminal the doc sets up: TOKEN (of `plan`) and QDEV, as its first block does. */
async function secondTerminal(plan: "pro" | "free" = "pro"): Promise<Record<string, string>> {
  const { stack } = fixture;
  const env: Record<string, string> = {
    DEV_DATABASE_URL: stack.urls.postgres,
    SUPABASE_JWT_SECRET: stack.env.SUPABASE_JWT_SECRET ?? "",
  };
  const token = command(`TOKEN=$(npm run -s dev:token -- --plan ${plan})`);
  env.TOKEN = (await sh(`${token}\nprintf %s "$TOKEN"`, env)).trim();
  const qdev = command("QDEV=");
  env.QDEV = (await sh(`${qdev}\nprintf %s "$QDEV"`, env)).trim();
  expect(env.QDEV).toBe(DEV_TOKEN);
  return env;
}

/** The doc's POST, with `marker` in place of its `[fake:server_error]`; answers the job id. */
async function start(env: Record<string, string>, marker: string): Promise<string> {
  const post = command("curl -s -X POST http://127.0.0.1:3000/api/jobs");
  expect(post).toContain("[fake:server_error]");
  const answer = JSON.parse(await sh(here(post.replace("[fake:server_error]", marker)), env));
  expect(answer.job?.id, JSON.stringify(answer)).toBeTruthy();
  return answer.job.id as string;
}

const api = (env: Record<string, string>) => apiAs(fixture.stack, env.TOKEN ?? "");

test("FAILURE-PATHS model 500: the doc's POST fails after QStash's retry, refunded, and the doc's DLQ curl shows it", async () => {
  const env = await secondTerminal();
  const J = await start(env, "[fake:server_error]");
  expect(await api(env).waitTerminal(J)).toMatchObject({
    status: "failed",
    failureReason: "delivery_failed",
    quotaRefunded: true,
  });
  const dlq = JSON.parse(await sh(here(command("curl -s http://127.0.0.1:8080/v2/dlq")), env));
  expect(JSON.stringify(dlq.messages)).toContain(J);
});

test("FAILURE-PATHS provider rate limit: the doc's one-shot 429 switch, the job waits for the provider, then succeeds", async () => {
  const env = await secondTerminal();
  await sh(here(command("curl -s -X POST http://127.0.0.1:8787/__fake/fail")), env);
  const J = await start(env, "");
  await api(env).waitFor(
    J,
    (job) => job.phase === "waiting_for_provider",
    "waiting for the provider",
  );
  expect(await api(env).waitTerminal(J, 30_000)).toMatchObject({ status: "succeeded" });
});

test("FAILURE-PATHS cancel while it runs, and twice: the doc's DELETE refunds once, then answers 409 already_finished", async () => {
  const env = await secondTerminal();
  const J = await start(env, "[fake:tokens:5000] [fake:chunk_ms:100]");
  await api(env).waitFor(J, (job) => (job.partialOutput ?? "").length > 0, "partial output");
  const cancel = here(command("curl -s -X DELETE http://127.0.0.1:3000/api/jobs/$J"));
  const status = " -w '\\n%{http_code}'";
  const first = (await sh(cancel + status, { ...env, J })).split("\n");
  expect(first.pop()).toBe("200");
  expect(JSON.parse(first.join("\n"))).toMatchObject({
    job: { status: "canceled" },
    quotaRefunded: true,
  });
  const again = (await sh(cancel + status, { ...env, J })).split("\n");
  expect(again.pop()).toBe("409");
  expect(JSON.parse(again.join("\n")).error.code).toBe("already_finished");
  expect(await refundEvents(fixture.stack, J)).toBe(1);
});

test("FAILURE-PATHS cancel past the plan's bound: a free user's second running cancel is not refunded", async () => {
  const env = await secondTerminal("free");
  const cancel = here(command("curl -s -X DELETE http://127.0.0.1:3000/api/jobs/$J"));
  const running = (J: string) => api(env).waitFor(J, (job) => job.status === "running", "running");
  const first = await start(env, "[fake:slow:20000]");
  await running(first);
  expect(JSON.parse(await sh(cancel, { ...env, J: first }))).toMatchObject({
    quotaRefunded: true,
  });
  const second = await start(env, "[fake:slow:20000]");
  await running(second);
  expect((await api(env).job(second)).body.job).toMatchObject({ cancelRefunds: false });
  expect((await api(env).usage()).body).toMatchObject({
    runningCancelRefunds: { used: 1, limit: 1 },
  });
  expect(JSON.parse(await sh(cancel, { ...env, J: second }))).toMatchObject({
    job: { status: "canceled", refundWithheld: "running_cancel_limit" },
    quotaRefunded: false,
  });
  expect((await api(env).usage()).body).toMatchObject({ used: 1 });
});

/** `psql <url> -c "<sql>"` as the doc writes it: the SQL, run on the stack's database. */
async function psql(doc: string, fill: (sql: string) => string): Promise<unknown[]> {
  const sql = /^psql (\S+) -c "(.*)"$/.exec(doc);
  expect(sql?.[1]).toBe("postgres://postgres:postgres@127.0.0.1:54322/postgres");
  return (await fixture.stack.sql.query(fill(sql?.[2] ?? ""))).rows;
}

test("FAILURE-PATHS a job stuck queued: the doc's two psql lines, then its sweep curl republishes the job and it succeeds", async () => {
  const { stack } = fixture;
  const user = await stack.signIn({ plan: "pro" });
  const [made] = (await psql(
    command('psql postgres://postgres:postgres@127.0.0.1:54322/postgres -c "select'),
    (s) => s.replace("<user id>", user.userId),
  )) as { enqueue_job: { outcome: string; job: { id: string } } }[];
  expect(made?.enqueue_job.outcome).toBe("enqueued");
  const J = made?.enqueue_job.job.id ?? "";
  await psql(
    command('psql postgres://postgres:postgres@127.0.0.1:54322/postgres -c "update'),
    (s) => s,
  );
  const sweep = JSON.parse(
    await sh(here(command("curl -s http://127.0.0.1:3000/api/cron/sweep")), {}),
  );
  expect(sweep).toMatchObject({ republished: 1 });
  expect(await apiAs(stack, user.accessToken).waitTerminal(J)).toMatchObject({
    status: "succeeded",
  });
});

test("FAILURE-PATHS the worker dies mid-call: after the lease, the doc's QStash publish redelivers the job and it is reclaimed", async () => {
  const { stack } = fixture;
  const env = await secondTerminal();
  const user = await stack.signIn({ plan: "pro" });
  // A running job whose worker is gone: claimed with a 1 s lease, and no message left.
  const { rows } = await stack.sql.query<{ r: { job: { id: string } } }>(
    "select public.enqueue_job(p_user_id => $1, p_prompt => 'The worker died') as r",
    [user.userId],
  );
  const J = rows[0]?.r.job.id ?? "";
  await stack.sql.query("select public.start_job(p_job_id => $1, p_lease_seconds => 1)", [J]);
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  await sh(here(command('curl -s -X POST "http://127.0.0.1:8080/v2/publish/')), { ...env, J });
  expect(await apiAs(stack, user.accessToken).waitTerminal(J)).toMatchObject({
    status: "succeeded",
  });
  expect(await events(stack, J)).toContain("reclaimed");
});
