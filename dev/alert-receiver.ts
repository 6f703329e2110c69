/**
 * A Slack-compatible incoming-webhook receiver for the local stack: the app's on-call alerts
 * (ALERT_WEBHOOK_URL) land here, are printed, and are kept for tests. Answers `ok` like Slack.
 */
import { type Receiver, type ReceiverOptions, serve } from "./http/serve.ts";

export type AlertReceiverOptions = ReceiverOptions;

/** `url` is the webhook URL to put in ALERT_WEBHOOK_URL. */
export interface AlertReceiver extends Receiver {
  /** Every JSON body received, oldest first. */
  received(): unknown[];
}

/** One readable line for a Slack payload: its `text` and the fields of its section blocks. */
export function describeAlert(payload: unknown): string {
  if (!payload || typeof payload !== "object") return String(payload);
  const p = payload as { text?: unknown; blocks?: unknown };
  const fields: string[] = [];
  if (Array.isArray(p.blocks)) {
    for (const block of p.blocks as { fields?: { text?: unknown }[] }[]) {
      for (const f of block.fields ?? []) {
        if (typeof f.text === "string") fields.push(f.text.replace(/^\*(.+?)\*\n/, "$1="));
      }
    }
  }
  const text = typeof p.text === "string" ? p.text : JSON.stringify(payload);
  return fields.length > 0 ? `${text} | ${fields.join(" ")}` : text;
}

export async function startAlertReceiver(options: AlertReceiverOptions): Promise<AlertReceiver> {
  const host = options.host ?? "127.0.0.1";
  const log = options.log ?? (() => {});
  let received: unknown[] = [];
  const server = await serve(
    async (request) => {
      if (request.method !== "POST")
        return new Response("method not allowed", { status: 405, headers: { allow: "POST" } });
      let body: unknown;
      try {
        body = JSON.parse(await request.text());
      } catch {
        return new Response("invalid_payload", {
          status: 400,
          headers: { "content-type": "text/plain" },
        });
      }
      received.push(body);
      log(`[alert] ${describeAlert(body)}`);
      return new Response("ok", { headers: { "content-type": "text/plain" } });
    },
    { port: options.port, host, name: "the alert receiver" },
  );
  return {
    url: `${server.url}/hooks/alerts`,
    received: () => [...received],
    clear: () => {
      received = [];
    },
    close: server.close,
  };
}
