/**
 * QStash Flow Control, as upstash/docs qstash/features/flowcontrol.mdx and the Flow Control
 * section of qstash/openapi.yaml describe it:
 * - A publish names a key (`Upstash-Flow-Control-Key`) and limits
 *   (`Upstash-Flow-Control-Value: parallelism=5, rate=10, period=1m`). Limits apply per key, not
 *   per URL.
 * - A message over a limit is not refused: it joins the key's waitlist and is delivered, in
 *   order, once the period has passed (rate) or an active call ended (parallelism). Waiting is
 *   not a failed attempt: `Upstash-Retried` does not move.
 * - Parallelism counts calls "made to your endpoint and the response is not received yet"; a
 *   delivery that times out frees its slot too. Rate counts deliveries started in the current
 *   period (`ratePeriodStart`, `rateCount` in the key's info); the period defaults to 1 s.
 *   Every attempt passes the key, a retry as much as a first delivery.
 * - The key's configuration follows the messages that arrive ("The processing configuration is
 *   updated based on configurations provided by incoming messages", the pin endpoint's
 *   description): the latest publish's values govern the key, unless pinned. (The older
 *   wording, in workflow/features/flow-control.mdx, says QStash "effectively" allows the highest
 *   values while older messages are still waiting; the stand-in follows the API reference.)
 * - Pause: nothing is delivered, new messages join the waitlist, the rate period keeps running.
 *   Pin: fixed values that publishes cannot change; pinning resets the rate state. Unpin: the
 *   pinned values stay until a message brings others. resetRate: count 0, a new period now.
 */

/** The limits one publish asked for (or a pin set). */
export interface FlowLimits {
  parallelism?: number;
  rate?: number;
  /** The rate's period in ms. @default 1000 */
  periodMs?: number;
}

export interface FlowRef {
  key: string;
  limits: FlowLimits;
}

/** The backend's resource-name rule (upstash/workflow-js#196 mirrors it: ^[a-zA-Z0-9-_.]+$). */
export const FLOW_KEY_PATTERN = /^[a-zA-Z0-9._-]+$/;

/** QStash's answer to a value it cannot read (upstash/qstash-js#240, #245), a 400. */
export const INVALID_FLOW_VALUE =
  "Upstash-Flow-Control-Value should be either rate=X or parallelism=Y, or both as comma-separated values";

/** Periods longer than this are refused (QStash: "up to a week"). */
const MAX_PERIOD_MS = 7 * 86_400_000;
const unitMs: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/**
 * `parallelism=5, rate=10, period=1m` (names in any case, in any order, spaces allowed; the docs'
 * cURL examples write `Rate=10` and `rate=10,parallelism=20,period=1m`). A whole number for
 * parallelism and rate (at least 1), a duration (`30`, `30s`, `1m`, `2h`, `1d`) for the period;
 * a value without parallelism or rate, an unknown name, a repeated one, or a bad number is
 * `undefined`.
 */
export function parseFlowValue(text: string): FlowLimits | undefined {
  const limits: FlowLimits = {};
  for (const part of text.split(",")) {
    const match = part.trim().match(/^([a-zA-Z]+)\s*=\s*(\S+)$/);
    if (!match) return undefined;
    const name = (match[1] ?? "").toLowerCase();
    const raw = match[2] ?? "";
    if (name === "parallelism" || name === "rate") {
      if (!/^[1-9]\d{0,8}$/.test(raw) || limits[name] !== undefined) return undefined;
      limits[name] = Number(raw);
    } else if (name === "period") {
      const m = raw.match(/^([1-9]\d{0,8})([smhd]?)$/);
      if (!m || limits.periodMs !== undefined) return undefined;
      const ms = Number(m[1]) * (unitMs[m[2] || "s"] ?? 1000);
      if (ms > MAX_PERIOD_MS) return undefined;
      limits.periodMs = ms;
    } else return undefined;
  }
  if (limits.parallelism === undefined && limits.rate === undefined) return undefined;
  return limits;
}

/** What `GET /v2/flowControl/{key}` answers (openapi components.FlowControlKey). */
export interface FlowInfo {
  flowControlKey: string;
  waitListSize: number;
  parallelismMax: number;
  parallelismCount: number;
  rateMax: number;
  rateCount: number;
  ratePeriod: number;
  ratePeriodStart: number;
  isPaused: boolean;
  isPinnedParallelism: boolean;
  isPinnedRate: boolean;
}

/** One key: its configuration, its counters and its waitlist. */
export class FlowKey {
  parallelism: number | undefined;
  rate: number | undefined;
  periodMs = 1000;
  active = 0;
  rateCount = 0;
  periodStart = 0;
  paused = false;
  pinnedParallelism = false;
  pinnedRate = false;
  /** Messages due for an attempt, first come first served. */
  readonly waiting: string[] = [];

  constructor(readonly key: string) {}

  /** A publish's values become the key's, except what is pinned. */
  configure(limits: FlowLimits): void {
    if (!this.pinnedParallelism) this.parallelism = limits.parallelism;
    if (!this.pinnedRate) {
      this.rate = limits.rate;
      this.periodMs = limits.periodMs ?? 1000;
    }
  }

  pin(limits: FlowLimits, now: number): void {
    if (limits.parallelism !== undefined) {
      this.parallelism = limits.parallelism;
      this.pinnedParallelism = true;
    }
    if (limits.rate !== undefined) {
      this.rate = limits.rate;
      if (limits.periodMs !== undefined) this.periodMs = limits.periodMs;
      this.pinnedRate = true;
    }
    this.resetRate(now);
  }

  resetRate(now: number): void {
    this.rateCount = 0;
    this.periodStart = now;
  }

  /** Ms until the next delivery may start (0: now), or Infinity while paused or full. */
  waitMs(now: number): number {
    if (this.paused) return Number.POSITIVE_INFINITY;
    if (this.parallelism !== undefined && this.active >= this.parallelism)
      return Number.POSITIVE_INFINITY;
    if (this.rate === undefined) return 0;
    if (now - this.periodStart >= this.periodMs) return 0;
    return this.rateCount < this.rate ? 0 : this.periodStart + this.periodMs - now;
  }

  /** Counts a delivery that starts now. */
  start(now: number): void {
    if (this.rate !== undefined && now - this.periodStart >= this.periodMs) this.resetRate(now);
    this.rateCount++;
    this.active++;
  }

  info(now: number): FlowInfo {
    const periodOver = now - this.periodStart >= this.periodMs;
    return {
      flowControlKey: this.key,
      waitListSize: this.waiting.length,
      parallelismMax: this.parallelism ?? 0,
      parallelismCount: this.active,
      rateMax: this.rate ?? 0,
      rateCount: periodOver ? 0 : this.rateCount,
      ratePeriod: Math.round(this.periodMs / 1000),
      ratePeriodStart: Math.floor((periodOver ? now : this.periodStart) / 1000),
      isPaused: this.paused,
      isPinnedParallelism: this.pinnedParallelism,
      isPinnedRate: this.pinnedRate,
    };
  }
}
