/**
 * End to end, over HTTP: users whose prompts make every attempt fail transiently (the model
 * answers 500, or is slower than the model timeout), job after job. Each job costs at most
 * QSTASH_RETRIES + 1 model calls, and on-call gets at most one summary page per alert window,
 * never a page per job. The alert window is 10 s here so the test sees windows close.
 */
import { expect, test } from "vitest";
import { alertsAbout, newUser, until, useStack } from "../support/stack.ts";

const QSTASH_RETRIES = 1;
const WINDOW_SECONDS = 10;
const fixture = useStack({
  env: {
    QSTASH_RETRIES: String(QSTASH_RETRIES),
    MODEL_TIMEOUT_MS: "1000",
    ALERT_THROTTLE_SECONDS: String(WINDOW_SECONDS),
  },
});

type Page = { text: string; blocks: Array<{ fields?: Array<{ text: string }> }> };
const fieldOf = (p: Page, name: string) =>
  p.blocks
    .flatMap((b) => b.fields ?? [])
    .find((f) => f.text.startsWith(`*${name}*\n`))
    ?.text.split("\n")[1];

test("a timeout loop across many jobs: at most QSTASH_RETRIES + 1 model calls each, at most one summary page per window", async () => {
  const { stack } = fixture;
  const users = [await newUser(stack), await newUser(stack)];
  const windowOf = (t: number) => Math.floor(t / 1000 / WINDOW_SECONDS);
  const firstWindow = windowOf(Date.now());
  const perJob: Array<{ id: string; calls: number; marker: string }> = [];
  const started = Date.now();
  // One job at a time (so a job's model calls are its own), alternating two users: 8 jobs whose
  // model answers 500, 4 whose model is slower than the 1 s model timeout.
  const markers = [
    ...Array.from({ length: 8 }, () => "[fake:server_error]"),
    ...Array.from({ length: 4 }, () => "[fake:slow:1500]"),
  ];
  for (const [i, marker] of markers.entries()) {
    const { api } = users[i % users.length] as (typeof users)[number];
    const before = stack.model.calls();
    const created = await api.enqueue(`${marker} loop ${i}`);
    expect(created.status).toBe(202);
    const id = created.body.job.id as string;
    const job = await api.waitTerminal(id, 30_000);
    expect(job).toMatchObject({ status: "failed", failureReason: "delivery_failed" });
    await stack.qstash.waitIdle(10_000);
    perJob.push({ id, calls: stack.model.calls() - before, marker });
  }
  const lastWindow = windowOf(Date.now());
  const duringLoop = stack.alerts.received() as Page[];

  // The last window closes; the sweeper's tick sends what is left.
  await until(
    async () => windowOf(Date.now()),
    (w) => w > lastWindow,
    { timeoutMs: (WINDOW_SECONDS + 2) * 1000, intervalMs: 200, what: "the last window to close" },
  );
  expect((await stack.sweep()).status).toBe(200);
  const pages = stack.alerts.received() as Page[];
  const summaries = pages.filter((p) => p.text.startsWith("[user_failures]"));
  const windows = summaries.map((p) => fieldOf(p, "window"));
  const counted = summaries.reduce((n, p) => n + Number(fieldOf(p, "delivery_failed") ?? 0), 0);
  const maxCalls = Math.max(...perJob.map((j) => j.calls));
  process.stdout.write(
    `[timeout-loop] ${perJob.length} jobs in ${Date.now() - started} ms, model calls per job ${JSON.stringify(
      perJob.map((j) => j.calls),
    )} (max ${maxCalls}, bound ${QSTASH_RETRIES + 1}); windows spanned ${lastWindow - firstWindow + 1}; pages during the loop ${duringLoop.length}, after ${pages.length}: ${summaries
      .map((p) => p.text)
      .join(" | ")}\n`,
  );

  for (const j of perJob) expect(j.calls, j.marker).toBeLessThanOrEqual(QSTASH_RETRIES + 1);
  // No page names a job; every page is a summary, one per window at most, and together they
  // count every failure.
  for (const j of perJob) expect(alertsAbout(stack, j.id)).toHaveLength(0);
  expect(pages.length).toBe(summaries.length);
  expect(new Set(windows).size).toBe(summaries.length);
  expect(summaries.length).toBeLessThanOrEqual(lastWindow - firstWindow + 1);
  expect(counted).toBe(perJob.length);
  // 12 jobs one after another, each failing twice, then a window's close: ~20 s on a quiet
  // machine, so the default 60 s was only three times that.
}, 120_000);
