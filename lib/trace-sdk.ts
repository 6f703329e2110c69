/**
 * The OpenTelemetry SDK behind lib/trace.ts, loaded with `import()` only when an OTLP endpoint
 * is configured: a function with tracing off never reads a byte of it (esbuild puts it in a
 * chunk of its own, dev/bundle-functions.ts).
 *
 * The SDK is used directly (the 3.x trace SDK and the OTLP/HTTP exporter, JSON encoding), not
 * @vercel/otel: that package registers through Next.js's instrumentation hook and pins the 2.x
 * SDK line, and these are plain Vercel functions. Spans are batched and exported by the flush at
 * the end of each invocation (lib/trace.ts), bounded in time: a serverless function may be frozen
 * as soon as it answers, so nothing is left for a timer to send later.
 *
 * Contexts are passed explicitly (no global context manager): a span's parent is a span handle
 * or a remote traceparent. A root span can open in a given trace (a job's trace id is its id):
 * the id generator hands out that id for the one synchronous `startSpan` call that asks for it.
 */
import {
  type Attributes,
  type Context,
  ROOT_CONTEXT,
  type Span,
  SpanStatusCode,
  TraceFlags,
  trace,
} from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import {
  BatchSpanProcessor,
  RandomIdGenerator,
  type SpanExporter,
  TracerProvider,
} from "@opentelemetry/sdk-trace";
import {
  type Attrs,
  parseTraceparent,
  type SpanHandle,
  type StartOptions,
  type TraceBackend,
} from "./trace-context.ts";

const clean = (attrs: Attrs | undefined): Attributes => {
  const out: Attributes = {};
  for (const [k, v] of Object.entries(attrs ?? {})) if (v !== null && v !== undefined) out[k] = v;
  return out;
};

function handle(span: Span): SpanHandle {
  return {
    set: (attrs) => span.setAttributes(clean(attrs)),
    event: (name, attrs) => span.addEvent(name, clean(attrs)),
    fail: (reason) => {
      span.setAttribute("error.type", reason);
      span.setStatus({ code: SpanStatusCode.ERROR });
    },
    end: (endTime) => span.end(endTime),
    traceparent: () => {
      const c = span.spanContext();
      return `00-${c.traceId}-${c.spanId}-0${c.traceFlags & TraceFlags.SAMPLED ? 1 : 0}`;
    },
  };
}

const spans = new WeakMap<SpanHandle, Span>();

/**
 * A backend exporting to `exporter` (tests: an in-memory one), or to the OTLP/HTTP collector at
 * `url` with `headers` (OTEL_EXPORTER_OTLP_HEADERS).
 */
export function createBackend(
  options: { url: string; headers: Record<string, string> } | { exporter: SpanExporter },
): TraceBackend {
  const exporter =
    "exporter" in options
      ? options.exporter
      : new OTLPTraceExporter({ url: options.url, headers: options.headers, timeoutMillis: 1000 });
  const random = new RandomIdGenerator();
  let forcedTraceId: string | undefined;
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ "service.name": "quota-jobs" }),
    idGenerator: {
      generateTraceId: () => forcedTraceId ?? random.generateTraceId(),
      generateSpanId: () => random.generateSpanId(),
    },
    spanProcessors: [
      new BatchSpanProcessor({ exporter, scheduledDelayMillis: 60_000, exportTimeoutMillis: 1000 }),
    ],
  });
  const tracer = provider.getTracer("quota-jobs");

  const contextOf = (parent: StartOptions["parent"]): Context => {
    if (parent === undefined) return ROOT_CONTEXT;
    if (typeof parent !== "string") {
      const span = spans.get(parent);
      return span ? trace.setSpan(ROOT_CONTEXT, span) : ROOT_CONTEXT;
    }
    const p = parseTraceparent(parent);
    if (!p) return ROOT_CONTEXT;
    return trace.setSpanContext(ROOT_CONTEXT, {
      traceId: p.traceId,
      spanId: p.spanId,
      traceFlags: p.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
      isRemote: true,
    });
  };

  return {
    start(name, o) {
      const links = (o.links ?? []).flatMap((l) => {
        const s = spans.get(l);
        return s ? [{ context: s.spanContext() }] : [];
      });
      forcedTraceId = o.parent === undefined ? o.traceId : undefined;
      let span: Span;
      try {
        span = tracer.startSpan(
          name,
          {
            attributes: clean(o.attrs),
            ...(o.startTime === undefined ? {} : { startTime: o.startTime }),
            links,
          },
          contextOf(o.parent),
        );
      } finally {
        forcedTraceId = undefined;
      }
      const h = handle(span);
      spans.set(h, span);
      return h;
    },
    async flush(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        provider.forceFlush({ timeoutMillis: timeoutMs }).catch(() => undefined),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    },
  };
}
