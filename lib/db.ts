/**
 * The database port: PostgREST `rpc` calls only, through one helper that checks `error`
 * before `data`. A failed call (status 0 network failure, 5xx, 40001, 57014, PGRST*, or a
 * 4xx from a raise) is a thrown DatabaseError; only what the function returned is data.
 * docs/DESIGN.md#a-write-error-read-as-already-done: a write error read as "zero rows, someone else did it" loses the work silently.
 *
 * The client is `@supabase/postgrest-js`, the PostgREST client inside supabase-js, imported on
 * its own as its docs suggest for bundle-sensitive code: `.rpc()` is the only call the app
 * makes, and supabase-js's `createClient` would load the auth, realtime, storage and functions
 * clients with it (43 more files and about 2 MB in every function that talks to the database,
 * the largest share of a cold start). The request is `POST /rest/v1/rpc/<fn>` with the key the
 * way Supabase documents for its kind:
 * - a secret key (`sb_secret_…`) is NOT a JWT: it goes on the `apikey` header only, and the
 *   gateway runs the call as `service_role` ("send publishable and secret keys on the `apikey`
 *   header only", Supabase's migration guide; its API-keys guide: such a key on
 *   `Authorization: Bearer` is refused unless it equals `apikey`, and then reaches the database
 *   and is rejected as not a JWT). supabase-js still copies it to the Bearer header for REST;
 *   this client does not rely on that exception.
 * - the legacy `service_role` key is a JWT: `apikey` and Bearer, as supabase-js sends it.
 */
import { PostgrestClient } from "@supabase/postgrest-js";
import { DatabaseError } from "./errors.ts";

/** Calls one SQL function by name with named arguments; resolves to the jsonb it returned. */
export type Rpc = (fn: string, args: Record<string, unknown>) => Promise<unknown>;

export interface DbOptions {
  url: string;
  /** `sb_secret_…`, or the legacy `service_role` JWT. */
  serverKey: string;
  /** Abort a call that has not answered after this long, so a hung database cannot eat the function's whole duration. @default 10000 */
  timeoutMs?: number;
  fetch?: typeof fetch;
}

/** The headers that carry a project key: `apikey` alone for an `sb_` key, plus Bearer for a JWT. */
export function keyHeaders(key: string): Record<string, string> {
  return key.startsWith("sb_") ? { apikey: key } : { apikey: key, authorization: `Bearer ${key}` };
}

/**
 * @example
 * const rpc = createRpc({ url: config.supabaseUrl, serverKey: supabaseKeys(config).server });
 * const result = await rpc("get_usage", { p_user_id: userId });
 */
export function createRpc(options: DbOptions): Rpc {
  const client = new PostgrestClient(
    new URL("rest/v1", options.url.endsWith("/") ? options.url : `${options.url}/`).href,
    {
      headers: keyHeaders(options.serverKey),
      fetch: options.fetch,
      timeout: options.timeoutMs ?? 10_000,
    },
  );
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
