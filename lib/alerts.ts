/**
 * On-call alerts: Slack-compatible JSON to a webhook, deduplicated and throttled in Redis so an
 * incident sends a handful of messages, not thousands. Two ways in:
 * - `send` pages now (deduplicated, at most `maxPerWindow` per kind per window): for what only
 *   the operator can cause or fix (provider quota, a provider refusing our configuration, stuck
 *   jobs).
 * - `record` counts a failure a user can cause at will and never pages for it alone; `flush`
 *   (the sweeper's tick, and every `send`/`record` after a window closed) sends one summary per
 *   window (lib/alert-rollup.ts).
 * Nothing here throws: an alert is called after a refund has committed and must never block
 * it, undo it, or fail the request.
 */
import type { Redis } from "@upstash/redis";
import { createRollup, type RollupRedis, type Summary, type UserFailure } from "./alert-rollup.ts";
import { log } from "./log.ts";
import { redactSecrets, SENSITIVE_KEY } from "./redact.ts";

export type { UserFailure } from "./alert-rollup.ts";

/** What happened to an alert. */
export type AlertOutcome = "sent" | "deduplicated" | "throttled" | "logged" | "failed";

/** One alert. `fields` are shown as a table; never put prompts, outputs or secrets in them. */
export type Alert = {
  kind:
    | "dlq_failure"
    | "provider_quota_exhausted"
    | "provider_misconfigured"
    | "stuck_jobs"
    | (string & {});
  /** Alerts with the same key within `dedupSeconds` are sent once (e.g. the job id). */
  dedupKey: string;
  title: string;
  fields: Record<string, string | number | null>;
  /** @default the alerter's throttleSeconds */
  dedupSeconds?: number;
};

/** Options of {@link createAlerter}. */
export type AlerterOptions = {
  redis: Pick<Redis, "set" | "incr" | "expire" | "del"> & RollupRedis;
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
  /** Where each alert's links point ({@link alertLinks}). */
  links?: AlertLinkOptions;
};

/** `APP_URL` (the /ops page is on it) and `RUNBOOK_URL` (unset: the section is named, not linked). */
export type AlertLinkOptions = { appUrl?: string | undefined; runbookUrl?: string | undefined };

/**
 * Each alert kind's chart on the operator page (/ops#<chart>) and its runbook section (a stable
 * anchor in docs/RUNBOOK.md). A kind not listed links the page's top and the runbook's alerts.
 */
export const ALERT_LINKS: Record<string, { chart: string; runbook: string }> = {
  provider_quota_exhausted: { chart: "provider-429s", runbook: "provider-quota-exhausted" },
  provider_misconfigured: { chart: "failures", runbook: "provider-misconfigured" },
  usage_above_hold: { chart: "tokens", runbook: "usage-above-hold" },
  stuck_jobs: { chart: "stuck", runbook: "stuck-jobs" },
  user_failures: { chart: "failures", runbook: "user-failures" },
  dlq_failure: { chart: "failure-callbacks", runbook: "delivery-failed" },
  model_shutdown: { chart: "models", runbook: "model-shutdown" },
  model_retired: { chart: "models", runbook: "model-shutdown" },
};

/** The chart and runbook links of an alert: URLs where configured, else the places as text. */
export function alertLinks(
  kind: string,
  o: AlertLinkOptions = {},
): { chart: string; runbook: string; linked: { chart: boolean; runbook: boolean } } {
  const to = ALERT_LINKS[kind] ?? { chart: "", runbook: "alerts" };
  const hash = to.chart ? `#${to.chart}` : "";
  return {
    chart: o.appUrl ? `${o.appUrl}/ops${hash}` : `/ops${hash}`,
    runbook: o.runbookUrl
      ? `${o.runbookUrl}#${to.runbook}`
      : `docs/RUNBOOK.md#${to.runbook} (RUNBOOK_URL is not set)`,
    linked: { chart: Boolean(o.appUrl), runbook: Boolean(o.runbookUrl) },
  };
}

function clean(value: string | number | null): string {
  if (value === null) return "—";
  return redactSecrets(String(value))
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .slice(0, 300);
}

/**
 * The Slack incoming-webhook payload: `text` for notifications, `blocks` for the table, and a
 * last block with the alert's chart on /ops and its runbook section (links when configured).
 */
