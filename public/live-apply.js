// @ts-check
/**
 * What a push of the live channel (live.js) does to the job a card shows, as pure decisions:
 * the card applies a push only when it follows what it shows, and reads the job once when it
 * cannot tell (public/job-list.js does the reading).
 */
import { isActive } from "./status.js";

/** @typedef {import("./status.js").Job} Job */

/** @param {string | null} text */
const codePoints = (text) => (text ? [...text].length : 0);

/**
 * A `job_view` (the worker's view of a job it claimed or ended, without `prompt` and `input`):
 * the job to show, or null when it does not follow what the card shows. An ending always does
 * (nothing follows an ending) unless the card shows one already. A claim (running) does when
 * the card shows the job before that attempt started (fewer attempts), and the last state the
 * database broadcast of it (`lastState`) is not a later one: the view comes by another road than
 * the states, and may arrive after them.
 * @param {Job} current
 * @param {Partial<Job>} view
 * @param {string | null} [lastState]  the state of the newest `job_state` heard of the job
 * @returns {Job | null}
 */
export function viewApplied(current, view, lastState = null) {
  if (!isActive(current) || view.id !== current.id || view.status === undefined) return null;
  const next = /** @type {Job} */ ({ ...current, ...view });
  if (!isActive(next)) return next;
  const claims = view.status === "running" && Number(view.attempts) > current.attempts;
  return claims && (lastState === null || lastState === "running") ? next : null;
}

/**
 * A `job_state` `{state, seq}`: whether it is news (`seq` above the last seen) and whether the
 * card must read the job (it does not show that state yet).
 * @param {Job} current
 * @param {number} lastSeq
 * @param {Record<string, unknown>} payload
 * @returns {{ seq: number, read: boolean } | null}
 */
export function stateNews(current, lastSeq, payload) {
  const seq = Number(payload.seq);
  if (!Number.isFinite(seq) || seq <= lastSeq) return null;
  return { seq, read: isActive(current) && payload.state !== current.status };
}

/**
 * A `job_progress` `{attempt, offset, text, tokens, thinking, reasoning_tokens}`: the job with
 * the text appended at its offset (what overlaps what the card has is skipped); `"read"` when it
 * cannot follow (a gap: a delta was missed; an attempt the card has not seen start); null when
 * it is not about what the card shows (an older attempt, an ended job).
 * @param {Job} current
 * @param {Record<string, unknown>} payload
 * @returns {Job | "read" | null}
 */
export function progressApplied(current, payload) {
  const attempt = Number(payload.attempt);
  const offset = Number(payload.offset);
  const text = typeof payload.text === "string" ? payload.text : "";
  if (!isActive(current)) return null;
  if (current.status !== "running" || attempt !== current.attempts)
    return attempt > current.attempts ? "read" : null;
  const have = codePoints(current.partialOutput);
  if (!Number.isInteger(offset) || offset < 0 || offset > have) return "read";
  const added = [...text].slice(have - offset).join("");
  const tokens = Number(payload.tokens);
  const partialOutput =
    added || current.partialOutput ? `${current.partialOutput ?? ""}${added}` : null;
  return {
    ...current,
    partialOutput,
    partialTokens: Number.isFinite(tokens)
      ? Math.max(tokens, current.partialTokens)
      : current.partialTokens,
    thinking: payload.thinking === true && !partialOutput,
    reasoningTokens:
      typeof payload.reasoning_tokens === "number"
        ? payload.reasoning_tokens
        : current.reasoningTokens,
  };
}
