/**
 * lib/trace.ts with the real SDK (lib/trace-sdk.ts) exporting to memory or to a collector that
 * misbehaves: one job is one trace whose id is the job's id, steps timed before the job existed
 * become children of its first span, a publish carries its span's traceparent to the delivery and
 * to the failure callback, and a dead or silent collector delays an invocation by at most the
 * flush bound and never fails it.
 */
import { randomUUID } from "node:crypto";
import { createServer, type Server, type Socket } from "node:net";
import { InMemorySpanExporter, type ReadableSpan } from "@opentelemetry/sdk-trace";
import { HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll, expect, test } from "vitest";
import { createQueue } from "../../lib/queue.ts";
import {
  annotate,
  FLUSH_TIMEOUT_MS,
  inJobTrace,
  joinJob,
  parseTraceparent,
  setTraceBackend,
  startTrace,
  traced,
  traceHeaders,
  traceRequest,
  tracesUrl,
} from "../../lib/trace.ts";
import { createBackend } from "../../lib/trace-sdk.ts";

const on = { otelExporterOtlpEndpoint: "http://127.0.0.1:1" };
const off = {};
const msw = setupServer();
beforeAll(() => msw.listen({ onUnhandledRequest: "bypass" }));
afterEach(() => {
  msw.resetHandlers();
  setTraceBackend(undefined);
});
afterAll(() => msw.close());

function memory() {
  const exporter = new InMemorySpanExporter();
  setTraceBackend(createBackend({ exporter }));
  return exporter;
}
const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId ?? "";
const byName = (spans: ReadableSpan[], name: string) => {
  const s = spans.find((x) => x.name === name);
  if (!s) throw new Error(`no span ${name} in ${spans.map((x) => x.name).join(", ")}`);
  return s;
};

test("the OTLP endpoint: the traces variable as given, else the base + /v1/traces, else off", () => {
  expect(tracesUrl({})).toBeNull();
  expect(tracesUrl({ otelExporterOtlpEndpoint: "http://c:4318/" })).toBe("http://c:4318/v1/traces");
  expect(
    tracesUrl({
      otelExporterOtlpEndpoint: "http://c:4318",
      otelExporterOtlpTracesEndpoint: "http://t/x",
    }),
  ).toBe("http://t/x");
});

test("off: the handler runs as before and a publish carries no trace header", async () => {
  const res = await traceRequest(off, "POST /x", async () => {
    joinJob(randomUUID());
    expect(traceHeaders()).toEqual({});
    return new Response("ok", { status: 202 });
  });
  expect(res.status).toBe(202);
});

test("steps before the job existed become children of the request, which opens in the job's trace", async () => {
  const exporter = memory();
  const jobId = randomUUID();
  let headers: Record<string, string> = {};
  await traceRequest(on, "POST /api/jobs", async () => {
    await traced("auth", {}, async () => undefined);
    await traced("db enqueue_job", {}, async () => undefined);
    joinJob(jobId);
    annotate({ "job.kind": "document" });
    await traced("qstash publish", {}, async () => {
      headers = traceHeaders();
    });
    return new Response(null, { status: 202 });
  });
  const spans = exporter.getFinishedSpans();
  expect(spans.map((s) => s.name).sort()).toEqual(
    ["POST /api/jobs", "auth", "db enqueue_job", "qstash publish"].sort(),
  );
  const root = byName(spans, "POST /api/jobs");
  expect(new Set(spans.map((s) => s.spanContext().traceId))).toEqual(
    new Set([jobId.replace(/-/g, "")]),
  );
  expect(parentOf(root)).toBe("");
  for (const name of ["auth", "db enqueue_job", "qstash publish"])
    expect(parentOf(byName(spans, name))).toBe(root.spanContext().spanId);
  expect(root.attributes).toMatchObject({
    "job.id": jobId,
    "job.kind": "document",
    "http.response.status_code": 202,
  });
  // The auth step ended before the publish started: the recorded times are kept.
  const auth = byName(spans, "auth");
  expect(auth.endTime[0] * 1e3 + auth.endTime[1] / 1e6).toBeGreaterThan(0);
  const publish = byName(spans, "qstash publish");
  const tp = `00-${publish.spanContext().traceId}-${publish.spanContext().spanId}-01`;
  expect(headers).toEqual({ traceparent: tp, "Upstash-Failure-Callback-Forward-traceparent": tp });
});

test("a delivery's traceparent makes its request a child of the publish that sent it", async () => {
  const exporter = memory();
  const jobId = randomUUID();
  const traceId = jobId.replace(/-/g, "");
  const tp = `00-${traceId}-00f067aa0ba902b7-01`;
  await traceRequest(on, "POST /api/worker", async () => {
    await traced("qstash verify", {}, async () => undefined);
    joinJob(jobId, tp);
    await traced("model generate", {}, async () => undefined);
    return new Response(null, { status: 200 });
  });
  const spans = exporter.getFinishedSpans();
  const root = byName(spans, "POST /api/worker");
  expect(root.spanContext().traceId).toBe(traceId);
  expect(parentOf(root)).toBe("00f067aa0ba902b7");
  expect(parentOf(byName(spans, "qstash verify"))).toBe(root.spanContext().spanId);
  expect(parentOf(byName(spans, "model generate"))).toBe(root.spanContext().spanId);
});

