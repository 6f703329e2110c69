/**
 * Failures a user can cause at will (a prompt the model refuses, a prompt that makes every
 * delivery fail into the failure callback) are counted, never paged one by one: one summary per
 * window names the counts by reason and the top users. Paging each of them let any user page
 * on-call as often as they liked and, once the kind's budget was spent, hid every genuine page of
 * that kind for the rest of the window.
 *
 * The counts live in Redis per window (the alert throttle window, `ALERT_THROTTLE_SECONDS`), so
 * no long-lived process is needed: a closed window's summary is sent by the first of
 *   - the sweeper's cron tick (every 5 minutes: a quiet window is still summarized), or
 *   - the next alert or counted failure after the window closed (prompt while traffic flows).
 * Whoever claims the window's `sent` key (SET NX) sends it; the others skip, so it is sent once.
 * A webhook that fails releases the claim: the next tick tries again.
 *
 * A user's erasure replaces their id in every window still kept by `ERASED` (`forget`): the
 * counts stay, a later summary names no erased user.
 */
import type { Redis } from "@upstash/redis";

/** One failure a user could have caused. Ids only: never a prompt, an output or a secret. */
export type UserFailure = { reason: string; userId: string };

/** What a summary names an erased user by (never a user id: those are UUIDs). */
export const ERASED = "erased";

/**
 * For each key (a window's users): the user's count moves to ERASED and the user's member goes,
 * in one step, so a count landing meanwhile is not lost. How many windows named the user.
 */
const FORGET_SCRIPT = `
local n = 0
for i = 1, #KEYS do
  local score = redis.call('ZSCORE', KEYS[i], ARGV[1])
  if score then
    redis.call('ZINCRBY', KEYS[i], score, ARGV[2])
    redis.call('ZREM', KEYS[i], ARGV[1])
    n = n + 1
  end
end
return n`;

/** What the alerter needs from Redis for the roll-up. */
export type RollupRedis = Pick<
  Redis,
  | "eval"
  | "set"
  | "del"
  | "expire"
  | "hincrby"
  | "hgetall"
  | "zincrby"
  | "zadd"
  | "zrange"
  | "zrem"
  | "zcard"
>;

export type Summary = {
  window: number;
  from: Date;
  to: Date;
  total: number;
  byReason: Record<string, number>;
  users: number;
  topUsers: Array<{ userId: string; count: number }>;
};

export function createRollup(o: {
  redis: RollupRedis;
  prefix: string;
  windowSeconds: number;
  now: () => Date;
  /** How many users a summary names. @default 5 */
  topUsers?: number;
}) {
  const { redis, prefix, windowSeconds } = o;
  const pendingKey = `${prefix}:rollup:pending`;
  const key = (w: number, part: string) => `${prefix}:rollup:${w}:${part}`;
  // A closed window's counts are kept four windows for a late flush (a missed cron tick).
  const keep = windowSeconds * 4;
  const windowOf = (d: Date) => Math.floor(d.getTime() / 1000 / windowSeconds);

  return {
    windowOf,
    /** Count one failure in the current window (one Redis round trip when auto-pipelined). */
    async count(f: UserFailure): Promise<void> {
      const w = windowOf(o.now());
      await Promise.all([
        redis.hincrby(key(w, "reasons"), f.reason, 1),
        redis.zincrby(key(w, "users"), 1, f.userId),
        redis.zadd(pendingKey, { score: w, member: String(w) }),
        redis.expire(key(w, "reasons"), keep),
        redis.expire(key(w, "users"), keep),
      ]);
    },
    /**
     * The erasure: the user's id replaced by ERASED in every window whose counts may still be
     * kept (a window's keys expire `keep` after its last count, so the current window and the
     * five before it), their counts kept. Throws when Redis does. How many windows named them.
     */
    async forget(userId: string): Promise<number> {
      const current = windowOf(o.now());
      const keys = [0, 1, 2, 3, 4, 5].map((d) => key(current - d, "users"));
      return Number(await redis.eval(FORGET_SCRIPT, keys, [userId, ERASED]));
    },
    /**
     * Claims each closed window with counts that no one summarized yet and hands its summary
     * to `send`; `true` from `send` marks it done, `false` releases the claim for a later try.
     */
    async flush(send: (s: Summary) => Promise<boolean>): Promise<number> {
      const current = windowOf(o.now());
      const closed = (await redis.zrange(pendingKey, 0, current - 1, { byScore: true })).map(
        Number,
      );
      let sent = 0;
      for (const w of closed) {
        const claim = await redis.set(key(w, "sent"), 1, { nx: true, ex: keep });
        if (claim === null) continue; // another function sends (or sent) it
        const [reasons, top, users] = await Promise.all([
          redis.hgetall<Record<string, number>>(key(w, "reasons")),
          redis.zrange<string[]>(key(w, "users"), 0, (o.topUsers ?? 5) - 1, {
            rev: true,
            withScores: true,
          }),
          redis.zcard(key(w, "users")),
        ]);
        const byReason = Object.fromEntries(
          Object.entries(reasons ?? {}).map(([k, v]) => [k, Number(v)]),
        );
        const total = Object.values(byReason).reduce((a, b) => a + b, 0);
        if (total > 0) {
          const topUsers: Summary["topUsers"] = [];
          for (let i = 0; i + 1 < top.length; i += 2)
            topUsers.push({ userId: String(top[i]), count: Number(top[i + 1]) });
          const summary: Summary = {
            window: w,
            from: new Date(w * windowSeconds * 1000),
            to: new Date((w + 1) * windowSeconds * 1000),
            total,
            byReason,
            users: users,
            topUsers,
          };
          if (!(await send(summary))) {
            await redis.del(key(w, "sent"));
            continue;
          }
          sent++;
        }
        await redis.zrem(pendingKey, String(w));
      }
      return sent;
    },
  };
}
