/**
 * The worker's dependencies: the shared ones plus the model. The only module that imports the
 * OpenAI SDK (through lib/model.ts), and only api/worker.ts imports it.
 */
import { getConfig, supabaseKeys } from "./config.ts";
import { createDeps, type Deps } from "./deps.ts";
import { createLive } from "./live.ts";
import { createModel } from "./model.ts";
import type { WorkerDeps } from "./ports.ts";

export function createWorkerDeps(deps: Deps): WorkerDeps {
  const c = deps.config;
  return {
    ...deps,
    model: createModel({
      apiKey: c.openaiApiKey,
      baseURL: c.openaiBaseUrl,
      model: c.openaiModel,
      api: c.openaiApi,
      timeoutMs: c.modelTimeoutMs,
    }),
    live: createLive({ supabaseUrl: c.supabaseUrl, serverKey: supabaseKeys(c).server }),
  };
}

let cached: WorkerDeps | undefined;

export function getWorkerDeps(): WorkerDeps {
  cached ??= createWorkerDeps(createDeps(getConfig()));
  return cached;
}
