/**
 * A local stand-in for the official `qstash dev` server, whose binary is downloaded at install
 * time and cannot be had offline. Same port convention, dev token and signing keys. It serves
 * what the app calls (lib/queue.ts: publish with retries, notBefore, a deduplication id and a
 * failure callback; signed deliveries, retries with the documented backoff or Retry-After, the
 * DLQ as the runbook reads and retries it; Flow Control per key, with its waitlist and its
 * management calls, flow.ts) plus `Upstash-Timeout` and `Upstash-Forward-*`; every other
 * QStash feature is refused with a 501, never ignored. In memory, like the real dev server.
 *
 * @example
 * const qstash = await startQStash({ port: 8080 });
 * const client = new Client({ baseUrl: qstash.url, token: DEV_TOKEN });
 */
import { serve } from "../http/serve.ts";
import { DEFAULT_DELIVERY_TIMEOUT_MS } from "./constants.ts";
import { Engine } from "./engine.ts";
import { handle } from "./routes.ts";

export { DEV_SIGNING_KEYS, DEV_TOKEN } from "./constants.ts";

export interface QStashStandIn {
  url: string;
  close(): Promise<void>;
  stats(): { published: number; delivered: number; pending: number; inFlight: number; dlq: number };
  /** Resolves when no message is pending or in flight; rejects after `timeoutMs` (default 10 s). */
  waitIdle(timeoutMs?: number): Promise<void>;
}

export interface QStashOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  /** Multiplies every backoff and notBefore wait: 1 = real time, 0.001 in tests. @default 1 */
  timeScale?: number;
  /**
   * Scale notBefore waits too. An app that compares notBefore with its own clock (a job's
   * resume_at in the database) needs them in real time while retries stay fast. @default true
   */
  scaleNotBefore?: boolean;
  /** The plan's maximum response duration; Upstash-Timeout can only shorten it. @default 15 min */
  deliveryTimeoutMs?: number;
  log?: (line: string) => void;
}

export async function startQStash(opts: QStashOptions): Promise<QStashStandIn> {
  const host = opts.host ?? "127.0.0.1";
  const maxTimeoutMs = opts.deliveryTimeoutMs ?? DEFAULT_DELIVERY_TIMEOUT_MS;
  const log = opts.log ?? (() => {});
  const engine = new Engine({
    timeScale: opts.timeScale ?? 1,
    scaleNotBefore: opts.scaleNotBefore ?? true,
    log: (line) => log(`[qstash] ${line}`),
  });
  const server = await serve(
    (request, { ip }) => handle(request, { engine, callerIp: ip, maxTimeoutMs }),
    {
      port: opts.port,
      host,
      name: "QStash stand-in",
      onError: (error) =>
        Response.json(
          { error: error instanceof Error ? error.message : String(error) },
          { status: 500 },
        ),
    },
  );
  const url = server.url;
  log(`[qstash] listening on ${url}`);
  return {
    url,
    stats: () => engine.stats(),
    waitIdle: (timeoutMs) => engine.waitIdle(timeoutMs),
    close: async () => {
      await engine.close();
      await server.close();
    },
  };
}
