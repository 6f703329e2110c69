// @ts-check
/**
 * What a finished job's output is, as a file: the text the page copies and downloads, its media
 * type and a file name. Pure, so the choice of each is tested without a browser. A document's
 * output is its markdown as the model wrote it (the page renders it, the file keeps the source);
 * an extraction's output is a JSON value, written with a 2-space indent.
 */

/** @typedef {import("./status.js").Job} Job */

/**
 * @typedef {{ format: "markdown" | "json", text: string, type: string, name: string }} OutputFile
 */

/**
 * The job's kind: `document` when the API says nothing (jobs made before kinds existed).
 * @param {Pick<Job, "id">} job
 * @returns {string}
 */
export function kindOf(job) {
  const kind = /** @type {{ kind?: unknown }} */ (job).kind;
  return typeof kind === "string" ? kind : "document";
}

/**
 * A value as the page shows it: JSON with a 2-space indent.
 * @param {unknown} value
 */
export function formatJson(value) {
  return JSON.stringify(value, null, 2) ?? "null";
}

/**
 * "document-2026-12-02-3f2a9c1b.md": the kind, the day the job was made (UTC, as the API
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
 * The finished output as a file, or null while there is none (not succeeded yet, or a
 * document with an empty text).
 * @param {Job} job
 * @returns {OutputFile | null}
 */
export function outputFile(job) {
  if (job.phase !== "succeeded") return null;
  const output = /** @type {unknown} */ (job.output);
  if (kindOf(job) === "extract") {
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
