import { createHash } from "node:crypto";
import { DEFAULT_RETRIES } from "./constants.ts";
import { parseDuration } from "./durations.ts";
import { compileExpression, ExpressionError } from "./expression.ts";
import { type HeaderList, stripPrefixed } from "./headers.ts";
import type { CallbackConfig, MessageSpec } from "./message.ts";

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

function duration(headers: Headers, name: string): number | undefined {
  const raw = headers.get(name);
  if (raw === null) return undefined;
  const ms = parseDuration(raw);
  if (ms === undefined) throw new Invalid(`invalid ${name} header: ${raw}`);
  return ms;
}

function retries(headers: Headers, name: string): number | undefined {
  const raw = headers.get(name);
  if (raw === null) return undefined;
  if (!/^\d+$/.test(raw.trim())) throw new Invalid(`invalid ${name} header: ${raw}`);
  return Number(raw.trim());
}

function retryDelay(headers: Headers, name: string): string | undefined {
  const raw = headers.get(name);
  if (raw === null) return undefined;
  try {
    compileExpression(raw);
  } catch (error) {
    if (error instanceof ExpressionError)
      throw new Invalid(`invalid ${name} header: ${error.message}`);
    throw error;
  }
  return raw;
}

function method(headers: Headers, name: string): string {
  const raw = (headers.get(name) ?? "POST").trim().toUpperCase();
  if (!/^[A-Z]+$/.test(raw)) throw new Invalid(`invalid ${name} header: ${raw}`);
  return raw;
}

/** Upstash-Callback-* or Upstash-Failure-Callback-*: the same options under two prefixes. */
function callbackConfig(
  headers: Headers,
  prefix: string,
  maxTimeoutMs: number,
): CallbackConfig | undefined {
  const url = headers.get(prefix);
  if (url === null) return undefined;
  const timeoutMs = duration(headers, `${prefix}-Timeout`);
  const config: CallbackConfig = {
    url: checkUrl(url, "callback url"),
    method: method(headers, `${prefix}-Method`),
    headers: stripPrefixed(headers, `${prefix}-Forward-`),
  };
  const r = retries(headers, `${prefix}-Retries`);
  if (r !== undefined) config.retries = r;
  const d = retryDelay(headers, `${prefix}-Retry-Delay`);
  if (d !== undefined) config.retryDelay = d;
  if (timeoutMs !== undefined) config.timeoutMs = Math.min(timeoutMs, maxTimeoutMs);
  const delayMs = duration(headers, `${prefix}-Delay`);
  if (delayMs !== undefined) config.delayMs = delayMs;
  return config;
}

function contentHash(url: string, body: Uint8Array, forwarded: HeaderList): string {
  const hash = createHash("sha256").update(url).update("\0").update(body).update("\0");
  for (const [name, value] of [...forwarded].sort(([a], [b]) => a.localeCompare(b))) {
    hash.update(`${name}:${value}\n`);
  }
  return hash.digest("hex");
}

/** Turns a publish request into a message spec, or the 400 error QStash would answer. */
export function parsePublish(input: PublishInput): ParsedPublish {
  const { headers, now } = input;
  // Flow control changes when deliveries happen; ignoring it would deliver faster than QStash.
  const flow = ["Upstash-Flow-Control-Key", "Upstash-Flow-Control-Value"].find((h) =>
    headers.has(h),
  );
  if (flow !== undefined)
    return { outcome: "unsupported", error: `${flow} is not supported by the qstash stand-in` };
  // QStash reads a destination without a scheme as the name of a URL group (a topic), which
  // the stand-in does not serve: say so, rather than that the URL has no scheme.
  if (!/^[a-z][a-z0-9+.-]*:/i.test(input.destination))
    return {
      outcome: "unsupported",
      error: `publishing to a URL group (${input.destination.slice(0, 100)}) is not supported by the qstash stand-in`,
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
    } else {
      notBefore = now + (duration(headers, "Upstash-Delay") ?? 0);
    }

    const spec: MessageSpec = {
      url,
      method: method(headers, "Upstash-Method"),
      headers: sent,
      body: input.body,
      maxRetries: retries(headers, "Upstash-Retries") ?? DEFAULT_RETRIES,
      notBefore,
      labels: (headers.get("Upstash-Label") ?? "")
        .split(",")
        .map((l) => l.trim())
        .filter(Boolean),
      callerIp: input.callerIp,
    };
    const delayExpression = retryDelay(headers, "Upstash-Retry-Delay");
    if (delayExpression !== undefined) spec.retryDelay = delayExpression;
    const timeoutMs = duration(headers, "Upstash-Timeout");
    spec.timeoutMs = Math.min(timeoutMs ?? input.maxTimeoutMs, input.maxTimeoutMs);
    const callback = callbackConfig(headers, "Upstash-Callback", input.maxTimeoutMs);
    if (callback) spec.callback = callback;
    const failureCallback = callbackConfig(headers, "Upstash-Failure-Callback", input.maxTimeoutMs);
    if (failureCallback) spec.failureCallback = failureCallback;

    const dedupId = headers.get("Upstash-Deduplication-Id");
    if (dedupId !== null) return { outcome: "ok", spec, dedupKey: `id:${dedupId}` };
    if (headers.get("Upstash-Content-Based-Deduplication")?.toLowerCase() === "true") {
      return { outcome: "ok", spec, dedupKey: `content:${contentHash(url, input.body, sent)}` };
    }
    return { outcome: "ok", spec };
  } catch (error) {
    if (error instanceof Invalid) return { outcome: "invalid", error: error.message };
    throw error;
  }
}