test("a malformed traceparent is ignored: the request opens in the job's trace as a root", async () => {
  const exporter = memory();
  const jobId = randomUUID();
  await traceRequest(on, "POST /api/worker", async () => {
    joinJob(jobId, "00-zz-not-a-trace");
    return new Response(null, { status: 200 });
  });
  const [root] = exporter.getFinishedSpans();
  expect(root?.spanContext().traceId).toBe(jobId.replace(/-/g, ""));
  expect(root && parentOf(root)).toBe("");
  expect(parseTraceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01")).toBeNull();
});

test("the sweeper's republish is a root span in the job's trace, linked to the tick", async () => {
  const exporter = memory();
  const jobId = randomUUID();
  let tp = "";
  await traceRequest(on, "GET /api/cron/sweep", async () => {
    startTrace();
    await inJobTrace(jobId, "sweeper republish", {}, async () => {
      tp = traceHeaders().traceparent ?? "";
    });
    return new Response(null, { status: 200 });
  });
  const spans = exporter.getFinishedSpans();
  const tick = byName(spans, "GET /api/cron/sweep");
  const republish = byName(spans, "sweeper republish");
  expect(republish.spanContext().traceId).toBe(jobId.replace(/-/g, ""));
  expect(tick.spanContext().traceId).not.toBe(jobId.replace(/-/g, ""));
  expect(republish.links.map((l) => l.context.spanId)).toEqual([tick.spanContext().spanId]);
  expect(parseTraceparent(tp)?.spanId).toBe(republish.spanContext().spanId);
});

test("a thrown error ends the request span failed, with its code and status only", async () => {
  const exporter = memory();
  const err = Object.assign(new Error("secret prompt text leaked into a message"), {
    code: "invalid_prompt",
    status: 400,
  });
  await expect(traceRequest(on, "POST /api/jobs", () => Promise.reject(err))).rejects.toBe(err);
  const [root] = exporter.getFinishedSpans();
  expect(root?.status.code).toBe(2);
  expect(root?.attributes).toEqual({
    "error.type": "invalid_prompt",
    "http.response.status_code": 400,
  });
  expect(JSON.stringify(root?.events)).not.toContain("secret prompt");
});

test("a publish forwards the traceparent to the delivery and to the failure callback, on the wire", async () => {
  const exporter = memory();
  const seen: Record<string, string>[] = [];
  msw.use(
    http.post("https://qstash.upstash.io/v2/publish/*", ({ request }) => {
      seen.push(Object.fromEntries(request.headers));
      return HttpResponse.json({ messageId: "msg_1", url: "https://app.example/api/worker" });
    }),
  );
  const queue = createQueue({ token: "t", appUrl: "https://app.example", retries: 1 });
  const jobId = randomUUID();
  await traceRequest(on, "POST /api/jobs", async () => {
    joinJob(jobId);
    await traced("qstash publish", {}, () =>
      queue.publishJob({ jobId, seq: 1, dedupId: `job-${jobId}-1` }),
    );
    return new Response(null, { status: 202 });
  });
  const publish = byName(exporter.getFinishedSpans(), "qstash publish");
  const tp = `00-${jobId.replace(/-/g, "")}-${publish.spanContext().spanId}-01`;
  expect(seen[0]?.["upstash-forward-traceparent"]).toBe(tp);
  expect(seen[0]?.["upstash-failure-callback-forward-traceparent"]).toBe(tp);
});

/** A collector that accepts connections and never answers, or answers nothing at all. */
async function silentCollector(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets: Socket[] = [];
  const server: Server = createServer((s) => sockets.push(s));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

test("a collector that never answers delays a request by at most the flush bound, and never fails it", async () => {
  const collector = await silentCollector();
  try {
    setTraceBackend(createBackend({ url: collector.url, headers: {} }));
    for (let i = 0; i < 2; i++) {
      const t0 = performance.now();
      const res = await traceRequest(on, "POST /api/jobs", async () => {
        joinJob(randomUUID());
        await traced("db enqueue_job", {}, async () => undefined);
        return new Response("done", { status: 202 });
      });
      const ms = performance.now() - t0;
      expect(res.status).toBe(202);
      expect(await res.text()).toBe("done");
      expect(ms).toBeGreaterThanOrEqual(FLUSH_TIMEOUT_MS - 50);
      // Under the exporter's own timeout (1 s, lib/trace-sdk.ts), which is what a request waits
      // without the flush bound (tried: about 1,020 ms a request): 501 ms measured on a loaded machine.
      expect(ms).toBeLessThan(FLUSH_TIMEOUT_MS + 450);
    }
  } finally {
    await collector.close();
  }
});

test("a collector that refuses connections costs a request next to nothing", async () => {
  setTraceBackend(createBackend({ url: "http://127.0.0.1:1/v1/traces", headers: {} }));
  const t0 = performance.now();
  const res = await traceRequest(
    on,
    "POST /api/jobs",
    async () => new Response(null, { status: 200 }),
  );
  expect(res.status).toBe(200);
  // 506 ms measured on a loaded machine: three times that still fails a flush that hangs.
  expect(performance.now() - t0).toBeLessThan(FLUSH_TIMEOUT_MS * 3);
});
