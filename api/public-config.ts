/**
 * `GET /api/public-config`: what the browser page needs to sign users in with Supabase Auth:
 * the project URL and its publishable key (`SUPABASE_PUBLISHABLE_KEY`, or the legacy anon key).
 * Both are public by design (RLS protects the data); no secret is ever returned here, and
 * lib/config.ts refuses to start when a secret key sits in either browser slot.
 * `supabasePublishableKey` is null when it is not configured, and the page then offers no
 * password sign-in.
 */
import { getConfig } from "../lib/config.ts";
import type { Deps } from "../lib/deps.ts";
import { handle, json } from "../lib/http.ts";

export function createHandler(deps: () => Pick<Deps, "config">) {
  return handle({
    async GET() {
      const { config } = deps();
      const supabasePublishableKey =
        config.supabasePublishableKey ?? config.supabaseAnonKey ?? null;
      return json(200, { supabaseUrl: config.supabaseUrl, supabasePublishableKey });
    },
  });
}

// Only the config: this route needs no database, queue or Redis client.
export default { fetch: createHandler(() => ({ config: getConfig() })) };
