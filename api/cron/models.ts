/**
 * `GET /api/cron/models`: Vercel cron (daily) reads the provider's catalogue for every model a
 * plan runs on, records each shutdown date in the price book and pages before and on it
 * (lib/model-watch.ts).
 */
import { cronRoute } from "../../lib/cron.ts";
import { type Deps, getDeps } from "../../lib/deps.ts";
import type { Catalogue } from "../../lib/model-watch.ts";
import { watchModels } from "../../lib/model-watch.ts";

async function openaiCatalogue(d: Deps): Promise<Catalogue> {
  // Loaded here only: the SDK stays out of every other function but the worker.
  const { createCatalogue } = await import("../../lib/model/catalogue.ts");
  return createCatalogue({ apiKey: d.config.openaiApiKey, baseURL: d.config.openaiBaseUrl });
}

export function createHandler(
  deps: () => Deps,
  catalogue: (d: Deps) => Promise<Catalogue> = openaiCatalogue,
) {
  return cronRoute("/api/cron/models", deps, async (d) => watchModels(d, await catalogue(d)));
}

export default { fetch: createHandler(getDeps) };
