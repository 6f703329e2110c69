/**
 * A Slack-compatible incoming-webhook receiver for the local stack: the app's on-call alerts
 * (ALERT_WEBHOOK_URL) land here, are printed, and are kept for tests. Answers `ok` like Slack.
 */
import { createServer } from "node:http";

export interface AlertReceiverOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  log?: (line: string) => void;
}

export interface AlertReceiver {
  /** The webhook URL to put in ALERT_WEBHOOK_URL. */
  url: string;
  /** Every JSON body received, oldest first. */
  received(): unknown[];
  clear(): void;
  close(): Promise<void>;
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
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.method !== "POST") {
        res.writeHead(405, { allow: "POST" }).end("method not allowed");
        return;
      }
      const text = Buffer.concat(chunks).toString("utf8");
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        res.writeHead(400, { "content-type": "text/plain" }).end("invalid_payload");
        return;
      }
      received.push(body);
      log(`[alert] ${describeAlert(body)}`);
      res.writeHead(200, { "content-type": "text/plain" }).end("ok");
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = address && typeof address === "object" ? address.port : options.port;
  return {
    url: `http://${host}:${port}/hooks/alerts`,
    received: () => [...received],
    clear: () => {
      received = [];
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
