/**
 * On-call alerts: Slack-compatible JSON to a webhook, deduplicated and throttled in Redis so an
 * incident sends a handful of messages, not thousands. `send` never throws: an alert is called
 * after a refund has committed and must never block it, undo it, or fail the request.
 */
import type { Redis } from "@upstash/redis";
import { log } from "./log.ts";

/** What happened to an alert. */
export type AlertOutcome = "sent" | "deduplicated" | "throttled" | "logged" | "failed";

/** One alert. `fields` are shown as a table; never put prompts, outputs or secrets in them. */
export type Alert = {
  kind: "dlq_failure" | "provider_quota_exhausted" | "stuck_jobs" | (string & {});
  /** Alerts with the same key within `dedupSeconds` are sent once (e.g. the job id). */
  dedupKey: string;
  title: string;
  fields: Record<string, string | number | null>;
  /** @default the alerter's throttleSeconds */
  dedupSeconds?: number;
};

/** Options of {@link createAlerter}. */
export type AlerterOptions = {
  redis: Pick<Redis, "set" | "incr" | "expire" | "del">;
  /** `ALERT_WEBHOOK_URL`; unset → each alert is a structured error log line. */
  webhookUrl?: string | undefined;
  /** The throttle window (and default dedup window). */
  throttleSeconds: number;
  /** Alerts of one kind per throttle window. @default 5 */
  maxPerWindow?: number;
  /** Give up on the webhook after this long. @default 5000 */
  timeoutMs?: number;
  fetch?: typeof fetch;
  now?: () => Date;
  /** Redis key prefix. @default "quota-jobs:alert" */
  prefix?: string;
};

// Keys that could hold user content or credentials are dropped from the message entirely.
const SENSITIVE =
  /(token|secret|password|authorization|api_?key|key$|prompt|output|signature|cookie)/i;
const SECRET_VALUE = /\b(eyJ[\w-]{10,}\.[\w-]+\.[\w-]+|sk-[\w-]{8,}|sig_\w{8,})/g;

function clean(value: string | number | null): string {
  if (value === null) return "—";
  return String(value)
    .replace(SECRET_VALUE, "[redacted]")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .slice(0, 300);
}

/** The Slack incoming-webhook payload: `text` for notifications, `blocks` for the table. */
export function slackPayload(alert: Alert): { text: string; blocks: unknown[] } {
  const fields = Object.entries(alert.fields)
    .filter(([k]) => !SENSITIVE.test(k))
    .slice(0, 10) // Slack allows at most 10 fields in a section
    .map(([k, v]) => ({ type: "mrkdwn", text: `*${clean(k)}*\n${clean(v)}` }));
  const title = clean(alert.title);
  return {
    text: `[${clean(alert.kind)}] ${title}`,
    blocks: [
      {
        type: "header",
        text: { type: "plain_text", text: `${alert.kind}: ${alert.title}`.slice(0, 150) },
      },
      ...(fields.length > 0 ? [{ type: "section", fields }] : []),
    ],
  };
}

/**
 * Build the alerter. `send` first claims `dedupKey` (SET NX EX), then counts the alert against
 * its kind's window (INCR + EXPIRE; at most `maxPerWindow`), then POSTs to the webhook, or
 * writes an error log line when no webhook is configured.
 *
 * Redis down → the alert is written as an error log line ("logged") instead of posted
 * unthrottled: in an incident that takes Redis with it, thousands of webhook calls would bury
 * on-call; the log line keeps the record. A webhook that fails → logged, the dedup claim is
 * released (so a retried DLQ callback can alert again), "failed".
 *
 * @example
 * const alerter = createAlerter({ redis, webhookUrl, throttleSeconds: 900 });
 * await alerter.send({ kind: "dlq_failure", dedupKey: jobId, title: "Job failed", fields: { jobId } });
 */
export function createAlerter(options: AlerterOptions): {
  send(alert: Alert): Promise<AlertOutcome>;
} {
  const { redis, webhookUrl, throttleSeconds } = options;
  const maxPerWindow = options.maxPerWindow ?? 5;
  const doFetch = options.fetch ?? fetch;
  const now = options.now ?? (() => new Date());
  const prefix = options.prefix ?? "quota-jobs:alert";

  function logAlert(alert: Alert, extra: Record<string, unknown> = {}) {
    log.error("alert", {
      kind: alert.kind,
      title: alert.title,
      dedup: alert.dedupKey,
      fields: safeFields(alert),
      ...extra,
    });
  }

  return {
    async send(alert) {
      const dedupKey = `${prefix}:dedup:${alert.kind}:${alert.dedupKey}`;
      try {
        const claimed = await redis.set(dedupKey, 1, {
          nx: true,
          ex: alert.dedupSeconds ?? throttleSeconds,
        });
        if (claimed === null) return "deduplicated";
        const window = Math.floor(now().getTime() / 1000 / throttleSeconds);
        const countKey = `${prefix}:count:${alert.kind}:${window}`;
        const count = await redis.incr(countKey);
        if (count === 1) await redis.expire(countKey, throttleSeconds * 2);
        if (count > maxPerWindow) {
          log.warn("alert_throttled", {
            kind: alert.kind,
            title: alert.title,
            dedup: alert.dedupKey,
          });
          return "throttled";
        }
      } catch (err) {
        logAlert(alert, {
          delivery: "redis_unavailable",
          error: err instanceof Error ? err : String(err),
        });
        return "logged";
      }

      if (!webhookUrl) {
        logAlert(alert, { delivery: "no_webhook" });
        return "logged";
      }
      try {
        const res = await doFetch(webhookUrl, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(slackPayload(alert)),
          signal: AbortSignal.timeout(options.timeoutMs ?? 5000),
        });
        const text = (await res.text()).slice(0, 100);
        if (res.ok) return "sent";
        logAlert(alert, { delivery: "webhook_refused", status: res.status, response: text });
      } catch (err) {
        logAlert(alert, {
          delivery: "webhook_unreachable",
          error: err instanceof Error ? err : String(err),
        });
      }
      await redis.del(dedupKey).catch(() => undefined);
      return "failed";
    },
  };
}

function safeFields(alert: Alert): Record<string, string | number | null> {
  const out: Record<string, string | number | null> = {};
  for (const [k, v] of Object.entries(alert.fields)) {
    if (!SENSITIVE.test(k))
      out[k] = typeof v === "string" ? v.replace(SECRET_VALUE, "[redacted]") : v;
  }
  return out;
}
