/**
 * `GET /api/health`. Anyone: the overall state only (`{"status":"ok"}` 200, or
 * `{"status":"degraded"}` 503), from a probe shared by every request for a few seconds, so a
 * flood of anonymous requests costs one database call and one Redis command per interval and
 * tells nobody which dependency is down. The operator (`Authorization: Bearer $CRON_SECRET`)
 * gets a fresh probe and each dependency's state.
 */
import { type Deps, getDeps } from "../lib/deps.ts";
import { bearerMatches, handle, json } from "../lib/http.ts";
import { log } from "../lib/log.ts";

const NIL_USER = "00000000-0000-0000-0000-000000000000";
/** How long the public answer reuses one probe. */
export const PUBLIC_PROBE_TTL_MS = 5_000;

type State = "ok" | "down";
type Probe = { ok: boolean; database: State; redis: State };

async function check(name: string, probe: () => Promise<unknown>): Promise<State> {
  try {
    await probe();
    return "ok";
  } catch (error) {
    log.warn("health_check_failed", { dependency: name, error });
    return "down";
  }
}

async function probe(d: Deps): Promise<Probe> {
  const [database, redis] = await Promise.all([
    check("database", () => d.jobs.usage(NIL_USER)),
    check("redis", () => d.redis.ping()),
  ]);
  return { ok: database === "ok" && redis === "ok", database, redis };
}

export function createHandler(deps: () => Deps, { ttlMs = PUBLIC_PROBE_TTL_MS } = {}) {
  // One probe in flight or recent per instance; concurrent requests share the same promise.
  let shared: { at: number; result: Promise<Probe> } | undefined;
  return handle({
    async GET(req) {
      const d = deps();
      if (bearerMatches(req, d.config.cronSecret)) {
        const r = await probe(d);
        return json(r.ok ? 200 : 503, {
          status: r.ok ? "ok" : "degraded",
          database: r.database,
          redis: r.redis,
        });
      }
      const now = Date.now();
      if (!shared || now - shared.at >= ttlMs) shared = { at: now, result: probe(d) };
      const r = await shared.result;
      return json(r.ok ? 200 : 503, { status: r.ok ? "ok" : "degraded" });
    },
  });
}

export default { fetch: createHandler(getDeps) };
