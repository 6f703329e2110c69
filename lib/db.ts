/**
 * The database port: supabase-js `rpc` calls only, through one helper that checks `error`
 * before `data`. A failed call (status 0 network failure, 5xx, 40001, 57014, PGRST*, or a
 * 4xx from a raise) is a thrown DatabaseError; only what the function returned is data.
 * docs/DESIGN.md#a-write-error-read-as-already-done: a write error read as "zero rows, someone else did it" loses the work silently.
 */
import { createClient } from "@supabase/supabase-js";
import { DatabaseError } from "./errors.ts";

/** Calls one SQL function by name with named arguments; resolves to the jsonb it returned. */
export type Rpc = (fn: string, args: Record<string, unknown>) => Promise<unknown>;

export interface DbOptions {
  url: string;
  serviceRoleKey: string;
  /** Abort a call that has not answered after this long, so a hung database cannot eat the function's whole duration. @default 10000 */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/**
 * @example
 * const rpc = createRpc({ url: config.supabaseUrl, serviceRoleKey: config.supabaseServiceRoleKey });
 * const result = await rpc("get_usage", { p_user_id: userId });
 */
export function createRpc(options: DbOptions): Rpc {
  const baseFetch = options.fetch ?? fetch;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const client = createClient(options.url, options.serviceRoleKey, {
    auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
    global: {
      fetch: (input, init) =>
        baseFetch(input, { ...init, signal: init?.signal ?? AbortSignal.timeout(timeoutMs) }),
    },
  });
  return async (fn, args) => {
    const { data, error, status } = await client.rpc(fn, args);
    if (error) {
      throw new DatabaseError(`${fn} failed: ${error.message || "no message"}`, {
        fn,
        status,
        code: error.code ?? "",
      });
    }
    if (data === null || typeof data !== "object" || !("outcome" in data)) {
      throw new DatabaseError(`${fn} returned no outcome`, { fn, status, code: "no_outcome" });
    }
    return data;
  };
}
