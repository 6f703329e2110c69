/** The shapes lib/trace.ts and the lazily loaded lib/trace-sdk.ts share, and W3C traceparent parsing. */

/** What a span may carry: ids, counts, statuses, reasons. Null/undefined values are dropped. */
export type Attrs = Record<string, string | number | boolean | null | undefined>;

/** One span, as the SDK module hands it out. */
export interface SpanHandle {
  set(attrs: Attrs): void;
  event(name: string, attrs?: Attrs): void;
  /** Marks the span failed; `reason` is a code or an error class name, never a message. */
  fail(reason: string): void;
  end(endTime?: number): void;
  /** The W3C traceparent naming this span. */
  traceparent(): string;
}

/** How a span starts: its parent (a span or a remote traceparent) or the trace it opens. */
export interface StartOptions {
  parent?: SpanHandle | string | undefined;
  /** A root span in this trace (32 hex), when there is no parent. */
  traceId?: string | undefined;
  startTime?: number | undefined;
  attrs?: Attrs | undefined;
  links?: SpanHandle[] | undefined;
}

/** What lib/trace-sdk.ts provides once loaded. */
export interface TraceBackend {
  start(name: string, options: StartOptions): SpanHandle;
  /** Exports what ended; resolves within `timeoutMs` whatever the collector does. */
  flush(timeoutMs: number): Promise<void>;
}

/** The `00-<trace>-<span>-<flags>` form, version 00 (W3C Trace Context). */
export function parseTraceparent(
  value: string,
): { traceId: string; spanId: string; sampled: boolean } | null {
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(value.trim());
  if (!m?.[1] || !m[2] || !m[3] || /^0+$/.test(m[1]) || /^0+$/.test(m[2])) return null;
  return { traceId: m[1], spanId: m[2], sampled: (Number.parseInt(m[3], 16) & 1) === 1 };
}
