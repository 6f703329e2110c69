/**
 * An OTLP/HTTP trace receiver for the local stack: the app's spans (OTEL_EXPORTER_OTLP_ENDPOINT)
 * land here, one line each (`[trace] <trace id, 8 hex> <span name> <duration> <key attributes>`),
 * and are kept for tests.
 *
 * `POST /v1/traces` in the JSON encoding, what the app's exporter sends
 * (@opentelemetry/exporter-trace-otlp-http: `Content-Type: application/json`, ids as hex, as
 * the OTLP specification's JSON mapping says). The binary protobuf encoding would need a decoder
 * this project does not carry: refused with 415, as the specification lets a server that does not
 * support an encoding do. Success is `200 {"partialSuccess":{}}` (ExportTraceServiceResponse).
 */
import { type Receiver, type ReceiverOptions, serve } from "./http/serve.ts";

/** One received span, its attributes flattened to plain values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** "" for a root span. */
  parentSpanId: string;
  name: string;
  startMs: number;
  endMs: number;
  attributes: Record<string, string | number | boolean>;
  events: { name: string; attributes: Record<string, string | number | boolean> }[];
  links: { traceId: string; spanId: string }[];
  /** 2 = ERROR (OTLP's StatusCode). */
  status: number;
  /** The resource's `service.name`. */
  service: string;
}

export type OtlpReceiverOptions = ReceiverOptions;

/** `url` is the base URL to put in OTEL_EXPORTER_OTLP_ENDPOINT. */
export interface OtlpReceiver extends Receiver {
  spans(): ReceivedSpan[];
}

type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
};
type KeyValue = { key: string; value?: AnyValue };

function plainValue(v: AnyValue | undefined): string | number | boolean | undefined {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return undefined;
}

function flat(kvs: KeyValue[] | undefined): Record<string, string | number | boolean> {
  const out: Record<string, string | number | boolean> = {};
  for (const kv of kvs ?? []) {
    const v = plainValue(kv.value);
    if (v !== undefined) out[kv.key] = v;
  }
  return out;
}

const nanosToMs = (n: unknown) => Number(BigInt(String(n ?? 0)) / 1_000_000n);

/** Every span of an ExportTraceServiceRequest in the JSON encoding. */
export function spansOf(body: unknown): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  const resourceSpans = (body as { resourceSpans?: unknown[] })?.resourceSpans;
  if (!Array.isArray(resourceSpans)) throw new Error("no resourceSpans");
  for (const rs of resourceSpans as {
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: { spans?: Record<string, unknown>[] }[];
  }[]) {
    const service = String(flat(rs.resource?.attributes)["service.name"] ?? "");
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: String(s.traceId ?? ""),
          spanId: String(s.spanId ?? ""),
          parentSpanId: String(s.parentSpanId ?? ""),
          name: String(s.name ?? ""),
          startMs: nanosToMs(s.startTimeUnixNano),
          endMs: nanosToMs(s.endTimeUnixNano),
          attributes: flat(s.attributes as KeyValue[] | undefined),
          events: ((s.events as { name?: string; attributes?: KeyValue[] }[]) ?? []).map((e) => ({
            name: String(e.name ?? ""),
            attributes: flat(e.attributes),
          })),
          links: ((s.links as { traceId?: string; spanId?: string }[]) ?? []).map((l) => ({
            traceId: String(l.traceId ?? ""),
            spanId: String(l.spanId ?? ""),
          })),
          status: Number((s.status as { code?: number } | undefined)?.code ?? 0),
          service,
        });
      }
    }
  }
  return out;
}

const KEY_ATTRIBUTES = [
  "job.id",
  "job.outcome",
  "outcome",
  "job.attempt",
  "http.response.status_code",
  "gen_ai.usage.input_tokens",
  "gen_ai.usage.output_tokens",
  "error.type",
];

/** The line printed for one span. */
export function describeSpan(s: ReceivedSpan): string {
  const attrs = KEY_ATTRIBUTES.filter((k) => s.attributes[k] !== undefined).map(
    (k) =>
      `${k === "job.id" ? "job" : k}=${k === "job.id" ? String(s.attributes[k]).slice(0, 8) : s.attributes[k]}`,
  );
  return `[trace] ${s.traceId.slice(0, 8)} ${s.name} ${s.endMs - s.startMs}ms${attrs.length ? ` ${attrs.join(" ")}` : ""}`;
}

export async function startOtlpReceiver(options: OtlpReceiverOptions): Promise<OtlpReceiver> {
  const log = options.log ?? (() => {});
  let received: ReceivedSpan[] = [];
  const plain = (status: number, text: string, headers: Record<string, string> = {}) =>
    new Response(text, { status, headers: { "content-type": "text/plain", ...headers } });
  const server = await serve(
    async (request) => {
      const path = new URL(request.url).pathname;
      if (path !== "/v1/traces") return plain(404, "not found");
      if (request.method !== "POST") return plain(405, "method not allowed", { allow: "POST" });
      const type = (request.headers.get("content-type") ?? "").split(";")[0]?.trim();
      if (type !== "application/json")
        return plain(415, "only the OTLP/HTTP JSON encoding (application/json) is served here");
      let spans: ReceivedSpan[];
      try {
        spans = spansOf(JSON.parse(await request.text()));
      } catch {
        return plain(400, "not an ExportTraceServiceRequest in JSON");
      }
      received.push(...spans);
      for (const s of spans) log(describeSpan(s));
      return new Response(JSON.stringify({ partialSuccess: {} }), {
        headers: { "content-type": "application/json" },
      });
    },
    { port: options.port, host: options.host ?? "127.0.0.1", name: "the trace receiver" },
  );
  return {
    url: server.url,
    spans: () => [...received],
    clear: () => {
      received = [];
    },
    close: server.close,
  };
}
