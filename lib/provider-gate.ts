/**
 * The provider gate: one shared "the AI provider said wait until T" time in Upstash Redis, so
 * one worker's 429 holds back the others. It reads as open when Redis does not answer.
 */
import type { Redis } from "@upstash/redis";
import { log } from "./log.ts";

const GATE_KEY = "quota-jobs:provider:resume-at";

/**
 * The shared "the provider said wait until T" time. `holdUntil` only ever moves it later and
 * the key expires at T by itself. When Redis is down the gate reads as open (logged): each job
 * carries its own `resume_at` in Postgres, so the provider is still protected job by job.
 *
 * The read-then-write in `holdUntil` can race: two workers may both read "no later time" and
 * the earlier of their two times may win. The cost is one early retry that meets another 429
 * and moves the gate again; not worth a Lua script.
 *
 * @example
 * const gate = createProviderGate(redis);
 * const at = await gate.resumeAt(); // Date | null
 * await gate.holdUntil(new Date(Date.now() + 60_000));
 */
export function createProviderGate(
  redis: Pick<Redis, "get" | "set">,
  key: string = GATE_KEY,
): {
  resumeAt(now?: Date): Promise<Date | null>;
  holdUntil(at: Date): Promise<void>;
} {
  async function read(): Promise<number | null> {
    const value = await redis.get<number | string>(key);
    const ms = Number(value);
    return value === null || !Number.isFinite(ms) ? null : ms;
  }
  return {
    async resumeAt(now = new Date()) {
      try {
        const ms = await read();
        return ms !== null && ms > now.getTime() ? new Date(ms) : null;
      } catch (err) {
        log.warn("provider_gate_open", {
          reason: "redis_error",
          error: err instanceof Error ? err : String(err),
        });
        return null;
      }
    },
    async holdUntil(at) {
      const ms = at.getTime();
      if (!Number.isFinite(ms) || ms <= Date.now()) return;
      try {
        const current = await read();
        if (current !== null && current >= ms) return;
        await redis.set(key, ms, { pxat: ms });
      } catch (err) {
        log.warn("provider_gate_not_held", { error: err instanceof Error ? err : String(err) });
      }
    },
  };
}
