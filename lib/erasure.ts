/**
 * A user's data on request (docs/DESIGN.md#retention-and-erasure): everything stored about them,
 * exported as one JSON document streamed page by page (the rows as stored, snake case), and
 * their erasure (`erase_user`: active jobs canceled by the cancel rules, every row about them and
 * their account deleted, what the provider billed kept as an anonymous aggregate; then their
 * keys in Redis).
 */
import { UpstreamError } from "./errors.ts";
import type { EraseResult, ExportPage } from "./jobs.ts";
import { log } from "./log.ts";
import { forgetPseudonym } from "./log-pseudonym.ts";
import type { Deps } from "./ports.ts";

/** Jobs per `export_user` page: the memory an export holds at once, whatever its size. */
export const EXPORT_PAGE = 200;

/**
 * Erases the user (idempotent: a second call erases nothing): their rows in Postgres (and their
 * log pseudonym), then what names them in Redis: their rate-limit keys and their id in the alert
 * roll-up's kept windows. Redis failing after the rows went is an `UpstreamError` (503): the
 * client retries with the same token, which erases no row and clears Redis again. The log line
 * has counts only: the user is gone, their id is not written next to what they did.
 */
export async function eraseUser(
  deps: Pick<Deps, "jobs" | "rateLimiter" | "exportLimiter" | "alerts">,
  userId: string,
): Promise<EraseResult> {
  const r = await deps.jobs.erase(userId);
  log.info("user_erased", {
    jobs: r.jobs,
    canceled: r.canceled,
    events: r.events,
    accountDeleted: r.account_deleted,
  });
  forgetPseudonym(userId);
  try {
    await Promise.all([
      deps.rateLimiter.forget(userId),
      deps.exportLimiter.forget(userId),
      deps.alerts.forget(userId),
    ]);
  } catch (error) {
    log.error("erasure_redis_failed", { error });
    throw new UpstreamError("redis", "could not clear the erased user's keys");
  }
  return r;
}

/**
 * The user's export as a stream of JSON text: `{"exported_at", "user_id", "plan", "usage",
 * "log_pseudonym", "jobs": [...]}`, the jobs oldest first, each with its events, read
 * `EXPORT_PAGE` at a time, so an export of any size holds one page in memory. A database failure after the first byte ends
 * the stream with an error (the client sees a broken transfer, never a short document that
 * parses); the first page is read before the response starts, so a failure there is a 503.
 */
export async function exportUser(
  deps: Pick<Deps, "jobs" | "now">,
  userId: string,
  pageSize = EXPORT_PAGE,
): Promise<ReadableStream<Uint8Array>> {
  const first = await deps.jobs.exportPage(userId, { limit: pageSize });
  // Snake case throughout: the rows as the database stores them, not the API's views.
  const head = JSON.stringify({
    exported_at: deps.now().toISOString(),
    user_id: userId,
    plan: first.plan ?? null,
    usage: first.usage ?? [],
    log_pseudonym: first.log_pseudonym ?? null,
  });
  const encoder = new TextEncoder();
  let page: ExportPage | null = first;
  let written = 0;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(encoder.encode(`${head.slice(0, -1)},"jobs":[`));
    },
    async pull(controller) {
      try {
        if (page === null) return;
        const current: ExportPage = page;
        const text = current.jobs.map((j) => JSON.stringify(j)).join(",");
        if (text) controller.enqueue(encoder.encode((written > 0 ? "," : "") + text));
        written += current.jobs.length;
        const tail = current.jobs.at(-1);
        if (!current.has_more || !tail) {
          page = null;
          controller.enqueue(encoder.encode("]}"));
          controller.close();
          return;
        }
        page = await deps.jobs.exportPage(userId, {
          limit: pageSize,
          after: { createdAt: tail.created_at, id: tail.id },
        });
      } catch (error) {
        log.error("export_failed", { written, error });
        controller.error(error);
      }
    },
  });
}
