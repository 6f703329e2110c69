/**
 * Errors that cross a boundary. Each carries what the edge needs to answer (a status, a code,
 * a retry hint); `lib/http.ts` maps them to a response in exactly one place.
 */

/** A refusal the client caused or must know about: mapped to `status` with `{error:{code,message}}`. */
export class HttpError extends Error {
  override readonly name = "HttpError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: Record<string, string> = {},
    readonly body: Record<string, unknown> = {},
  ) {
    super(message);
  }
}

/**
 * A database call that did not say what happened (network failure, 5xx, serialization failure,
 * statement timeout, unknown function...). Never "zero rows": the edge answers 5xx so that
 * QStash or cron retries. See docs/DESIGN.md#a-write-error-read-as-already-done for what happens when this is mistaken for a no-op.
 */
export class DatabaseError extends Error {
  override readonly name = "DatabaseError";
  constructor(
    message: string,
    readonly details: { fn: string; status: number; code: string },
  ) {
    super(message);
  }
}

/** A dependency we publish to (QStash) refused or could not be reached. */
export class UpstreamError extends Error {
  override readonly name = "UpstreamError";
  constructor(
    readonly service: "qstash" | "redis" | "model" | "webhook",
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

/** The environment is missing or malformed; lists every problem at once. */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  constructor(readonly problems: string[]) {
    super(`invalid configuration:\n${problems.map((p) => `  - ${p}`).join("\n")}`);
  }
}
