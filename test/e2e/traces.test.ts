/**
 * Traces through the real stack (the built app in its own process, the QStash stand-in, the fake
 * model, the OTLP receiver): one job is one trace across its invocations, each delivery nested
 * under the publish that sent it, and nothing of the prompt or the output in any attribute.
 */
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { expect, test } from "vitest";
import type { ReceivedSpan } from "../../dev/otlp-receiver.ts";
import { root } from "../../dev/postgres/migrate.ts";
import { newUserJob, until, useStack } from "../support/stack.ts";

const fixture = useStack({ traces: true });

const traceIdOf = (jobId: string) => jobId.replace(/-/g, "");

/** The spans of one trace, polled until `done` holds (the last invocation flushes as it answers). */
async function traceOf(jobId: string, done: (spans: ReceivedSpan[]) => boolean) {
  return until(
    async () => fixture.stack.traces.spans().filter((s) => s.traceId === traceIdOf(jobId)),
    done,
    { what: `the trace of job ${jobId}`, timeoutMs: 20_000 },
  );
}

const named = (spans: ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);
const childrenOf = (spans: ReceivedSpan[], parent: ReceivedSpan) =>
  spans.filter((s) => s.parentSpanId === parent.spanId);

/** Every attribute value of every span and event, as text. */
const allValues = (spans: ReceivedSpan[]) =>
  spans.flatMap((s) => [
    s.name,
    ...Object.values(s.attributes).map(String),
    ...s.events.flatMap((e) => [e.name, ...Object.values(e.attributes).map(String)]),
  ]);

function expectNoContent(spans: ReceivedSpan[], marker: string, output: string | null) {
  const values = allValues(spans);
  expect(values.filter((v) => v.includes(marker))).toEqual([]);
  if (output) {
    expect(output).toContain(marker);
    expect(values.filter((v) => v.length >= 12 && output.includes(v))).toEqual([]);
  }
}

/** How the tree reads: each span under its parent, indented (the report's picture). */
function tree(spans: ReceivedSpan[]): string {
  const ids = new Set(spans.map((s) => s.spanId));
  const lines: string[] = [];
  const walk = (s: ReceivedSpan, depth: number) => {
    const attrs = ["outcome", "job.outcome", "http.response.status_code", "error.type"]
      .filter((k) => s.attributes[k] !== undefined)
      .map((k) => `${k}=${s.attributes[k]}`);
    lines.push(`${"  ".repeat(depth)}${s.name} ${attrs.join(" ")}`.trimEnd());
    for (const c of spans
      .filter((x) => x.parentSpanId === s.spanId)
      .sort((a, b) => a.startMs - b.startMs))
      walk(c, depth + 1);
  };
  for (const root of spans
    .filter((s) => !ids.has(s.parentSpanId))
    .sort((a, b) => a.startMs - b.startMs))
    walk(root, 0);
  return lines.join("\n");
}

test("a failing job: the enqueue, both deliveries and the failure callback are one trace, each delivery under the publish", async () => {
  const marker = `PROMPTMARK${randomBytes(6).toString("hex")}`;
  const { api, id, created } = await newUserJob(
    fixture,
    `[fake:server_error] ${marker} never works`,
  );
  expect(created.status).toBe(202);
  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({ status: "failed" });

  const spans = await traceOf(
    id,
    (s) => named(s, "POST /api/dlq").length === 1 && named(s, "POST /api/worker").length === 2,
  );
  const [enqueue, ...otherRoots] = spans.filter((s) => s.parentSpanId === "");
  expect(otherRoots).toEqual([]);
  expect(enqueue?.name).toBe("POST /api/jobs");
  if (!enqueue) throw new Error("no enqueue span");
  expect(enqueue.attributes).toMatchObject({ "job.id": id, "http.response.status_code": 202 });
  const children = childrenOf(spans, enqueue).map((s) => s.name);
  expect(children).toEqual(
    expect.arrayContaining(["auth", "rate_limit", "db enqueue_job", "qstash publish"]),
  );
  const [publish] = named(spans, "qstash publish");
  if (!publish) throw new Error("no publish span");
  for (const delivery of named(spans, "POST /api/worker")) {
    expect(delivery.parentSpanId).toBe(publish.spanId);
    expect(delivery.attributes["http.response.status_code"]).toBe(503);
    expect(childrenOf(spans, delivery).map((s) => s.name)).toEqual(
      expect.arrayContaining(["qstash verify", "db start", "model generate", "db release"]),
    );
  }
  const [callback] = named(spans, "POST /api/dlq");
  expect(callback?.parentSpanId).toBe(publish.spanId);
  expect(callback?.attributes).toMatchObject({
    "job.outcome": "failed",
    "qstash.last_status": 503,
    "http.response.status_code": 200,
  });
  expectNoContent(spans, marker, null);
});

