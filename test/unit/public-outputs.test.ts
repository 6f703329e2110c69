import { describe, expect, test } from "vitest";
import type { Job } from "../../lib/view.ts";
import { fileName, formatJson, kindOf, outputFile } from "../../public/outputs.js";
import { viewJob } from "../support/page-fixtures.ts";

const job = (over: Omit<Partial<Job>, "output"> & { kind?: string; output?: unknown }): Job =>
  viewJob({
    status: "succeeded",
    phase: "succeeded",
    createdAt: "2026-11-30T23:59:00Z",
    attempts: 1,
    cancelRefunds: false,
    captured: 1,
    ...over,
  });

describe("a finished output as a file", () => {
  test("a document is its markdown source, as .md", () => {
    expect(outputFile(job({ kind: "document", output: "# Notes\n\n- one" }), "text")).toEqual({
      format: "markdown",
      text: "# Notes\n\n- one",
      type: "text/markdown;charset=utf-8",
      name: "document-2026-11-30-7b0c2f0e.md",
    });
  });

  test("a kind the page was not told of: a text is a text, anything else JSON; no kind is a job", () => {
    expect(kindOf(job({}))).toBe("job");
    expect(outputFile(job({ output: "text" }))?.name).toBe("job-2026-11-30-7b0c2f0e.md");
    expect(outputFile(job({ kind: "new", output: { a: 1 } }))?.format).toBe("json");
  });

  test("an extraction is its JSON value, indented by two spaces, as .json", () => {
    const value = { name: "Ada", emails: ["ada@example.com"], phone: null };
    expect(outputFile(job({ kind: "extract", output: value }), "json")).toEqual({
      format: "json",
      text: '{\n  "name": "Ada",\n  "emails": [\n    "ada@example.com"\n  ],\n  "phone": null\n}',
      type: "application/json",
      name: "extract-2026-11-30-7b0c2f0e.json",
    });
  });

  test("an extraction whose value is a JSON false, 0 or empty string is still an output", () => {
    expect(outputFile(job({ kind: "extract", output: false }), "json")?.text).toBe("false");
    expect(outputFile(job({ kind: "extract", output: 0 }), "json")?.text).toBe("0");
    expect(outputFile(job({ kind: "extract", output: "" }), "json")?.text).toBe('""');
  });

  test("nothing to copy before the job succeeds, or from an empty document", () => {
    for (const phase of ["queued", "running", "failed", "canceled"] as const)
      expect(outputFile(job({ phase, output: "partial" }))).toBeNull();
    expect(outputFile(job({ output: "" }), "text")).toBeNull();
    expect(outputFile(job({ kind: "extract", output: null }), "json")).toBeNull();
  });

  test("the file name keeps only letters and digits of the id", () => {
    expect(fileName({ id: "../../etc/passwd", createdAt: "2026-12-02T00:00:00Z" }, "md")).toBe(
      "job-2026-12-02-etcpassw.md",
    );
  });

  test("formatJson indents nested values and writes null for undefined", () => {
    expect(formatJson({ a: [1, { b: true }] })).toBe(
      '{\n  "a": [\n    1,\n    {\n      "b": true\n    }\n  ]\n}',
    );
    expect(formatJson(undefined)).toBe("null");
  });
});
