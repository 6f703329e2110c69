/**
 * A Vercel cron route: Vercel calls it with `Authorization: Bearer $CRON_SECRET`; each tick is a
 * trace of its own, and its report is the JSON answer.
 */
import { handle, json, requireCronSecret } from "./http.ts";
import { startTrace, type TraceConfig, traceRequest } from "./trace.ts";

export function cronRoute<D extends { config: TraceConfig & { cronSecret: string } }>(
  path: string,
  deps: () => D,
  run: (d: D) => Promise<unknown>,
) {
  return handle({
    async GET(req) {
      const d = deps();
      return traceRequest(d.config, `GET ${path}`, async () => {
        requireCronSecret(req, d.config.cronSecret);
        startTrace();
        return json(200, await run(d));
      });
    },
  });
}
