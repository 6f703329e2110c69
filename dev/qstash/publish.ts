import { DEFAULT_RETRIES } from "./constants.ts";
import { parseDuration } from "./durations.ts";
import { FLOW_KEY_PATTERN, type FlowRef, INVALID_FLOW_VALUE, parseFlowValue } from "./flow.ts";
import { type HeaderList, stripPrefixed } from "./headers.ts";
import type { MessageSpec } from "./message.ts";

export type ParsedPublish =
  | { outcome: "ok"; spec: MessageSpec; dedupKey?: string }
  | { outcome: "invalid"; error: string }
  | { outcome: "unsupported"; error: string };

export interface PublishInput {
  destination: string;
  headers: Headers;
  body: Uint8Array;
  callerIp: string;
  now: number;
  /** The plan's maximum response duration; Upstash-Timeout can only shorten it. */
  maxTimeoutMs: number;
}

/**
 * The publish headers the stand-in serves: what lib/queue.ts sends (retries, notBefore,
 * deduplicationId, failureCallback and its retries, Flow Control's key and value), `Upstash-Timeout`
 * (a worker's delivery budget), `Upstash-Forward-*` (the SDK's `headers` option, the way trace context would travel)
 * and the SDK's telemetry. Every other `Upstash-*` header is a QStash feature the app does not
 * use (`Upstash-Delay`, `-Retry-Delay`, `-Callback`, `-Label`, `-Content-Based-Deduplication`,
 * `-Redact-Fields`, the failure callback's other options, ...): refused with a 501, since
 * ignoring it would answer differently from QStash.
 */
const SERVED = new Set([
  "upstash-method",
  "upstash-not-before",
  "upstash-retries",
  "upstash-timeout",
  "upstash-deduplication-id",
  "upstash-failure-callback",
  "upstash-failure-callback-retries",
  "upstash-flow-control-key",
  "upstash-flow-control-value",
]);
const servedPrefixes = [
  "upstash-forward-",
  "upstash-telemetry-",
  // Sent to the failure callback with the prefix stripped (the trace context travels this way).
  "upstash-failure-callback-forward-",
];

class Invalid extends Error {}

export function checkUrl(url: string, what = "destination url"): string {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
    throw new Invalid(`invalid ${what}: endpoint has invalid scheme, add http:// or https://`);
  }
  return url;
}

function retries(headers: Headers, name: string): number | undefined {
  const raw = headers.get(name);
  if (raw === null) return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new Invalid(`invalid ${name} header: ${raw}`);
  return Number(raw.trim());
}

/** The first `Upstash-*` header the stand-in does not serve, with the refusal it gets. */
function unserved(headers: Headers): string | undefined {
  for (const [name, value] of headers) {
    if (!name.startsWith("upstash-") || servedPrefixes.some((p) => name.startsWith(p))) continue;
    if (name === "upstash-method" && value.trim().toUpperCase() !== "POST")
      return `Upstash-Method ${value.trim().slice(0, 20)} is not served by the local stand-in (it delivers POST only)`;
    if (!SERVED.has(name)) return `${name} is not served by the local stand-in`;
  }
  return undefined;
}

/**
 * `Upstash-Flow-Control-Key` with `Upstash-Flow-Control-Value` (the openapi asks for both). A
 * value QStash cannot read gets its 400 (`INVALID_FLOW_VALUE`); a key outside the backend's
 * resource-name rule, or one header without the other, a 400 naming the header (the stand-in's
 * wording: QStash's own text for these is not documented).
 */
function flowControl(headers: Headers): FlowRef | undefined {
  const key = headers.get("Upstash-Flow-Control-Key");
  const value = headers.get("Upstash-Flow-Control-Value");
  if (key === null && value === null) return undefined;
  if (key === null || key.trim() === "")
    throw new Invalid("Upstash-Flow-Control-Key is required with Upstash-Flow-Control-Value");
  if (!FLOW_KEY_PATTERN.test(key))
    throw new Invalid(
      "invalid Upstash-Flow-Control-Key: only alphanumeric characters, hyphens, underscores and periods are allowed",
    );
  const limits = value === null ? undefined : parseFlowValue(value);
  if (!limits) throw new Invalid(INVALID_FLOW_VALUE);
  return { key, limits };
}

/** Turns a publish request into a message spec, or the 400/501 error the stand-in answers. */
export function parsePublish(input: PublishInput): ParsedPublish {
  const { headers, now } = input;
  // Every feature the app does not use: refused, never ignored.
  const refusal = unserved(headers);
  if (refusal !== undefined) return { outcome: "unsupported", error: refusal };
  // QStash reads a destination without a scheme as the name of a URL group (a topic), which
  // the stand-in does not serve: say so, rather than that the URL has no scheme.
  if (!/^[a-z][a-z0-9+.-]*:/i.test(input.destination))
    return {
      outcome: "unsupported",
      error: `publishing to a URL group (${input.destination.slice(0, 100)}) is not served by the local stand-in`,
    };
  try {
    const url = checkUrl(input.destination);
    const forwarded = stripPrefixed(headers, "Upstash-Forward-");
    const contentType = headers.get("content-type");
    const sent: HeaderList =
      contentType === null ? forwarded : [["content-type", contentType], ...forwarded];

    const notBeforeRaw = headers.get("Upstash-Not-Before");
    let notBefore = now;
    if (notBeforeRaw !== null) {
      if (!/^\d+$/.test(notBeforeRaw.trim()))
        throw new Invalid(`invalid Upstash-Not-Before header: ${notBeforeRaw}`);
      notBefore = Number(notBeforeRaw.trim()) * 1000;
    }
    const timeoutRaw = headers.get("Upstash-Timeout");
    const timeoutMs = timeoutRaw === null ? undefined : parseDuration(timeoutRaw);
    if (timeoutRaw !== null && timeoutMs === undefined)
      throw new Invalid(`invalid Upstash-Timeout header: ${timeoutRaw}`);

    const spec: MessageSpec = {
      url,
      headers: sent,
      body: input.body,
      maxRetries: retries(headers, "Upstash-Retries") ?? DEFAULT_RETRIES,
      notBefore,
      timeoutMs: Math.min(timeoutMs ?? input.maxTimeoutMs, input.maxTimeoutMs),
      callerIp: input.callerIp,
    };
    const failureCallback = headers.get("Upstash-Failure-Callback");
    if (failureCallback !== null) {
      spec.failureCallback = { url: checkUrl(failureCallback, "callback url") };
      const r = retries(headers, "Upstash-Failure-Callback-Retries");
      if (r !== undefined) spec.failureCallback.retries = r;
      const forward = stripPrefixed(headers, "Upstash-Failure-Callback-Forward-");
      if (forward.length > 0) spec.failureCallback.headers = forward;
    }

    const flow = flowControl(headers);
    if (flow) spec.flow = flow;

    const dedupId = headers.get("Upstash-Deduplication-Id");
    return dedupId === null
      ? { outcome: "ok", spec }
      : { outcome: "ok", spec, dedupKey: `id:${dedupId}` };
  } catch (error) {
    if (error instanceof Invalid) return { outcome: "invalid", error: error.message };
    throw error;
  }
}
