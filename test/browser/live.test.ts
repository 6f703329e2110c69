/**
 * The page watches over push (public/live.js on the Realtime stand-in, through the app's own
 * origin as under `npm run dev`): a streamed job shown as it arrives with no read of the job
 * while it streams, never a state out of order; the stand-in stopped mid-job (polling takes
 * over) and back (push resumes); and the latency from the database storing a piece of the
 * answer to the screen showing it, with push and with polling, side by side in one run.
 */
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import { card, cardIn, devSignIn, generate, until, useBrowserStack } from "../support/browser.ts";

const h = useBrowserStack();

const JOB_PATH = /\/api\/jobs\/[0-9a-f-]{36}$/;

/** Every GET of one job the page sends, with when it was sent. */
function jobReads(page: Page): number[] {
  const at: number[] = [];
  page.on("request", (r) => {
    if (r.method() === "GET" && JOB_PATH.test(new URL(r.url()).pathname)) at.push(Date.now());
  });
  return at;
}

/** What the newest card shows over time: its phase and its output's length, each change. */
async function recordCard(page: Page): Promise<void> {
  await page.evaluate(() => {
    const w = window as unknown as { __seen: { at: number; phase: string; chars: number }[] };
    w.__seen = [];
    const look = () => {
      const li = document.querySelector("li.job");
      if (!li) return;
      const phase = li.getAttribute("data-phase") ?? "";
      const chars = [...(li.querySelector(".job-output")?.textContent ?? "")].length;
      const last = w.__seen.at(-1);
      if (!last || last.phase !== phase || last.chars !== chars)
        w.__seen.push({ at: Date.now(), phase, chars });
    };
    new MutationObserver(look).observe(document.body, {
      subtree: true,
      childList: true,
      characterData: true,
      attributes: true,
    });
  });
}

/** Every frame the page's sockets received, as text (a binary frame's bytes as latin1). */
function liveFrames(page: Page): string[] {
  const frames: string[] = [];
  page.on("websocket", (ws) =>
    ws.on("framereceived", (f) =>
      frames.push(typeof f.payload === "string" ? f.payload : f.payload.toString("latin1")),
    ),
  );
  return frames;
}

const seen = (page: Page) =>
  page.evaluate(
    () => (window as unknown as { __seen: { at: number; phase: string; chars: number }[] }).__seen,
  );

const ORDER = ["queued", "running", "succeeded"];

async function joined(page: Page): Promise<void> {
  await page.locator('body[data-live="joined"]').waitFor();
}

