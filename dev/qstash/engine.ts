import { callbackBody, callbackSpec } from "./callbacks.ts";
import { DEDUP_WINDOW_MS, DEV_SIGNING_KEYS } from "./constants.ts";
import { deliver } from "./delivery.ts";
import { DeadLetters } from "./dlq.ts";
import { defaultBackoffMs, parseRetryAfter } from "./durations.ts";
import { type FlowInfo, FlowKey, type FlowLimits } from "./flow.ts";
import { createMessage, type Message, type MessageSpec } from "./message.ts";
import { after, type Timer } from "./timers.ts";

export interface EngineConfig {
  /** Multiplies every notBefore and backoff wait. */
  timeScale: number;
  /** When false, a publish's notBefore wait runs in real time (only retries are scaled). */
  scaleNotBefore?: boolean;
  log: (line: string) => void;
}

export interface FlowUnpin {
  parallelism: boolean;
  rate: boolean;
}

export interface Stats {
  published: number;
  delivered: number;
  pending: number;
  inFlight: number;
  dlq: number;
}

/**
 * The in-memory QStash: accepted messages wait on timers, are delivered, retried with backoff,
 * and end delivered or in the DLQ (with a failure callback published as a message).
 */
export class Engine {
  readonly dlq = new DeadLetters();
  private readonly messages = new Map<string, Message>();
  private readonly dedup = new Map<string, { messageId: string; expiresAt: number }>();
  private readonly timers = new Map<string, Timer>();
  /** Flow Control keys (dev/qstash/flow.ts), kept for the life of the stand-in. */
  private readonly flows = new Map<string, FlowKey>();
  private readonly flowTimers = new Map<string, Timer>();
  private readonly running = new Set<Promise<void>>();
  private readonly idleWaiters = new Set<() => void>();
  private readonly abort = new AbortController();
  private published = 0;
  private delivered = 0;
  private closed = false;

  constructor(private readonly config: EngineConfig) {}

  publish(spec: MessageSpec, dedupKey?: string): { messageId: string; deduplicated: boolean } {
    const now = Date.now();
    if (dedupKey !== undefined) {
      const seen = this.dedup.get(dedupKey);
      if (seen && seen.expiresAt > now) return { messageId: seen.messageId, deduplicated: true };
    }
    const message = createMessage(spec, now);
    if (dedupKey !== undefined)
      this.dedup.set(dedupKey, { messageId: message.id, expiresAt: now + DEDUP_WINDOW_MS });
    this.messages.set(message.id, message);
    if (message.flow) this.flowKey(message.flow.key).configure(message.flow.limits);
    this.published++;
    this.config.log(`publish ${message.id} POST ${message.url}`);
    this.schedule(message, Math.max(0, message.notBefore - now), this.config.scaleNotBefore);
    return { messageId: message.id, deduplicated: false };
  }

  stats(): Stats {
    let pending = 0;
    let inFlight = 0;
    for (const m of this.messages.values()) {
      if (m.state === "pending") pending++;
      else if (m.state === "in-flight") inFlight++;
    }
    return {
      published: this.published,
      delivered: this.delivered,
      pending,
      inFlight,
      dlq: this.dlq.size,
    };
  }

  /** Resolves once nothing is pending or in flight (messages waiting for notBefore count). */
  waitIdle(timeoutMs = 10_000): Promise<void> {
    if (this.isIdle()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.idleWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(() => {
        this.idleWaiters.delete(done);
        reject(
          new Error(
            `qstash stand-in not idle after ${timeoutMs}ms: ${JSON.stringify(this.stats())}`,
          ),
        );
      }, timeoutMs);
      this.idleWaiters.add(done);
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const timer of this.timers.values()) timer.cancel();
    this.timers.clear();
    for (const timer of this.flowTimers.values()) timer.cancel();
    this.flowTimers.clear();
    this.abort.abort();
    await Promise.allSettled([...this.running]);
    this.messages.clear();
    for (const waiter of [...this.idleWaiters]) waiter();
  }

  private isIdle(): boolean {
    return this.closed || this.messages.size === 0;
  }

  private changed(): void {
    if (this.isIdle()) for (const waiter of [...this.idleWaiters]) waiter();
  }

  private finish(message: Message): void {
    message.state = "done";
    this.messages.delete(message.id);
    this.changed();
  }

