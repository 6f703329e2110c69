/**
 * The README's quick start, run as written: its second-terminal block is taken from README.md
 * and run by bash against a local stack serving the built artifact. Only the address changes
 * (the stack is on free ports, not 3000), and `<id>` becomes the id the first call answered,
 * as a reader would paste it.
 */
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { assert, expect, test } from "vitest";
import { root } from "../../dev/postgres/migrate.ts";
import { useStack } from "../support/stack.ts";

const fixture = useStack();

/** The shell block that follows "In a second terminal:" in the README's quick start. */
function quickStartBlock(): string[] {
  const readme = readFileSync(join(root, "README.md"), "utf8");
  const section = readme.split("## Quick start")[1]?.split("\n## ")[0] ?? "";
  const block = /In a second terminal:\s*```sh\n([\s\S]*?)```/.exec(section)?.[1];
  if (!block) throw new Error("README.md: no shell block after 'In a second terminal:'");
  // One command per entry: lines ending in a backslash continue the command.
  return block
    .replace(/\\\n\s*/g, " ")
    .split("\n")
    .map((line) => line.replace(/\s+#.*$/, "").trim())
    .filter(Boolean);
}

/** Runs a script in bash, asynchronously: the stand-ins live in this process and must answer. */
async function sh(script: string, env: Record<string, string>): Promise<string> {
  const run = await promisify(execFile)("bash", ["-euo", "pipefail", "-c", script], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, ...env },
    timeout: 60_000,
  });
  return run.stdout;
}

test("the README's quick start works as written: a token, a job that succeeds, the usage", async () => {
  const { stack } = fixture;
  const commands = quickStartBlock();
  expect(commands.map((c) => c.split(" ").slice(0, 3).join(" "))).toEqual([
    "TOKEN=$(npm run -s",
    "curl -s -X",
    "curl -s http://127.0.0.1:3000/api/jobs/<id>",
    "curl -s http://127.0.0.1:3000/api/usage",
  ]);
  const here = (c: string) => c.replaceAll("http://127.0.0.1:3000", stack.urls.app);
  const env: Record<string, string> = {
    DEV_DATABASE_URL: stack.urls.postgres,
    SUPABASE_JWT_SECRET: stack.env.SUPABASE_JWT_SECRET ?? "",
  };
  const [token, enqueue, poll, usage] = commands.map(here) as [string, string, string, string];
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
