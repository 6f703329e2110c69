import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One real PostgreSQL for the whole run; each test owns its own users.
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // vitest runs one file at a time on two cores (CPUs - 1), and most files wait: on stacks,
    // polls, the clock. Two at once share safely: each file owns its users, ports (picked
    // free), temp folders and stack; files that read every job use a database of their own,
    // cost counts a cluster of its own; pans are cached with an atomic rename. test/db took
    // 51 s instead of 115 s, and test/e2e passed whole with two.
    maxWorkers: 2,
    // No test may be skipped or left as a todo: a skipped test proves nothing.
    allowOnly: false,
  },
});