  private schedule(message: Message, waitMs: number, scaled = true): void {
    if (this.closed) return;
    const timer = after(scaled === false ? waitMs : waitMs * this.config.timeScale, () => {
      this.timers.delete(message.id);
      if (!message.flow) return void this.launch(message);
      // Due, but the key decides when: the waitlist, first come first served.
      const key = this.flowKey(message.flow.key);
      key.waiting.push(message.id);
      this.pump(key);
    });
    this.timers.set(message.id, timer);
  }

  private launch(message: Message): Promise<void> {
    const run = this.run(message).catch((error: unknown) => {
      // A bug here must not become an unhandled rejection that kills the dev stack.
      this.config.log(
        `error ${message.id}: ${error instanceof Error ? error.stack : String(error)}`,
      );
      this.finish(message);
    });
    this.running.add(run);
    void run.finally(() => this.running.delete(run));
    return run;
  }

  private flowKey(name: string): FlowKey {
    let key = this.flows.get(name);
    if (!key) {
      key = new FlowKey(name);
      this.flows.set(name, key);
    }
    return key;
  }

  /** Starts every waiting delivery the key allows now; wakes itself when the period ends. */
  private pump(key: FlowKey): void {
    if (this.closed) return;
    for (;;) {
      const id = key.waiting[0];
      if (id === undefined) return;
      const message = this.messages.get(id);
      if (!message) {
        key.waiting.shift();
        continue;
      }
      const now = Date.now();
      const waitMs = key.waitMs(now);
      if (waitMs > 0) {
        // Full or paused: a finished delivery or a resume pumps again. A spent rate: the
        // period's end does (real time: a rate is the destination's, not scaled for tests).
        if (Number.isFinite(waitMs) && !this.flowTimers.has(key.key))
          this.flowTimers.set(
            key.key,
            after(waitMs, () => {
              this.flowTimers.delete(key.key);
              this.pump(key);
            }),
          );
        return;
      }
      key.waiting.shift();
      key.start(now);
      // The slot is the call's until the destination answers or the delivery times out.
      void this.launch(message).finally(() => {
        key.active--;
        this.pump(key);
      });
    }
  }

  /** `GET /v2/flowControl/{key}`; undefined for a key no message named. */
  flowInfo(name: string): FlowInfo | undefined {
    return this.flows.get(name)?.info(Date.now());
  }

  flowList(): FlowInfo[] {
    const now = Date.now();
    return [...this.flows.values()].map((key) => key.info(now));
  }

  /**
   * The key's management calls. False for a key no message named (the stand-in keeps no state
   * for it, so there is nothing to pause).
   */
  flowAction(
    name: string,
    action: "pause" | "resume" | "resetRate" | { pin: FlowLimits } | { unpin: FlowUnpin },
  ): boolean {
    const key = this.flows.get(name);
    if (!key) return false;
    const now = Date.now();
    if (action === "pause") key.paused = true;
    else if (action === "resume") key.paused = false;
    else if (action === "resetRate") key.resetRate(now);
    else if ("pin" in action) key.pin(action.pin, now);
    else {
      if (action.unpin.parallelism) key.pinnedParallelism = false;
      if (action.unpin.rate) key.pinnedRate = false;
    }
    this.pump(key);
    return true;
  }

  private async run(message: Message): Promise<void> {
    if (this.closed) return;
    message.state = "in-flight";
    const attempt = await deliver(message, {
      signingKey: DEV_SIGNING_KEYS.current,
      timeoutMs: message.timeoutMs,
      signal: this.abort.signal,
    });
    if (this.closed) return;
    const now = Date.now();
    this.config.log(
      `deliver ${message.id} retried=${message.retried} → ${attempt.error ?? attempt.status} ${message.url}`,
    );
    if (attempt.ok) {
      this.delivered++;
      return this.finish(message);
    }
    if (attempt.nonRetryable || message.retried >= message.maxRetries) {
      const entry = this.dlq.add(message, attempt, now);
      this.config.log(`dlq ${entry.dlqId} ${message.id} after ${message.retried + 1} attempt(s)`);
      if (message.failureCallback) {
        const body = callbackBody(message, attempt, entry.dlqId);
        this.publish(callbackSpec(message.failureCallback, message, body, now));
      }
      return this.finish(message);
    }
    const waitMs = parseRetryAfter(attempt.headers, now) ?? defaultBackoffMs(message.retried + 1);
    message.retried++;
    message.state = "pending";
    this.schedule(message, waitMs);
  }
}
