/**
 * The database port straight to Postgres (no PostgREST hop), for reliability runs where the
 * HTTP layer is not what is under test: `select public.fn(name => $1, ...)` as the service role,
 * with lib/db.ts's contract (a failed call is a thrown DatabaseError, never data; a result
 * without `outcome` is an error too).
 *
 * `withClock` gives every transition the schedule's clock as `p_now`, as lib/ would if the
 * database's clock jumped: the SQL functions take `p_now`, lib/ passes none in production.
 */
import type pg from "pg";
import type { Rpc } from "../../lib/db.ts";
import { DatabaseError } from "../../lib/errors.ts";

export function pgRpc(pool: pg.Pool): Rpc {
  return async (fn, args) => {
    const names = Object.keys(args);
    const params = names.map((name, i) => `${name} => $${i + 1}`).join(", ");
    let data: unknown;
    try {
      const { rows } = await pool.query(
        `select public.${fn}(${params}) as result`,
        names.map((n) => args[n]),
      );
      data = rows[0]?.result ?? null;
    } catch (error) {
      const e = error as { message?: string; code?: string };
      throw new DatabaseError(`${fn} failed: ${e.message ?? "no message"}`, {
        fn,
        status: 500,
        code: e.code ?? "",
      });
    }
    if (data === null || typeof data !== "object" || !("outcome" in data)) {
      throw new DatabaseError(`${fn} returned no outcome`, { fn, status: 200, code: "no_outcome" });
    }
    return data;
  };
}

/** The transitions that take `p_now`. */
const TAKES_NOW = new Set([
  "enqueue_job",
  "start_job",
  "complete_job",
  "requeue_job",
  "release_job",
  "fail_job",
  "cancel_job",
  "sweep_jobs",
  "get_usage",
]);

/** Passes `p_now: now()` to every function that takes it (unless the caller gave one). */
export function withClock(inner: Rpc, now: () => Date): Rpc {
  return (fn, args) =>
    inner(
      fn,
      TAKES_NOW.has(fn) && !("p_now" in args) ? { ...args, p_now: now().toISOString() } : args,
    );
}
