import { describe, expect, test } from "vitest";
import { ApiError, createApi } from "../../public/api.js";

type Call = { method: string; url: string; headers: Record<string, string>; body: unknown };

/** A fetch that answers from a list, recording what the page sent. */
function scripted(answers: Array<Response | Error>) {
  const calls: Call[] = [];
  const fetchImpl = (async (input: RequestInfo | URL, init?: RequestInit) => {
    calls.push({
      method: String(init?.method),
      url: String(input),
      headers: Object.fromEntries(new Headers(init?.headers).entries()),
      body: init?.body ? JSON.parse(String(init.body)) : undefined,
    });
    const next = answers.shift();
    if (!next) throw new Error("no more answers");
    if (next instanceof Error) throw next;
    return next;
  }) as typeof fetch;
  return { calls, fetchImpl };
}

const usage = {
  plan: "free",
  used: 1,
  limit: 1,
  periodStart: "2026-11-30T00:00:00.000Z",
  resetsAt: "2026-12-01T00:00:00.000Z",
  active: 0,
  maxActive: 1,
};

describe("the page's API client", () => {
  test("submit sends the prompt as JSON with the bearer token and the Idempotency-Key", async () => {
    const job = { id: "j1", phase: "queued" };
    const { calls, fetchImpl } = scripted([
      Response.json({ job, usage }, { status: 202 }),
      Response.json({ job, usage }, { status: 200 }),
    ]);
    const api = createApi({ token: async () => "tok", fetch: fetchImpl });
    expect(await api.submit("a haiku", "key-1")).toEqual({ job, usage, replayed: false });
    expect(await api.submit("a haiku", "key-1")).toEqual({ job, usage, replayed: true });
    expect(calls[0]).toEqual({
      method: "POST",
      url: "/api/jobs",
      headers: {
        accept: "application/json",
        authorization: "Bearer tok",
        "content-type": "application/json",
        "idempotency-key": "key-1",
      },
      body: { prompt: "a haiku" },
    });
  });

  test("a refusal becomes a Problem with its code, Retry-After and usage", async () => {
    const { fetchImpl } = scripted([
      Response.json(
        { usage, error: { code: "quota_exceeded", message: "You have used all 1 generation(s)" } },
        { status: 429, headers: { "retry-after": "3600" } },
      ),
    ]);
    const api = createApi({ token: async () => "tok", fetch: fetchImpl });
    const e = await api.submit("x", "k").catch((x) => x);
    expect(e).toBeInstanceOf(ApiError);
    expect(e.problem).toMatchObject({
      code: "quota_exceeded",
      status: 429,
      retryAfterSeconds: 3600,
      usage,
    });
  });

  test("an extraction is sent with its kind and input; an invalid_input refusal keeps its details", async () => {
    const details = [{ path: "input.schema.properties.age", message: "must be required" }];
    const { calls, fetchImpl } = scripted([
      Response.json(
        { error: { code: "invalid_input", message: "The input is not valid.", details } },
        { status: 400 },
      ),
    ]);
    const api = createApi({ token: async () => "tok", fetch: fetchImpl });
    const input = { text: "Ada, ada@example.com", schema: { type: "object" } };
    const e = await api.submit({ kind: "extract", input }, "k").catch((x) => x);
    expect(calls[0]?.body).toEqual({ kind: "extract", input });
    expect(e.problem).toMatchObject({ code: "invalid_input", status: 400, details });
  });

  test("no answer at all is a network problem (the caller retries with the same key)", async () => {
    const { fetchImpl } = scripted([new TypeError("Failed to fetch")]);
    const api = createApi({ token: async () => "tok", fetch: fetchImpl });
    const e = await api.submit("x", "k").catch((x) => x);
    expect(e.problem).toEqual({ code: "network" });
  });

  test("a gateway's HTML error page is 'unavailable', not a crash", async () => {
    const { fetchImpl } = scripted([new Response("<html>502</html>", { status: 502 })]);
    const api = createApi({ token: async () => "tok", fetch: fetchImpl });
    const e = await api.listJobs().catch((x) => x);
    expect(e.problem).toMatchObject({ code: "unavailable", status: 502 });
  });

  test("a 401 refreshes the token once and retries", async () => {
    const { calls, fetchImpl } = scripted([
      Response.json({ error: { code: "unauthorized", message: "" } }, { status: 401 }),
      Response.json(usage),
    ]);
    const api = createApi({
      token: async () => "old",
      refresh: async () => "new",
      fetch: fetchImpl,
    });
    expect(await api.usage()).toEqual(usage);
    expect(calls.map((c) => c.headers.authorization)).toEqual(["Bearer old", "Bearer new"]);
  });

  test("cancel returns the job; a job that already ended comes back as it is", async () => {
    const done = { id: "j1", phase: "succeeded" };
    const { calls, fetchImpl } = scripted([
      Response.json(
        { job: done, error: { code: "already_finished", message: "" } },
        { status: 409 },
      ),
    ]);
    const api = createApi({ token: async () => "tok", fetch: fetchImpl });
    expect(await api.cancelJob("j1")).toEqual(done);
    expect(calls[0]).toMatchObject({ method: "DELETE", url: "/api/jobs/j1" });
  });

  test("list and get use the documented routes", async () => {
    const { calls, fetchImpl } = scripted([
      Response.json({ jobs: [], nextCursor: null }),
      Response.json({ jobs: [], nextCursor: null }),
      Response.json({ job: { id: "a/b" } }),
    ]);
    const api = createApi({ token: async () => null, fetch: fetchImpl });
    await api.listJobs();
    await api.listJobs("c+/=");
    await api.getJob("a/b");
    expect(calls.map((c) => c.url)).toEqual([
      "/api/jobs?limit=20",
      "/api/jobs?limit=20&cursor=c%2B%2F%3D",
      "/api/jobs/a%2Fb",
    ]);
    expect(calls[0]?.headers.authorization).toBeUndefined();
  });
});
