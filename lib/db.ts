/**
 * The database port: PostgREST `rpc` calls only, through one helper that checks `error` before
 * `data`. A failed call (status 0 network failure, 5xx, 40001, 57014, PGRST*, or a 4xx from a
 * raise) is a thrown DatabaseError; only what the function returned is data.
 * seeds/003: a write error read as "zero rows, someone else did it" loses the work silently.
 *
 * Why not supabase-js: `.rpc()` is the only call the app makes, and `createClient` loads auth,
 * realtime, storage, functions and iceberg clients with it (43 files, about 2 MB in every
 * function, the largest share of a cold start). This is the request supabase-js sends for
 * `.rpc(fn, args)` (POST /rest/v1/rpc/<fn>, the key as `apikey` and Bearer token,
 * `Content-Profile: public`) and the result it derives from the response: the body as data on
 * 2xx; PostgREST's error body (`code`, `message`) and the status otherwise; status 0 and
 * "<name>: <message>" when no response came (refused, reset, timed out).
 */
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

type RpcError = { message: string; code: string };
type RpcResult = { data: unknown; error: RpcError | null; status: number };

function asError(body: string): RpcError {
  try {
    const parsed = JSON.parse(body) as { message?: unknown; code?: unknown } | null;
    return {
      message: typeof parsed?.message === "string" ? parsed.message : "",
      code: typeof parsed?.code === "string" ? parsed.code : "",
    };
  } catch {
    return { message: body, code: "" };
  }
}

async function post(
  f: typeof fetch,
  url: string,
  headers: Record<string, string>,
  args: Record<string, unknown>,
  timeoutMs: number,
): Promise<RpcResult> {
  try {
    const res = await f(url, {
      method: "POST",
      headers,
      body: JSON.stringify(args),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const body = await res.text();
    if (!res.ok) return { data: null, error: asError(body), status: res.status };
    if (body === "") return { data: null, error: null, status: res.status };
    try {
      return { data: JSON.parse(body), error: null, status: res.status };
    } catch {
      return { data: null, error: { message: body, code: "" }, status: res.status };
    }
  } catch (cause) {
    const e = cause as { name?: string; message?: string } | null;
    return {
      data: null,
      error: { message: `${e?.name ?? "FetchError"}: ${e?.message ?? String(cause)}`, code: "" },
      status: 0,
    };
  }
}

/**
 * @example
 * const rpc = createRpc({ url: config.supabaseUrl, serviceRoleKey: config.supabaseServiceRoleKey });
 * const result = await rpc("get_usage", { p_user_id: userId });
 */
export function createRpc(options: DbOptions): Rpc {
  const f = options.fetch ?? fetch;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const base = new URL("rest/v1/rpc/", options.url.endsWith("/") ? options.url : `${options.url}/`);
  const headers = {
    apikey: options.serviceRoleKey,
    authorization: `Bearer ${options.serviceRoleKey}`,
    "content-type": "application/json",
    "content-profile": "public",
  };
  return async (fn, args) => {
    const { data, error, status } = await post(f, `${base.href}${fn}`, headers, args, timeoutMs);
    if (error) {
      throw new DatabaseError(`${fn} failed: ${error.message || "no message"}`, {
        fn,
        status,
        code: error.code,
      });
    }
    if (data === null || typeof data !== "object" || !("outcome" in data)) {
      throw new DatabaseError(`${fn} returned no outcome`, { fn, status, code: "no_outcome" });
    }
    return data;
  };
}
