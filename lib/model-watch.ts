/**
 * The catalogue watch (`GET /api/cron/models`, daily): for every model a plan runs on, read the
 * provider's catalogue (`GET /v1/models/{id}`, whose optional `shutdown_date` announces the day
 * the model stops being served), record the date in the price book, and page on-call:
 *
 * - `model_shutdown`, once per model and date, from `SHUTDOWN_NOTICE_DAYS` before it: the plans
 *   that use it must move before then;
 * - `model_retired`, once per model and date, on and after it: enqueue now refuses those plans'
 *   jobs (503 `model_retired`, nothing held) instead of failing each one at the provider;
 * - `provider_misconfigured` when the provider does not list the model (404): an operator fault,
 *   as a 404 on a model call is.
 *
 * A model the price book does not price is logged (`model_not_priced`): its jobs run, taken to
 * reason (docs/DESIGN.md#models-and-prices), and a money plan cannot name it.
 */
import type { WatchedModel } from "./jobs.ts";
import { log } from "./log.ts";
import type { Deps } from "./ports.ts";

/** How long before a shutdown date on-call hears of it. */
export const SHUTDOWN_NOTICE_DAYS = 30;
const DAY_MS = 86_400_000;

/** What the provider's catalogue says of one model. */
export type CatalogueEntry = { listed: false } | { listed: true; shutdownDate: string | null };

/** The provider's catalogue (lib/model/catalogue.ts reads OpenAI's). */
export interface Catalogue {
  retrieve(model: string): Promise<CatalogueEntry>;
}

export interface ModelWatchReport {
  models: {
    model: string;
    plans: string[];
    listed: boolean | null;
    shutdownDate: string | null;
    daysLeft: number | null;
    paged: string | null;
  }[];
}

const daysUntil = (date: string, now: Date) =>
  Math.ceil((Date.parse(`${date}T00:00:00Z`) - now.getTime()) / DAY_MS);

export async function watchModels(
  deps: Pick<Deps, "jobs" | "alerts" | "now">,
  catalogue: Catalogue,
): Promise<ModelWatchReport> {
  const watched = await deps.jobs.watchedModels();
  const report: ModelWatchReport = { models: [] };
  for (const w of watched) report.models.push(await watchOne(deps, catalogue, w));
  return report;
}

async function watchOne(
  deps: Pick<Deps, "jobs" | "alerts" | "now">,
  catalogue: Catalogue,
  w: WatchedModel,
): Promise<ModelWatchReport["models"][number]> {
  const now = deps.now();
  const row = { model: w.model, plans: w.plans };
  let entry: CatalogueEntry;
  try {
    entry = await catalogue.retrieve(w.model);
  } catch (error) {
    // The provider is down or slow: tomorrow's run reads it again; nothing is recorded.
    log.warn("model_catalogue_unavailable", { model: w.model, error });
    return { ...row, listed: null, shutdownDate: w.shutdown_date, daysLeft: null, paged: null };
  }
  if (!entry.listed) {
    await deps.alerts.send({
      kind: "provider_misconfigured",
      dedupKey: `model_not_found:${w.model}`,
      title: `The provider does not list model ${w.model}: every job of these plans fails`,
      fields: { model: w.model, plans: w.plans.join(", "), status: 404 },
    });
    return {
      ...row,
      listed: false,
      shutdownDate: null,
      daysLeft: null,
      paged: "provider_misconfigured",
    };
  }
  const shutdownDate = entry.shutdownDate;
  if (w.priced) await deps.jobs.recordCatalogue(w.model, shutdownDate, now);
  else log.warn("model_not_priced", { model: w.model, plans: w.plans });
  if (shutdownDate === null) {
    return { ...row, listed: true, shutdownDate, daysLeft: null, paged: null };
  }
  const daysLeft = daysUntil(shutdownDate, now);
  let paged: string | null = null;
  if (daysLeft <= SHUTDOWN_NOTICE_DAYS) {
    const kind = daysLeft <= 0 ? "model_retired" : "model_shutdown";
    await deps.alerts.send({
      kind,
      // Once per model and date (a moved date pages again); kept past the notice period.
      dedupKey: `${w.model}:${shutdownDate}`,
      dedupSeconds: (SHUTDOWN_NOTICE_DAYS + 30) * 86_400,
      title:
        kind === "model_retired"
          ? `Model ${w.model} was shut down on ${shutdownDate}: its plans' jobs are refused`
          : `Model ${w.model} shuts down on ${shutdownDate} (${daysLeft} days): move its plans`,
      fields: {
        model: w.model,
        shutdown_date: shutdownDate,
        days_left: daysLeft,
        plans: w.plans.join(", "),
      },
    });
    paged = kind;
  }
  return { ...row, listed: true, shutdownDate, daysLeft, paged };
}
