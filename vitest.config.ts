import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // One real PostgreSQL for the whole run; each test owns its own users.
    globalSetup: ["test/support/global-setup.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // No test may be skipped or left as a todo: a skipped test proves nothing.
    allowOnly: false,
  },
});
