// @ts-check
/**
 * What a finished job's output is, as a file: the text the page copies and downloads, its media
 * type and a file name. Pure, so the choice of each is tested without a browser. What the output
 * is, its kind declares (lib/kinds): a text is markdown as the model wrote it (the page renders
 * it, the file keeps the source); a JSON value is written with a 2-space indent.
 */

/** @typedef {import("./status.js").Job} Job */

/**
 * @typedef {{ format: "markdown" | "json", text: string, type: string, name: string }} OutputFile
 */

/**
 * The job's kind's id, "job" when the API says none.
 * @param {Pick<Job, "id">} job
 * @returns {string}
 */
export function kindOf(job) {
  const kind = /** @type {{ kind?: unknown }} */ (job).kind;
  return typeof kind === "string" ? kind : "job";
}

/**
 * A value as the page shows it: JSON with a 2-space indent.
 * @param {unknown} value
 */
export function formatJson(value) {
  return JSON.stringify(value, null, 2) ?? "null";
}

/**
 * "<kind>-2026-12-02-3f2a9c1b.md": the kind's id, the day the job was made (UTC, as the API
 * dates it) and the start of its id, so two downloads never share a name.
 * @param {Pick<Job, "id" | "createdAt">} job
 * @param {string} extension without the dot
 */
export function fileName(job, extension) {
  const day = job.createdAt.slice(0, 10);
  const id = job.id.replace(/[^0-9a-z]/gi, "").slice(0, 8);
  return `${kindOf(job)}-${day}-${id}.${extension}`;
}

/**
 * The finished output as a file, or null while there is none (not succeeded yet, or an empty
 * text). `declared` is what its kind says its output is; unknown (a kind the page was not told
 * of), a text is a text and anything else JSON.
 * @param {Job} job
 * @param {"text" | "json"} [declared]
 * @returns {OutputFile | null}
 */
export function outputFile(job, declared) {
  if (job.phase !== "succeeded") return null;
  const output = /** @type {unknown} */ (job.output);
  if ((declared ?? (typeof output === "string" ? "text" : "json")) === "json") {
    if (output === null || output === undefined) return null;
    return {
      format: "json",
      text: formatJson(output),
      type: "application/json",
      name: fileName(job, "json"),
    };
  }
  if (typeof output !== "string" || output === "") return null;
  return {
    format: "markdown",
    text: output,
    type: "text/markdown;charset=utf-8",
    name: fileName(job, "md"),
  };
}
