/** `GET /api/health`: 200 when the database and Redis answer, else 503; each dependency's state. */
import { type Deps, getDeps } from "../lib/deps.ts";
import { handle, json } from "../lib/http.ts";
import { log } from "../lib/log.ts";

const NIL_USER = "00000000-0000-0000-0000-000000000000";

async function check(name: string, probe: () => Promise<unknown>): Promise<"ok" | "down"> {
  try {
    await probe();
    return "ok";
  } catch (error) {
    log.warn("health_check_failed", { dependency: name, error });
    return "down";
  }
}

export function createHandler(deps: () => Deps) {
  return handle({
    async GET() {
      const d = deps();
      const [database, redis] = await Promise.all([
        check("database", () => d.jobs.usage(NIL_USER)),
        check("redis", () => d.redis.ping()),
      ]);
      const ok = database === "ok" && redis === "ok";
      return json(ok ? 200 : 503, { status: ok ? "ok" : "degraded", database, redis });
    },
  });
}

export default { fetch: createHandler(getDeps) };
