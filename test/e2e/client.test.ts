/**
 * The typed client (public/client.js) against the whole local stack, over HTTP as the page
 * calls it: `watch` follows a job through its states, a cancel ends a watch, refusals are typed
 * errors with the API's codes, and `list` pages with its cursor; and the contract test that
 * holds every documented operation's real answers to public/openapi.json.
 */
import { readFileSync } from "node:fs";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { expect, test } from "vitest";
import type { Job } from "../../lib/view.ts";
import { ApiError, createClient } from "../../public/client.js";
import { type Json, useStack } from "../support/stack.ts";

const fixture = useStack({
  // Progress written often, so a short streamed answer is seen growing more than once.
  env: { PROGRESS_INTERVAL_MS: "300" },
});

async function clientFor(plan: "free" | "pro" = "pro") {
  const { stack } = fixture;
  const session = await stack.signIn({ plan });
  return createClient({ base: stack.urls.app, token: async () => session.accessToken });
}

/** Consecutive repeats dropped: ["a", "a", "b"] → ["a", "b"]. */
const collapse = (xs: string[]) => xs.filter((x, i) => x !== xs[i - 1]);

test("enqueue → watch: queued, running, succeeded in order, the answer growing", async () => {
  const client = await clientFor();
  const { job, replayed } = await client.enqueue(
    "document",
    { prompt: "[fake:chunk_ms:100] [fake:tokens:60] A document written slowly" },
    { idempotencyKey: crypto.randomUUID() },
  );
  expect(replayed).toBe(false);
  const seen: Job[] = [];
  for await (const state of client.watch(job.id)) seen.push(state);

  expect(collapse([job.status, ...seen.map((s) => s.status)])).toEqual([
    "queued",
    "running",
    "succeeded",
  ]);
  // every change is yielded (token counters too): the answer's steps, each once
  const partials = collapse(
    seen
      .filter((s) => s.status === "running" && s.partialOutput)
      .map((s) => s.partialOutput as string),
  );
  expect(partials.length).toBeGreaterThanOrEqual(2);
  for (let i = 1; i < partials.length; i++) {
    expect(partials[i]?.length).toBeGreaterThan(partials[i - 1]?.length ?? 0);
    expect(partials[i]?.startsWith(partials[i - 1] ?? "")).toBe(true);
  }
  const last = seen.at(-1);
  expect(last?.status).toBe("succeeded");
  expect(String(last?.output)).toContain(partials.at(-1));
}, 60_000);

test("a cancel during a watch ends it canceled", async () => {
  const client = await clientFor();
  const { job } = await client.enqueue(
    "document",
    { prompt: "[fake:slow:5000] take your time" },
    { idempotencyKey: crypto.randomUUID() },
  );
  const statuses: string[] = [];
  for await (const state of client.watch(job.id)) {
    statuses.push(state.status);
    if (state.status === "running") {
      const canceled = await client.cancel(job.id);
      expect(canceled.job.status).toBe("canceled");
    }
  }
  expect(collapse(statuses).slice(-2)).toEqual(["running", "canceled"]);
  const again = await client.cancel(job.id).catch((e: unknown) => e);
  expect(again).toBeInstanceOf(ApiError);
  expect((again as ApiError).code).toBe("already_finished");
  expect((again as ApiError).problem.job?.status).toBe("canceled");
}, 60_000);

test("a refusal is an ApiError with its code; an aborted watch just ends", async () => {
  const client = await clientFor();
  const key = { idempotencyKey: crypto.randomUUID() };
  const refusal = (p: Promise<unknown>) =>
    p.then(
      () => null,
      (e: unknown) => e,
    );

  const empty = await refusal(client.enqueue("document", { prompt: "" }, key));
  expect(empty).toBeInstanceOf(ApiError);
  expect(empty).toMatchObject({
    code: "invalid_input",
    problem: { status: 400, details: [expect.objectContaining({ path: "input.prompt" })] },
  });

  const unknown = await refusal(client.enqueue("poem", { prompt: "hi" }, key));
  expect(unknown).toMatchObject({ code: "unknown_kind", problem: { status: 400 } });

  const missing = await refusal(client.get(crypto.randomUUID()));
  expect(missing).toMatchObject({ code: "not_found", problem: { status: 404 } });

  const stranger = createClient({ base: fixture.stack.urls.app, token: async () => "nope" });
  expect(await refusal(stranger.usage())).toMatchObject({ code: "unauthorized" });

  const nowhere = createClient({ base: "http://127.0.0.1:9", token: async () => null });
  expect(await refusal(nowhere.usage())).toMatchObject({ code: "network" });

  // Watching a job that never moves (not found would throw): aborted, the loop ends quietly.
  const { job } = await client.enqueue(
    "document",
    { prompt: "[fake:slow:3000] a slow one" },
    { idempotencyKey: crypto.randomUUID() },
  );
  const controller = new AbortController();
  const seen: string[] = [];
  for await (const state of client.watch(job.id, { signal: controller.signal })) {
    seen.push(state.status);
    controller.abort();
  }
  expect(seen).toHaveLength(1);
  await client.cancel(job.id).catch(() => undefined);
}, 60_000);

