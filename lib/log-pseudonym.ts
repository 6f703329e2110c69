/**
 * How a log line names a user: by their pseudonym, never their id (docs/RELIABILITY.md, "Data
 * protection"). The pseudonym is random, one per user, kept in Postgres
 * (private.user_pseudonyms, made on first use by public.user_pseudonym) and deleted by their
 * erasure: a line kept after it names no one, since nothing is left that links the pseudonym to
 * the user id. Not an HMAC under a server key: that key and a user id, which circulates (every
 * token's `sub`), would link every line again, erasure or not.
 *
 * An instance keeps the pseudonyms it has read (at most `CACHE_SIZE`, the oldest dropped first),
 * so a warm instance asks once per user. A lookup that fails writes the line without a user: a
 * log line never fails a request.
 */
import type { Jobs } from "./jobs.ts";
import { log } from "./log.ts";

const CACHE_SIZE = 10_000;
const known = new Map<string, string>();

/**
 * The user's pseudonym, or null when they have no account (erased) or the lookup failed.
 *
 * @example
 * log.info("job_canceled", { jobId, user: await userPseudonym(deps.jobs, userId) });
 * // {"event":"job_canceled","jobId":"…","user":"u3f1c9a…"}
 */
export async function userPseudonym(
  jobs: Pick<Jobs, "pseudonym">,
  userId: string,
): Promise<string | null> {
  const hit = known.get(userId);
  if (hit !== undefined) return hit;
  try {
    const r = await jobs.pseudonym(userId);
    if (r.outcome !== "pseudonym") return null;
    if (known.size >= CACHE_SIZE) known.delete(known.keys().next().value as string);
    known.set(userId, r.pseudonym);
    return r.pseudonym;
  } catch (error) {
    log.warn("user_pseudonym_unavailable", { error });
    return null;
  }
}

/** The erasure: this instance forgets the user's pseudonym (the database row is gone). */
export function forgetPseudonym(userId: string): void {
  known.delete(userId);
}
