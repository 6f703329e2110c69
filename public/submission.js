// @ts-check
/**
 * One `Idempotency-Key` per intended submission. A double click, or pressing Generate again
 * after the answer was lost (network error, 5xx), sends the SAME key with the same prompt, so
 * the server replays the first job instead of reserving a second unit. A new key is made after
 * a success (the next Generate is a new intention) and whenever the prompt is edited (a key
 * sent with another body would be refused as `idempotency_key_reused`).
 */

/**
 * @typedef {object} Submission
 * @property {(prompt: string) => string} keyFor  the key to send with this prompt
 * @property {() => void} succeeded  the job exists: the next Generate is a new submission
 * @property {(prompt: string) => void} edited  the prompt changed: forget the key unless it still matches
 */

/**
 * @param {() => string} [newKey] @default crypto.randomUUID
 * @returns {Submission}
 */
export function createSubmission(newKey = () => crypto.randomUUID()) {
  /** @type {{ key: string, prompt: string } | null} */
  let current = null;
  return {
    keyFor(prompt) {
      if (!current || current.prompt !== prompt) current = { key: newKey(), prompt };
      return current.key;
    },
    succeeded() {
      current = null;
    },
    edited(prompt) {
      if (current && current.prompt !== prompt) current = null;
    },
  };
}