describe("live status in the browser", () => {
  test("a streamed job arrives by push: no read of it at all while joined, no state out of order", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "pro");
    await joined(page);
    const reads = jobReads(page);
    await recordCard(page);
    await generate(page, "[fake:tokens:400] [fake:chunk_ms:20] A live essay");
    const job = card(page);
    await job.waitFor();
    const jobId = (await job.getAttribute("data-job-id")) ?? "";
    await cardIn(page, "succeeded");

    const shown = await seen(page);
    const running = shown.filter((s) => s.phase === "running" && s.chars > 0);
    // the answer grew on the screen in several steps, never shrinking
    expect(new Set(running.map((s) => s.chars)).size).toBeGreaterThanOrEqual(3);
    for (let i = 1; i < running.length; i++)
      expect(running[i]?.chars).toBeGreaterThanOrEqual(running[i - 1]?.chars ?? 0);
    // the phases in their order, each once
    const phases = shown.map((s) => s.phase).filter((p, i, all) => p !== "" && p !== all[i - 1]);
    const ranks = phases.map((p) => ORDER.indexOf(p));
    expect(
      ranks.every((r, i) => r >= 0 && (i === 0 || r > (ranks[i - 1] ?? -1))),
      phases.join(),
    ).toBe(true);
    // no GET /api/jobs/<id> from the enqueue to the end: the claim and the ending came as the
    // worker's pushed views, the text as its deltas
    expect(reads).toEqual([]);
    // the ended job's answer, as the worker's pushed view carries it
    expect(await job.locator(".job-output").textContent()).toContain("A deterministic answer");
    const { rows } = await h
      .stack()
      .sql.query<{ status: string }>("select status from generation_jobs where id = $1", [jobId]);
    expect(rows[0]?.status).toBe("succeeded");
    expect(errors).toEqual([]);
  });

  test("Realtime stopped mid-job: polling takes over; back: push resumes, the answer whole", async () => {
    const { page, errors } = await h.open();
    await devSignIn(page, "pro");
    await joined(page);
    const reads = jobReads(page);
    await generate(page, "[fake:tokens:900] [fake:chunk_ms:20] A long live essay");
    const job = await cardIn(page, "running");
    const output = job.locator(".job-output");
    await until("streamed text", async () => ((await output.textContent()) ?? "") !== "");

    h.stack().realtime.down(true);
    await page.locator('body[data-live="polling"]').waitFor();
    const before = reads.length;
    const textThen = (await output.textContent()) ?? "";
    await until("polling reads", () => reads.length >= before + 2, 10_000);
    await until(
      "the answer to grow by polling",
      async () => ((await output.textContent()) ?? "").length > textThen.length,
    );

    h.stack().realtime.down(false);
    await joined(page);
    const afterJoin = reads.length;
    const textJoined = (await output.textContent()) ?? "";
    await until(
      "the answer to grow by push",
      async () => ((await output.textContent()) ?? "").length > textJoined.length + 10,
    );
    // at most the rejoin's one read to catch up, then none while it streams
    if ((await job.getAttribute("data-phase")) === "running")
      expect(reads.length - afterJoin).toBeLessThanOrEqual(1);
    await cardIn(page, "succeeded");
    expect(errors).toEqual([]);
  });

  test("token to screen, push beside polling: the time from the database storing text to the screen showing it", async () => {
    const push = await h.open();
    const poll = await h.open();
    // the second page cannot reach Realtime: it polls, as every page did before
    await poll.page.routeWebSocket(/\/realtime\/v1\//, (ws) => ws.close());
    const frames = liveFrames(push.page);
    await devSignIn(push.page, "pro");
    await devSignIn(poll.page, "pro");
    await joined(push.page);
    await poll.page.locator('body[data-live="polling"]').waitFor({ state: "attached" });
    await Promise.all([recordCard(push.page), recordCard(poll.page)]);
    const reads = { push: jobReads(push.page), polling: jobReads(poll.page) };
    const prompt = "[fake:tokens:600] [fake:chunk_ms:20] Latency";
    await Promise.all([generate(push.page, prompt), generate(poll.page, prompt)]);
    const ids = await Promise.all(
      [push.page, poll.page].map(async (p) => {
        await card(p).waitFor();
        return (await card(p).getAttribute("data-job-id")) ?? "";
      }),
    );

    // when each piece of each answer was first stored (the chunks' ends, read every 20 ms)
    const stored = new Map<string, Map<number, number>>(ids.map((id) => [id, new Map()]));
    const done = async () => {
      const { rows } = await h
        .stack()
        .sql.query<{ n: number }>(
          "select count(*)::int as n from generation_jobs where id = any($1) and status = 'succeeded'",
          [ids],
        );
      return rows[0]?.n === 2;
    };
    while (!(await done())) {
      const { rows } = await h
        .stack()
        .sql.query<{ job_id: string; end_char: number }>(
          "select job_id, end_char from job_output_chunks where job_id = any($1)",
          [ids],
        );
      const now = Date.now();
      for (const r of rows) {
        const m = stored.get(r.job_id);
        if (m && r.end_char > 0 && !m.has(r.end_char)) m.set(r.end_char, now);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    await Promise.all([cardIn(push.page, "succeeded"), cardIn(poll.page, "succeeded")]);

    const latencies = async (p: Page, id: string) => {
      const shown = (await seen(p)).filter((s) => s.phase === "running");
      const out: number[] = [];
      for (const [chars, at] of stored.get(id) ?? []) {
        const screen = shown.find((s) => s.chars >= chars);
        if (screen) out.push(Math.max(0, screen.at - at));
      }
      return out.sort((a, b) => a - b);
    };
    const q = (xs: number[], f: number) => xs[Math.min(xs.length - 1, Math.floor(xs.length * f))];
    const pushed = await latencies(push.page, ids[0] ?? "");
    const polled = await latencies(poll.page, ids[1] ?? "");
    const figures = {
      push: { n: pushed.length, p50: q(pushed, 0.5), p99: q(pushed, 0.99) },
      polling: { n: polled.length, p50: q(polled, 0.5), p99: q(polled, 0.99) },
    };
    console.log(`token to screen (ms): ${JSON.stringify(figures)}`);
    // what following one job costs: the reads each page sent (a function invocation and a
    // PostgREST call each), and the Realtime messages the pushed page received about its job
    const mine = frames.filter((f) => f.includes(ids[0] ?? "?"));
    const bytes = mine.reduce((n, f) => n + f.length, 0);
    console.log(
      `following one job: status reads push ${reads.push.length}, polling ${reads.polling.length};` +
        ` Realtime messages ${mine.length} (${bytes} bytes on the socket)`,
    );
    expect(reads.push).toEqual([]);
    expect(reads.polling.length).toBeGreaterThanOrEqual(2);
    expect(mine.length).toBeGreaterThanOrEqual(3);
    expect(pushed.length).toBeGreaterThanOrEqual(3);
    expect(polled.length).toBeGreaterThanOrEqual(1);
    // side by side in one run on one machine: push shows a stored piece sooner than polling
    expect(figures.push.p50 ?? Number.POSITIVE_INFINITY).toBeLessThan(figures.polling.p50 ?? 0);
  });
});