test("list pages with the cursor, newest first", async () => {
  const client = await clientFor();
  const ids: string[] = [];
  for (const n of [1, 2, 3]) {
    const { job } = await client.enqueue(
      "document",
      { prompt: `Document number ${n}` },
      { idempotencyKey: crypto.randomUUID() },
    );
    for await (const _ of client.watch(job.id)) {
      // to the end: one job at a time
    }
    ids.unshift(job.id);
  }
  const first = await client.list({ limit: 2 });
  expect(first.jobs.map((j) => j.id)).toEqual(ids.slice(0, 2));
  expect(first.nextCursor).toEqual(expect.any(String));
  const second = await client.list({ limit: 2, cursor: first.nextCursor });
  expect(second.jobs.map((j) => j.id)).toEqual(ids.slice(2));
  expect(second.nextCursor).toBeNull();
}, 90_000);

/**
 * The contract: each documented operation called for real, and what came back (status,
 * content-type, body) validated against public/openapi.json, whose response objects are closed:
 * a field renamed or added in a handler's answer fails here until the document says so.
 */
const doc = JSON.parse(readFileSync("public/openapi.json", "utf8"));
const ajv = addFormats.default(new Ajv2020({ allErrors: true, strict: false }));
ajv.addSchema({ $id: "openapi.json", components: doc.components });
const checked = new Set<string>();

async function conforms(method: string, path: string, res: Response): Promise<Json> {
  const operation = doc.paths[path]?.[method.toLowerCase()];
  expect(operation, `${method} ${path} is documented`).toBeDefined();
  const documented = operation.responses[String(res.status)];
  expect(documented, `${method} ${path} documents ${res.status}`).toBeDefined();
  const type = Object.keys(documented.content)[0] as string;
  expect(res.headers.get("content-type")).toMatch(new RegExp(`^${type}(;|$)`));
  const body = await res.json();
  const schema = JSON.parse(
    JSON.stringify(documented.content[type].schema).replaceAll('"#/', '"openapi.json#/'),
  );
  const validate = ajv.compile(schema);
  expect(
    validate(body),
    `${method} ${path} ${res.status}: ${ajv.errorsText(validate.errors)}`,
  ).toBe(true);
  checked.add(operation.operationId);
  return body;
}

test("contract: every documented operation answers as public/openapi.json says", async () => {
  const { stack } = fixture;
  const session = await stack.signIn({ plan: "pro" });
  const call = async (method: string, template: string, path: string, body?: unknown) => {
    const headers: Record<string, string> = { authorization: `Bearer ${session.accessToken}` };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      // One key per body: the same body again is the replay.
      headers["idempotency-key"] = JSON.stringify(body)
        .replace(/[^\x21-\x7e]/g, "_")
        .slice(0, 255);
    }
    const res = await fetch(`${stack.urls.app}${path}`, {
      method,
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return conforms(method, template, res);
  };
  const served = await fetch(`${stack.urls.app}/openapi.json`);
  expect(served.status).toBe(200);
  expect(await served.json()).toEqual(doc);

  const prompt = { kind: "document", input: { prompt: "[fake:slow:1500] contract" } };
  const created = await call("POST", "/api/jobs", "/api/jobs", prompt);
  const id = created.job.id as string;
  await call("POST", "/api/jobs", "/api/jobs", prompt); // 200: replayed
  await call("POST", "/api/jobs", "/api/jobs", { kind: "poem", input: {} }); // 400
  await call("GET", "/api/jobs/{id}", `/api/jobs/${id}`);
  await call("GET", "/api/jobs/{id}", `/api/jobs/${crypto.randomUUID()}`); // 404
  await call("GET", "/api/jobs", "/api/jobs?limit=5");
  await call("GET", "/api/jobs", "/api/jobs?limit=0"); // 400
  await call("GET", "/api/usage", "/api/usage");
  await call("DELETE", "/api/jobs/{id}", `/api/jobs/${id}`);
  await call("DELETE", "/api/jobs/{id}", `/api/jobs/${id}`); // 409, with the job
  // A finished job, output and all.
  const done = await call("POST", "/api/jobs", "/api/jobs", {
    kind: "document",
    input: { prompt: "a short one" },
  }).then(async (r) => {
    for await (const _ of createClient({
      base: stack.urls.app,
      token: async () => session.accessToken,
    }).watch(r.job.id)) {
      // to the end
    }
    return r.job.id as string;
  });
  expect((await call("GET", "/api/jobs/{id}", `/api/jobs/${done}`)).job.status).toBe("succeeded");
  await call("GET", "/api/me/export", "/api/me/export");
  await conforms("GET", "/api/usage", await fetch(`${stack.urls.app}/api/usage`)); // 401
  await conforms("GET", "/api/health", await fetch(`${stack.urls.app}/api/health`));
  await conforms("GET", "/api/public-config", await fetch(`${stack.urls.app}/api/public-config`));
  await call("DELETE", "/api/me", "/api/me");

  const operations = Object.values(doc.paths).flatMap((p) =>
    Object.values(p as Record<string, { operationId?: string }>)
      .map((o) => o.operationId)
      .filter(Boolean),
  );
  expect([...checked].sort()).toEqual(operations.sort());
}, 90_000);
