/**
 * `GET /api/public-config`: what the browser page needs to sign users in with Supabase Auth.
 * Both values are public by design (the anon key is meant for browsers; RLS protects the
 * data); no secret is ever returned here. `supabaseAnonKey` is null when it is not configured,
 * and the page then offers no password sign-in.
 */
import { getConfig } from "../lib/config.ts";
import type { Deps } from "../lib/deps.ts";
import { handle, json } from "../lib/http.ts";

export function createHandler(deps: () => Pick<Deps, "config">) {
  return handle({
    async GET() {
      const { supabaseUrl, supabaseAnonKey } = deps().config;
      return json(200, { supabaseUrl, supabaseAnonKey: supabaseAnonKey ?? null });
    },
  });
}

// Only the config: this route needs no database, queue or Redis client.
export default { fetch: createHandler(() => ({ config: getConfig() })) };
