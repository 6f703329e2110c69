import { describe, expect, test } from "vitest";
import { DatabaseError, HttpError, UpstreamError } from "../../lib/errors.ts";
import { errorBody, handle, json, readJson, toErrorResponse } from "../../lib/http.ts";
import { captureLogLines } from "../support/log-lines.ts";

const lines = captureLogLines();

const url = "http://127.0.0.1:3000/api/jobs";

/** A request whose body arrives in chunks and never declares its length. */
function streamed(chunks: number, chunkSize: number, counter: { pulled: number }): Request {
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (counter.pulled >= chunks) return controller.close();
      counter.pulled += 1;
      controller.enqueue(new Uint8Array(chunkSize).fill(0x20));
    },
  });
  return new Request(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
    duplex: "half",
  } as RequestInit);
}

describe("json and errorBody", () => {
  test("json sets the status, JSON content type, no-store, and extra headers", async () => {
    const res = json(202, { ok: true }, { "x-extra": "1" });
    expect(res.status).toBe(202);
    expect(res.headers.get("content-type")).toMatch(/^application\/json/);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("x-extra")).toBe("1");
    expect(await res.json()).toEqual({ ok: true });
  });

  test("errorBody is the one error shape", () => {
    expect(errorBody("not_found", "No such job.")).toEqual({
      error: { code: "not_found", message: "No such job." },
    });
  });
});

describe("readJson", () => {
  test("parses a JSON body", async () => {
    const req = new Request(url, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8" },
      body: '{"prompt":"hi"}',
    });
    expect(await readJson(req, { maxBytes: 100 })).toEqual({ prompt: "hi" });
  });

  test("415 when the body is not declared as JSON", async () => {
    const req = new Request(url, {
      method: "POST",
      headers: { "content-type": "text/plain" },
      body: '{"prompt":"hi"}',
    });
    await expect(readJson(req, { maxBytes: 100 })).rejects.toMatchObject({
      status: 415,
      code: "unsupported_media_type",
    });
  });

  test("413 from Content-Length before reading anything", async () => {
    const counter = { pulled: 0 };
    const req = streamed(1_000, 100, counter);
    const withLength = new Request(req, {
      headers: { "content-type": "application/json", "content-length": "1000" },
    });
    await expect(readJson(withLength, { maxBytes: 100 })).rejects.toMatchObject({
      status: 413,
      code: "payload_too_large",
    });
    expect(counter.pulled).toBeLessThan(5); // at most the stream's own read-ahead
  });

  test("413 for a streamed body without Content-Length, and reading stops at the limit", async () => {
    const counter = { pulled: 0 };
    const req = streamed(1_000, 1_024, counter); // 1 MB on offer
    await expect(readJson(req, { maxBytes: 4_096 })).rejects.toMatchObject({
      status: 413,
      code: "payload_too_large",
    });
    expect(counter.pulled).toBeLessThan(10);
  });

  test("400 invalid_json for bad JSON, an empty body, or bytes that are not UTF-8", async () => {
    const bodies: BodyInit[] = ['{"prompt":', "", new Uint8Array([0x7b, 0xff, 0x7d])];
    for (const body of bodies) {
      const req = new Request(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body,
      });
      await expect(readJson(req, { maxBytes: 100 })).rejects.toMatchObject({
        status: 400,
        code: "invalid_json",
      });
    }
  });
});

describe("toErrorResponse", () => {
  test("HttpError keeps its status, code, headers and extra body fields", async () => {
    const res = toErrorResponse(
      new HttpError(
        409,
        "already_finished",
        "The job already finished.",
        { "x-job": "1" },
        { job: { id: "j" } },
      ),
    );
    expect(res.status).toBe(409);
    expect(res.headers.get("x-job")).toBe("1");
    expect(await res.json()).toEqual({
      job: { id: "j" },
      error: { code: "already_finished", message: "The job already finished." },
    });
  });

  test("DatabaseError → 503 unavailable with Retry-After, details only in the log", async () => {
    const res = toErrorResponse(
      new DatabaseError("could not serialize access", {
        fn: "complete_job",
        status: 500,
        code: "40001",
      }),
    );
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    const body = await res.json();
    expect(body.error.code).toBe("unavailable");
    expect(JSON.stringify(body)).not.toContain("serialize");
    expect(lines.join("\n")).toContain("40001");
  });

  test("UpstreamError → 503 unavailable with Retry-After", async () => {
    const res = toErrorResponse(new UpstreamError("qstash", "publish refused", 500));
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    expect((await res.json()).error.code).toBe("unavailable");
  });

  test("anything else → 500 internal that hides the internals", async () => {
    const res = toErrorResponse(
      new Error("connect ECONNREFUSED postgres://postgres:pw@10.0.0.3:5432"),
    );
    expect(res.status).toBe(500);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({
      error: { code: "internal", message: "Internal server error." },
    });
    expect(text).not.toContain("ECONNREFUSED");
    expect(lines.some((l) => l.includes("unhandled_error") && l.includes("ECONNREFUSED"))).toBe(
      true,
    );
  });
});

describe("handle", () => {
  const route = handle({
    GET: async () => json(200, { ok: true }),
    POST: async () => {
      throw new HttpError(429, "rate_limited", "Slow down.", { "retry-after": "12" });
    },
    DELETE: async () => {
      throw new TypeError("Cannot read properties of undefined (reading 'id')");
    },
  });

  test("dispatches by method", async () => {
    const res = await route(new Request(url));
    expect(res.status).toBe(200);
  });

  test("405 with Allow for any other method", async () => {
    const res = await handle({ GET: async () => json(200, {}), POST: async () => json(202, {}) })(
      new Request(url, { method: "PUT", body: "x" }),
    );
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, POST");
    expect((await res.json()).error.code).toBe("method_not_allowed");
  });

  test("a thrown HttpError becomes its response", async () => {
    const res = await route(new Request(url, { method: "POST" }));
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("12");
    expect(await res.json()).toEqual({ error: { code: "rate_limited", message: "Slow down." } });
  });

  test("a bug becomes a generic 500, logged with the route", async () => {
    const res = await route(new Request(url, { method: "DELETE" }));
    expect(res.status).toBe(500);
    expect(await res.text()).not.toContain("Cannot read");
    expect(lines.some((l) => l.includes('"path":"/api/jobs"') && l.includes("Cannot read"))).toBe(
      true,
    );
  });
});
