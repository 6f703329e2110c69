/**
 * The client's two lists kept by hand: its error codes (held to every code the handlers can
 * answer a client with) and its watch pace (held to the page's poller).
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect, test } from "vitest";
import { API_ERROR_CODES, watchDelay } from "../../public/client.js";
import { type Pace, pollDelay } from "../../public/poll.js";

/** Codes only QStash's signed deliveries to the internal routes can meet. */
const DELIVERY_ONLY = ["invalid_body", "invalid_callback", "invalid_signature"];

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts"))
    .map((e) => join(e.parentPath, e.name));
}

test("ApiError's codes are exactly the codes api/ and lib/ answer with, and network", () => {
  const found = new Set<string>();
  for (const file of [...sources("api"), ...sources("lib")]) {
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/HttpError\(\s*\d{3},\s*"([a-z_]+)"/g)) found.add(m[1] ?? "");
    for (const m of text.matchAll(/errorBody\("([a-z_]+)"/g)) found.add(m[1] ?? "");
  }
  const expected = [...found].filter((c) => !DELIVERY_ONLY.includes(c));
  expect([...API_ERROR_CODES].sort()).toEqual([...expected, "network"].sort());
});

test("watch waits as the page's poller does", () => {
  const jobs: Record<Pace, { phase: string; partialOutput: string | null }> = {
    fast: { phase: "queued", partialOutput: null },
    streaming: { phase: "running", partialOutput: "Once" },
    slow: { phase: "waiting_for_provider", partialOutput: null },
  };
  for (const [pace, job] of Object.entries(jobs) as [Pace, (typeof jobs)[Pace]][]) {
    for (let attempt = 0; attempt < 12; attempt++) {
      expect(watchDelay(attempt, job as never)).toBe(pollDelay(attempt, pace));
    }
  }
  expect(watchDelay(0, { phase: "running", partialOutput: null } as never)).toBe(
    pollDelay(0, "fast"),
  );
});