export function slackPayload(
  alert: Alert,
  links: AlertLinkOptions = {},
): { text: string; blocks: unknown[] } {
  const l = alertLinks(alert.kind, links);
  const chart = l.linked.chart ? `<${l.chart}|Chart on /ops>` : `Chart: ${l.chart}`;
  const runbook = l.linked.runbook ? `<${l.runbook}|Runbook>` : `Runbook: ${l.runbook}`;
  const fields = Object.entries(alert.fields)
    .filter(([k]) => !SENSITIVE_KEY.test(k))
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
      { type: "context", elements: [{ type: "mrkdwn", text: `${chart} · ${runbook}` }] },
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
 * await alerter.send({ kind: "stuck_jobs", dedupKey: findingId, title: "Sweeper ended 3 jobs", fields: { lease_expired: 3 } });
 * await alerter.record({ reason: "model_refused", userId }); // counted, summarized per window
 */
export function createAlerter(options: AlerterOptions): Alerter {
  const { redis, webhookUrl, throttleSeconds } = options;
  const maxPerWindow = options.maxPerWindow ?? 5;
  const doFetch = options.fetch ?? fetch;
  const now = options.now ?? (() => new Date());
  const prefix = options.prefix ?? "quota-jobs:alert";
  const rollup = createRollup({ redis, prefix, windowSeconds: throttleSeconds, now });

  /** POSTs to the webhook (or logs without one); true when on-call has it. */
  async function post(alert: Alert): Promise<boolean> {
    if (!webhookUrl) {
      logAlert(alert, { delivery: "no_webhook" });
      return true;
    }
    try {
      const res = await doFetch(webhookUrl, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(slackPayload(alert, options.links)),
        signal: AbortSignal.timeout(options.timeoutMs ?? 5000),
      });
      const text = (await res.text()).slice(0, 100);
      if (res.ok) return true;
      logAlert(alert, { delivery: "webhook_refused", status: res.status, response: text });
    } catch (err) {
      logAlert(alert, {
        delivery: "webhook_unreachable",
        error: err instanceof Error ? err : String(err),
      });
    }
    return false;
  }

  async function flush(): Promise<number> {
    try {
      return await rollup.flush((s) => post(summaryAlert(s)));
    } catch (err) {
      log.warn("alert_rollup_flush_failed", { error: err instanceof Error ? err : String(err) });
      return 0;
    }
  }

  function logAlert(alert: Alert, extra: Record<string, unknown> = {}) {
    const links = alertLinks(alert.kind, options.links);
    log.error("alert", {
      kind: alert.kind,
      title: alert.title,
      dedup: alert.dedupKey,
      fields: safeFields(alert),
      chart: links.chart,
      runbook: links.runbook,
      ...extra,
    });
  }

  return {
    flush,
    forget: (userId) => rollup.forget(userId).then(() => undefined),
    async record(failure) {
      try {
        await rollup.count(failure);
      } catch (err) {
        // No user named: a log line outlives an erasure (docs/RELIABILITY.md, data protection).
        log.error("alert_rollup_unavailable", {
          reason: failure.reason,
          error: err instanceof Error ? err : String(err),
        });
        return "logged";
      }
      await flush();
      return "counted";
    },
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

      const delivered = await post(alert);
      // The first alert after a window closed also sends that window's summary (after the page).
      await flush();
      if (delivered) return webhookUrl ? "sent" : "logged";
      await redis.del(dedupKey).catch(() => undefined);
      return "failed";
    },
  };
}

/** The alerter: pages (`send`), counted user failures (`record`) and their summaries (`flush`). */
export interface Alerter {
  /** Page now: deduplicated by `dedupKey`, at most `maxPerWindow` of a kind per window. */
  send(alert: Alert): Promise<AlertOutcome>;
  /**
   * Count a failure a user can cause (no page of its own); "logged" when Redis is down.
   * @example await alerts.record({ reason: "delivery_failed", userId: job.user_id });
   */
  record(failure: UserFailure): Promise<"counted" | "logged">;
  /** Send the summary of every closed window not summarized yet; the number sent. */
  flush(): Promise<number>;
  /** The erasure: the user's id out of every window's counts kept (throws when Redis does). */
  forget(userId: string): Promise<void>;
}

/** One summary page for a window of user-caused failures: counts by reason, the top users. */
export function summaryAlert(s: Summary): Alert {
  // HH:MM, or HH:MM:SS for windows that are not whole minutes.
  const wholeMinutes = (s.to.getTime() - s.from.getTime()) % 60_000 === 0;
  const hhmm = (d: Date) => d.toISOString().slice(11, wholeMinutes ? 16 : 19);
  const reasons = Object.entries(s.byReason).sort((a, b) => b[1] - a[1]);
  return {
    kind: "user_failures",
    dedupKey: `window:${s.window}`,
    title: `${s.total} user-caused failure(s) from ${hhmm(s.from)} to ${hhmm(s.to)} UTC: ${reasons
      .map(([r, n]) => `${r} ${n}`)
      .join(", ")}`,
    fields: {
      ...Object.fromEntries(reasons.slice(0, 6)),
      window: s.from.toISOString(),
      total: s.total,
      users: s.users,
      topUsers: s.topUsers.map((u) => `${u.userId} ×${u.count}`).join(", ") || null,
    },
  };
}

function safeFields(alert: Alert): Record<string, string | number | null> {
  const out: Record<string, string | number | null> = {};
  for (const [k, v] of Object.entries(alert.fields)) {
    if (!SENSITIVE_KEY.test(k)) out[k] = typeof v === "string" ? redactSecrets(v) : v;
  }
  return out;
}
