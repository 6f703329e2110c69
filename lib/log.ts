/**
 * Structured JSON logs, one object per line. Fields whose names look like credentials or user
 * content are redacted, so no token, key or prompt reaches a log line by accident.
 */
import { redactSecrets, SENSITIVE_KEY } from "./redact.ts";

type Level = "debug" | "info" | "warn" | "error";
export type LogFields = Record<string, unknown>;

function redact(value: unknown, depth = 0): unknown {
  if (typeof value === "string") return redactSecrets(value);
  if (depth > 4 || value === null || typeof value !== "object") return value;
  if (value instanceof Error) return { name: value.name, message: redactSecrets(value.message) };
  if (Array.isArray(value)) return value.map((v) => redact(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    out[k] = SENSITIVE_KEY.test(k) && k !== "jobId" ? "[redacted]" : redact(v, depth + 1);
  }
  return out;
}

export type Sink = (line: string, level: Level) => void;
let sink: Sink = (line, level) => {
  if (level === "error" || level === "warn") console.error(line);
  else console.log(line);
};

/** Replace where log lines go (tests capture them). Returns the previous sink. */
export function setLogSink(next: Sink): Sink {
  const previous = sink;
  sink = next;
  return previous;
}

function write(level: Level, event: string, fields: LogFields = {}) {
  const record = { level, event, time: new Date().toISOString(), ...(redact(fields) as LogFields) };
  sink(JSON.stringify(record), level);
}

export const log = {
  debug: (event: string, fields?: LogFields) => write("debug", event, fields),
  info: (event: string, fields?: LogFields) => write("info", event, fields),
  warn: (event: string, fields?: LogFields) => write("warn", event, fields),
  error: (event: string, fields?: LogFields) => write("error", event, fields),
};
export type Logger = typeof log;
