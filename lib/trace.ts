/**
 * Traces that follow one job across its invocations (docs/DESIGN.md#traces): the enqueue, every
 * worker delivery, a requeue's or the sweeper's republish, the failure callback and a cancel are
 * spans of ONE trace, whose id is the job's id (its UUID without dashes). The W3C `traceparent`
 * travels in the QStash message (`Upstash-Forward-traceparent`, and
 * `Upstash-Failure-Callback-Forward-traceparent` for the callback) so deliveries nest under the
 * publish that sent them; the id alone lets an invocation that only knows the job (the sweeper, a
 * cancel) join the trace without any stored context.
 *
 * OFF unless an OTLP endpoint is configured: then every function here is a no-op and nothing of
 * the OpenTelemetry SDK is loaded (it is loaded with `import()` on the first traced request,
 * lib/trace-sdk.ts). Attributes are ids, counts, statuses and reasons only: never a prompt, an
 * input, an output, a model's error text, an email or a token.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import {
  type Attrs,
  parseTraceparent,
  type SpanHandle,
  type TraceBackend,
} from "./trace-context.ts";

export type { Attrs, SpanHandle, StartOptions, TraceBackend } from "./trace-context.ts";
export { parseTraceparent } from "./trace-context.ts";

/** The settings tracing reads (lib/config.ts). */
export interface TraceConfig {
  otelExporterOtlpEndpoint?: string | undefined;
  otelExporterOtlpTracesEndpoint?: string | undefined;
  otelExporterOtlpHeaders?: Record<string, string> | undefined;
}

/**
 * How long a function waits for its spans to reach the collector before it answers: a dead or
 * slow collector costs each traced request at most this, and never fails it.
 */
export const FLUSH_TIMEOUT_MS = 500;

/** The collector URL, or null: tracing is off. The signal-specific variable wins, as in the spec. */
export function tracesUrl(config: TraceConfig): string | null {
  if (config.otelExporterOtlpTracesEndpoint) return config.otelExporterOtlpTracesEndpoint;
  if (config.otelExporterOtlpEndpoint)
    return `${config.otelExporterOtlpEndpoint.replace(/\/+$/, "")}/v1/traces`;
  return null;
}

let backend: Promise<TraceBackend | null> | undefined;

/** The instance's backend, loaded on the first traced request; null when tracing is off. */
function backendFor(config: TraceConfig): Promise<TraceBackend | null> {
  const url = tracesUrl(config);
  if (url === null) return Promise.resolve(null);
  backend ??= import("./trace-sdk.ts")
    .then((m) => m.createBackend({ url, headers: config.otelExporterOtlpHeaders ?? {} }))
    .catch(() => null);
  return backend;
}

/** For tests: use this backend (or none) instead of the configured one. */
export function setTraceBackend(b: TraceBackend | null | undefined): void {
  backend = b === undefined ? undefined : Promise.resolve(b);
}

interface Step {
  name: string;
  attrs: Attrs;
  start: number;
  end: number;
  failed: string | null;
}

/** One traced invocation: its root span opens once its trace is known (see `joinJob`). */
interface Scope {
  backend: TraceBackend;
  name: string;
  start: number;
  attrs: Attrs;
  root: SpanHandle | null;
  /** Steps timed before the root opened: written as its children when it does. */
  pending: Step[];
}
interface Current {
  scope: Scope;
  span: SpanHandle | null;
}

const als = new AsyncLocalStorage<Current>();

/** Runs `fn` as `span`'s body: its failure is recorded on the span, which ends either way. */
async function inSpan<T>(scope: Scope, span: SpanHandle, fn: () => Promise<T>): Promise<T> {
  try {
    return await als.run({ scope, span }, fn);
  } catch (error) {
    span.fail(reasonOf(error));
    throw error;
  } finally {
    span.end();
  }
}

const jobTraceId = (jobId: string): string | undefined => {
  const hex = jobId.replace(/-/g, "").toLowerCase();
  return /^[0-9a-f]{32}$/.test(hex) && !/^0+$/.test(hex) ? hex : undefined;
};

function open(scope: Scope, options: { parent?: string; traceId?: string }): SpanHandle {
  if (scope.root) return scope.root;
  const root = scope.backend.start(scope.name, {
    ...options,
    startTime: scope.start,
    attrs: scope.attrs,
  });
  scope.root = root;
  for (const step of scope.pending) {
    const span = scope.backend.start(step.name, {
      parent: root,
      startTime: step.start,
      attrs: step.attrs,
    });
    if (step.failed) span.fail(step.failed);
    span.end(step.end);
  }
  scope.pending = [];
  return root;
}

const reasonOf = (error: unknown): string => {
  if (error && typeof error === "object") {
    const e = error as { code?: unknown; name?: unknown };
    if (typeof e.code === "string" && /^[a-z_]{1,40}$/.test(e.code)) return e.code;
    if (typeof e.name === "string") return e.name.slice(0, 60);
  }
  return "error";
};

/**
 * Runs one invocation (`name`, e.g. "POST /api/jobs") as a traced request: its spans are
 * exported before it returns, within {@link FLUSH_TIMEOUT_MS}. A thrown error is recorded by
 * its class (or `HttpError` code and status) and rethrown. Off: `run()` and nothing else.
 *
 * @example return traceRequest(d.config, "POST /api/worker", async () => { ... });
 */
