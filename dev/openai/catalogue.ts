/**
 * The fake model's own catalogue: which models it serves, on which tiers, whether they reason,
 * and when they shut down (OpenAI's deprecations page and flex / priority processing guides as
 * of December 2026). It is the fake's, not the app's price book: a model the app lists wrongly
 * fails here as it would at OpenAI, instead of agreeing with itself.
 *
 * - A model not in the catalogue, or past its `shutdownDate`, is OpenAI's 404 `model_not_found`
 *   (a retired one in the wording OpenAI uses for a deprecated model); a past model is not
 *   listed by `GET /v1/models`.
 * - `flex` is per model: a model without it answers `service_tier: "flex"` with a 400
 *   `invalid_request_error`, `param: "service_tier"`, and no fallback. A model without
 *   `priority` is served at the default tier when asked for it (the response says so).
 * - A reasoning model spends hidden reasoning tokens before its first visible token, by default
 *   (`REASONING_TOKENS` by effort).
 *
 * Shutdown dates can be moved per fake (`startFakeOpenAI({ shutdownDates })`, `setShutdownDate`,
 * `POST /__fake/models`, or `FAKE_OPENAI_SHUTDOWN_DATES="gpt-4o-mini=2026-12-22,gpt-4-turbo="` for
 * the dev stack: an empty date is none announced), so a test can retire a model.
 */

export type Tier = "default" | "flex" | "priority";

export interface CatalogueModel {
  id: string;
  /** Unix seconds, as `GET /v1/models` reports it. */
  created: number;
  tiers: readonly Tier[];
  reasons: boolean;
  /** `YYYY-MM-DD`, or null when none is announced. */
  shutdownDate: string | null;
}

const model = (
  id: string,
  created: number,
  tiers: readonly Tier[],
  reasons: boolean,
  shutdownDate: string | null,
): CatalogueModel => ({ id, created, tiers, reasons, shutdownDate });

const ALL: readonly Tier[] = ["default", "flex", "priority"];

export const CATALOGUE: readonly CatalogueModel[] = [
  model("gpt-5.5", 1_775_000_000, ["default", "priority"], true, null),
  model("gpt-5.4", 1_772_000_000, ALL, true, null),
  model("gpt-5.4-mini", 1_772_000_100, ALL, true, null),
  model("gpt-5.4-nano", 1_772_000_200, ["default", "flex"], true, null),
  model("gpt-5", 1_754_425_777, ALL, true, "2026-12-11"),
  model("gpt-5-mini", 1_754_425_928, ALL, true, "2026-12-11"),
  model("gpt-5-nano", 1_754_426_384, ["default", "flex"], true, "2026-12-11"),
  model("o3", 1_744_225_308, ALL, true, "2026-12-11"),
  model("gpt-4.1", 1_744_316_542, ["default", "priority"], false, "2027-01-14"),
  model("gpt-4.1-mini", 1_744_318_173, ["default", "priority"], false, "2027-01-14"),
  model("gpt-4o", 1_715_367_049, ["default", "priority"], false, "2027-01-14"),
  model("gpt-4o-mini", 1_721_172_741, ["default"], false, "2027-01-14"),
  model("gpt-4-turbo", 1_712_361_441, ["default"], false, "2026-10-23"),
  model("gpt-4", 1_687_882_411, ["default"], false, "2026-10-23"),
  model("gpt-3.5-turbo", 1_677_610_602, ["default"], false, "2026-10-23"),
  model("o1", 1_734_375_816, ["default"], true, "2026-10-23"),
  model("o3-mini", 1_737_146_383, ["default", "flex"], true, "2026-10-23"),
  model("o4-mini", 1_744_225_351, ["default", "flex"], true, "2026-10-23"),
];

/** Hidden reasoning tokens a reasoning model spends before its text, by `reasoning.effort`. */
export const REASONING_TOKENS: Record<string, number> = {
  none: 0,
  minimal: 16,
  low: 32,
  medium: 64,
  high: 128,
  xhigh: 256,
};
/** The effort a reasoning model uses when the request names none. */
export const DEFAULT_EFFORT = "medium";
/** How long the default reasoning takes per token (ms), so a thinking phase is observable. */
export const REASONING_MS_PER_TOKEN = 1;

/** A model's shutdown date moved: a date, or null for none announced. */
export type ShutdownDates = Record<string, string | null>;

const DATE = /^\d{4}-\d{2}-\d{2}$/;

export function checkDate(date: string | null): string | null {
  if (date !== null && !(DATE.test(date) && !Number.isNaN(Date.parse(date))))
    throw new Error(`a shutdown date is YYYY-MM-DD or null, got ${JSON.stringify(date)}`);
  return date;
}

/** `FAKE_OPENAI_SHUTDOWN_DATES`: `model=YYYY-MM-DD` pairs, comma separated; `model=` is none. */
export function parseShutdownDates(value: string | undefined): ShutdownDates {
  const dates: ShutdownDates = {};
  for (const pair of (value ?? "").split(",").map((p) => p.trim())) {
    if (pair === "") continue;
    const [id, date] = pair.split("=").map((p) => p.trim());
    if (!id || date === undefined) throw new Error(`FAKE_OPENAI_SHUTDOWN_DATES: bad pair ${pair}`);
    dates[id] = checkDate(date === "" ? null : date);
  }
  return dates;
}

/** The catalogue with some shutdown dates moved. */
export function catalogueWith(dates: ShutdownDates): Map<string, CatalogueModel> {
  const models = new Map(CATALOGUE.map((m) => [m.id, m]));
  for (const [id, date] of Object.entries(dates)) {
    const known = models.get(id);
    if (!known) throw new Error(`the fake's catalogue has no model ${id}`);
    models.set(id, { ...known, shutdownDate: checkDate(date) });
  }
  return models;
}

/** Past its date (the day it shuts down included: from that day it is not accessible). */
export const retired = (m: CatalogueModel, now: Date): boolean =>
  m.shutdownDate !== null && m.shutdownDate <= now.toISOString().slice(0, 10);

/** The `Model` object of `GET /v1/models` (openai-node `Model`). */
export const modelObject = (m: CatalogueModel) => ({
  id: m.id,
  object: "model",
  created: m.created,
  owned_by: "system",
  shutdown_date: m.shutdownDate,
});