test("a provider 429: the requeue's publish carries the trace, the later success nests under it", async () => {
  fixture.stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 2 });
  const marker = `PROMPTMARK${randomBytes(6).toString("hex")}`;
  const { api, id } = await newUserJob(fixture, `Summarise ${marker} for the board`);
  const job = await api.waitTerminal(id);
  expect(job).toMatchObject({ status: "succeeded", attempts: 2 });

  const spans = await traceOf(id, (s) =>
    named(s, "POST /api/worker").some((w) => w.attributes["job.outcome"] === "completed"),
  );
  process.stdout.write(`the provider-429 job's trace:\n${tree(spans)}\n`);
  const [enqueuePublish] = named(spans, "qstash publish");
  const workers = named(spans, "POST /api/worker").sort((a, b) => a.startMs - b.startMs);
  expect(workers.map((w) => w.attributes["job.outcome"])).toEqual(["requeued", "completed"]);
  const [first, second] = workers;
  if (!first || !second || !enqueuePublish) throw new Error("spans missing");
  expect(first.parentSpanId).toBe(enqueuePublish.spanId);

  // The first delivery: the model's 429 and the requeue, whose publish is the second's parent.
  const firstModel = childrenOf(spans, first).find((s) => s.name === "model generate");
  expect(firstModel?.attributes).toMatchObject({
    "error.type": "provider_quota",
    "http.response.status_code": 429,
    "openai.error.reason": "rate_limit_exceeded",
  });
  const requeue = childrenOf(spans, first).find((s) => s.name === "db requeue");
  expect(requeue?.attributes.outcome).toBe("requeued");
  const republish = childrenOf(spans, first).find((s) => s.name === "qstash publishJob");
  if (!republish) throw new Error("no requeue publish");
  expect(second.parentSpanId).toBe(republish.spanId);

  // The second delivery: the model call with its token counts and progress events, the write.
  const model = childrenOf(spans, second).find((s) => s.name === "model generate");
  expect(model?.attributes["gen_ai.usage.output_tokens"]).toBeGreaterThan(0);
  expect(model?.attributes["gen_ai.usage.input_tokens"]).toBeGreaterThan(0);
  // The first text's progress write: an event on the model call, not a span of its own.
  expect(model?.events.map((e) => e.name)).toContain("progress");
  expect(named(spans, "db progress")).toEqual([]);
  expect(childrenOf(spans, second).find((s) => s.name === "db complete")?.attributes.outcome).toBe(
    "completed",
  );
  const { rows } = await fixture.stack.sql.query<{ output: string }>(
    "select output from public.generation_jobs where id = $1",
    [id],
  );
  expectNoContent(spans, marker, rows[0]?.output ?? null);
});

test("a cancel is a span of the job's trace; another user's cancel of it stays out", async () => {
  // Both cancels must land while the job waits, before its message returns at the resume time:
  // the stranger signs up first, and the wait is 5 s, so a loaded machine's round trips fit.
  const stranger = await (await import("../support/stack.ts")).newUser(fixture.stack);
  fixture.stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 5 });
  const { api, id } = await newUserJob(fixture, "Draft a polite reminder");
  await api.waitFor(id, (j) => j.phase === "waiting_for_provider", "waiting");
  expect((await stranger.api.cancel(id)).status).toBe(404);
  expect((await api.cancel(id)).status).toBe(200);
  const spans = await traceOf(id, (s) => named(s, "DELETE /api/jobs/:id").length === 1);
  expect(named(spans, "DELETE /api/jobs/:id")[0]?.attributes).toMatchObject({
    "job.outcome": "canceled",
    "job.refunded": true,
  });
});

/** The files a bundled handler loads at import: itself and its static imports, transitively. */
function eagerFiles(entry: string): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    const code = readFileSync(file, "utf8");
    for (const m of code.matchAll(/(?:^|[;\n])\s*(?:import|export)\s[^;]*?from\s*"(\.[^"]+)"/g))
      if (m[1]) visit(join(dirname(file), m[1]));
    for (const m of code.matchAll(/(?:^|[;\n])\s*import\s*"(\.[^"]+)"/g))
      if (m[1]) visit(join(dirname(file), m[1]));
  };
  visit(entry);
  return [...seen];
}

test("the built functions load the OpenTelemetry SDK only through import(): not at a cold start", () => {
  for (const fn of ["api/jobs/index", "api/worker", "api/dlq"]) {
    const dir = join(root, ".vercel/output/functions", `${fn}.func`);
    const vc = JSON.parse(readFileSync(join(dir, ".vc-config.json"), "utf8")) as {
      handler: string;
    };
    const entry = join(dir, vc.handler);
    expect(existsSync(entry)).toBe(true);
    const eager = eagerFiles(entry);
    const withSdk = eager.filter((f) =>
      /OTLPTraceExporter|BatchSpanProcessor/.test(readFileSync(f, "utf8")),
    );
    expect(withSdk, fn).toEqual([]);
    // ... and the SDK is in the function, in a chunk reached by import().
    const all = readFileSync(entry, "utf8") + eager.map((f) => readFileSync(f, "utf8")).join("");
    expect(all, fn).toMatch(/import\("\.\/chunk-[A-Z0-9]+\.js"\)/);
  }
});