export async function traceRequest<T extends Response>(
  config: TraceConfig,
  name: string,
  run: () => Promise<T>,
): Promise<T> {
  const b = await backendFor(config);
  if (b === null) return run();
  const scope: Scope = { backend: b, name, start: Date.now(), attrs: {}, root: null, pending: [] };
  try {
    const res = await als.run({ scope, span: null }, run);
    const root = open(scope, {});
    root.set({ "http.response.status_code": res.status });
    if (res.status >= 500) root.fail(`http_${res.status}`);
    root.end();
    return res;
  } catch (error) {
    const root = open(scope, {});
    const status = (error as { status?: unknown } | null)?.status;
    root.set({ "http.response.status_code": typeof status === "number" ? status : null });
    root.fail(reasonOf(error));
    root.end();
    throw error;
  } finally {
    await b.flush(FLUSH_TIMEOUT_MS).catch(() => undefined);
  }
}

/** Opens the invocation's root span in a trace of its own (the sweeper's tick): a no-op if open. */
export function startTrace(): void {
  const c = als.getStore();
  if (c) open(c.scope, {});
}

/**
 * The invocation belongs to this job: its root span opens in the job's trace (a no-op once it is
 * open). `traceparent`, when given (a QStash delivery, after its signature was verified), makes
 * the root a child of the span that published the message; a malformed one is ignored.
 */
export function joinJob(jobId: string, traceparent?: string | null): void {
  const c = als.getStore();
  if (!c) return;
  c.scope.attrs["job.id"] = jobId;
  c.scope.root?.set({ "job.id": jobId });
  const parent = traceparent && parseTraceparent(traceparent) ? traceparent : undefined;
  const traceId = jobTraceId(jobId);
  if (parent) open(c.scope, { parent });
  else if (traceId) open(c.scope, { traceId });
}

/** Attributes of the invocation's root span (before or after it opened). */
export function annotate(attrs: Attrs): void {
  const c = als.getStore();
  if (!c) return;
  Object.assign(c.scope.attrs, attrs);
  c.scope.root?.set(attrs);
}

/** Attributes of the innermost span. */
export function annotateSpan(attrs: Attrs): void {
  const c = als.getStore();
  if (!c) return;
  if (c.span) c.span.set(attrs);
  else annotate(attrs);
}

/** An event on the innermost span (e.g. a progress write on the model call). */
export function traceEvent(name: string, attrs?: Attrs): void {
  als.getStore()?.span?.event(name, attrs);
}

/**
 * Runs `fn` as a child span `name` of the current one. Before the invocation's trace is known
 * (an enqueue's auth and SQL call, before the job id exists) the step is timed and written when
 * the root opens. Off: `fn()`.
 */
export async function traced<T>(name: string, attrs: Attrs, fn: () => Promise<T>): Promise<T> {
  const c = als.getStore();
  if (!c) return fn();
  const parent = c.span ?? c.scope.root;
  if (!parent) {
    const step: Step = { name, attrs: { ...attrs }, start: Date.now(), end: 0, failed: null };
    c.scope.pending.push(step);
    try {
      return await fn();
    } catch (error) {
      step.failed = reasonOf(error);
      throw error;
    } finally {
      step.end = Date.now();
    }
  }
  const span = c.scope.backend.start(name, { parent, attrs });
  return inSpan(c.scope, span, fn);
}

/**
 * Runs `fn` as a root span in a job's trace, linked to the current span: the sweeper's republish
 * of a job it found, so the delivery it causes lands in the job's trace.
 */
export async function inJobTrace<T>(
  jobId: string,
  name: string,
  attrs: Attrs,
  fn: () => Promise<T>,
): Promise<T> {
  const c = als.getStore();
  const traceId = jobTraceId(jobId);
  if (!c || !traceId) return fn();
  const from = c.span ?? c.scope.root;
  const span = c.scope.backend.start(name, {
    traceId,
    attrs: { ...attrs, "job.id": jobId },
    links: from ? [from] : [],
  });
  return inSpan(c.scope, span, fn);
}

/**
 * The headers a QStash publish carries so the delivery (and its failure callback) continue this
 * trace: the SDK forwards `traceparent` as `Upstash-Forward-traceparent`; the failure callback
 * gets its own forwarded copy. Empty when tracing is off or nothing is being traced.
 */
export function traceHeaders(): Record<string, string> {
  const c = als.getStore();
  const span = c?.span ?? c?.scope.root;
  if (!span) return {};
  const tp = span.traceparent();
  return { traceparent: tp, "Upstash-Failure-Callback-Forward-traceparent": tp };
}

/**
 * The same port, each method (but `skip`) a child span `${prefix} ${method}` carrying the job id
 * it was called with and the outcome it answered (both ids and enum values, never content).
 */
export function tracedPort<T extends object>(prefix: string, port: T, skip: string[] = []): T {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(port)) {
    if (typeof value !== "function" || skip.includes(name)) {
      out[name] = value;
      continue;
    }
    out[name] = (...args: unknown[]) => {
      const first = args[0];
      const jobId =
        typeof first === "string"
          ? first
          : typeof (first as { jobId?: unknown } | null)?.jobId === "string"
            ? (first as { jobId: string }).jobId
            : undefined;
      return traced(`${prefix} ${name}`, { "job.id": jobId }, async () => {
        const r: unknown = await value.apply(port, args);
        const outcome = (r as { outcome?: unknown } | null)?.outcome;
        if (typeof outcome === "string") annotateSpan({ outcome });
        return r;
      });
    };
  }
  return out as T;
}
