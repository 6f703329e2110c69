/**
 * Job kinds through the API, in-process, on the real database and the fake model behind the real
 * SDK (docs/DESIGN.md#job-kinds): every status and code of `POST /api/jobs` for the new body, the
 * legacy body unchanged, and the worker reading an extraction's output through its kind.
 */
import { describe, expect, test } from "vitest";
import { KIND_IDS, loadKind } from "../../lib/kinds/index.ts";
import { declarationOf } from "../../lib/kinds/kind.ts";
import { type TestUser, useApi } from "../support/api.ts";

const app = useApi();

const schema = {
  type: "object",
  properties: {
    name: { type: "string", description: "the person's full name" },
    born: { type: ["integer", "null"] },
  },
  required: ["name", "born"],
  additionalProperties: false,
};

function post(user: TestUser, body: unknown, headers: Record<string, string> = {}) {
  return app.call("jobs", "/api/jobs", {
    method: "POST",
    headers: { ...user.headers, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
}

const extraction = (text: string, s: unknown = schema) => ({
  kind: "extract",
  input: { text, schema: s },
});

const jobsOf = async (userId: string) =>
  (
    await app.admin.query<{ n: number }>(
      "select count(*)::int as n from public.generation_jobs where user_id = $1",
      [userId],
    )
  ).rows[0]?.n;

async function refusal(res: Response, status: number, code: string) {
  expect(res.status).toBe(status);
  const body = await res.json();
  expect(body.error.code).toBe(code);
  return body;
}

describe("POST /api/jobs with a kind", () => {
  test("202: an extraction on pro holds its 2 units; the job shows its kind and input, the usage what the plan offers", async () => {
    const user = await app.newUser("pro");
    const res = await post(user, extraction("Ada Lovelace, born 1815."));
    expect(res.status).toBe(202);
    const body = await res.json();
    expect(body.job).toMatchObject({
      kind: "extract",
      prompt: "Ada Lovelace, born 1815.",
      input: { text: "Ada Lovelace, born 1815.", schema },
      hold: 2,
      output: null,
    });
    expect(body.usage).toMatchObject({
      used: 2,
      kinds: [
        { kind: "document", units: 1 },
        { kind: "summary", units: 1 },
        { kind: "extract", units: 2 },
      ],
    });
    expect(await app.unitsUsed(user.id)).toBe(2);
    expect(app.qstash.forJob(body.job.id)).toHaveLength(1);
    const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
    expect(usage.kinds).toEqual(body.usage.kinds);
  });

  test("GET /api/usage declares every kind of the registry: its names, its form, its output", async () => {
    const user = await app.newUser("free");
    const usage = await (await app.call("usage", "/api/usage", { headers: user.headers })).json();
    expect(usage.catalog.map((k: { id: string }) => k.id)).toEqual(KIND_IDS);
    for (const id of KIND_IDS) {
      const kind = await loadKind(id);
      expect(usage.catalog).toContainEqual(JSON.parse(JSON.stringify(declarationOf(kind))));
    }
    expect(usage.catalog.find((k: { id: string }) => k.id === "extract")).toMatchObject({
      noun: "extraction",
      output: "json",
      fields: [
        { name: "text", type: "text", maxChars: 8000 },
        { name: "schema", type: "json", maxBytes: 16384 },
      ],
    });
  });

  test('202: {"kind": "document"} is a document, as the legacy {"prompt"} body is', async () => {
    const user = await app.newUser("pro");
    const res = await post(user, { kind: "document", input: { prompt: "a haiku" } });
    expect(res.status).toBe(202);
    const body = await res.json();
    expect(body.job).toMatchObject({ kind: "document", input: { prompt: "a haiku" }, hold: 1 });
    const legacy = await (await app.enqueue(user, "another haiku")).json();
    expect(legacy.job).toMatchObject({ kind: "document", input: { prompt: "another haiku" } });
  });

  test("400 unknown_kind: nothing reserved, nothing published", async () => {
    const user = await app.newUser("pro");
    for (const kind of ["translate", 7, null, "__proto__"]) {
      const body = await refusal(await post(user, { kind, input: {} }), 400, "unknown_kind");
      expect(body.error.message).toMatch(/document, extract/);
    }
    expect(await jobsOf(user.id)).toBe(0);
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.qstash.messages).toHaveLength(0);
  });

  test("400 invalid_input with every problem's path in details", async () => {
    const user = await app.newUser("pro");
    const looseSchema = {
      type: "object",
      properties: { name: { type: "string" } },
      required: ["name"],
    };
    const body = await refusal(
      await post(user, { kind: "extract", input: { text: "   ", schema: looseSchema, extra: 1 } }),
      400,
      "invalid_input",
    );
    const paths = (body.details as { path: string; message: string }[]).map((d) => d.path);
    expect(paths).toContain("input.text");
    expect(paths).toContain("input.extra");
    expect(paths.some((p) => p.startsWith("input.schema"))).toBe(true);
    for (const d of body.details) expect(d.message).toEqual(expect.any(String));

    // Each one problem, at its path.
    for (const [body, details] of [
      [
        { kind: "extract", input: { text: "a text" } },
        [{ path: "input.schema", message: "Must be a JSON Schema object." }],
      ],
      [{ kind: "document", input: "a prompt" }, [{ path: "input", message: "Must be an object." }]],
      [
        { kind: "document", input: { prompt: "" } },
        [{ path: "input.prompt", message: "The prompt is empty." }],
      ],
      [
        extraction("x".repeat(8001)),
        [{ path: "input.text", message: "The text is longer than 8,000 characters." }],
      ],
    ] as const) {
      const refused = await refusal(await post(user, body), 400, "invalid_input");
      expect({ body, details: refused.details }).toEqual({ body, details });
    }
    expect(await jobsOf(user.id)).toBe(0);
    expect(await app.unitsUsed(user.id)).toBe(0);
  });

  test("the legacy body's refusals stay invalid_prompt", async () => {
    const user = await app.newUser("pro");
    await refusal(await app.enqueue(user, ""), 400, "invalid_prompt");
    await refusal(await post(user, { prompt: 5 }), 400, "invalid_prompt");
    await refusal(await post(user, ["a"]), 400, "invalid_prompt");
  });

  test("403 kind_not_in_plan: free offers no extraction; the message and kinds say what it offers; nothing reserved", async () => {
    const user = await app.newUser("free");
    const body = await refusal(
      await post(user, extraction("Ada Lovelace, born 1815.")),
      403,
      "kind_not_in_plan",
    );
    expect(body.kinds).toEqual([{ kind: "document", units: 1 }]);
    expect(body.error.message).toBe(
      "Your plan does not offer extractions. It offers: documents (1 unit).",
    );
    expect(await jobsOf(user.id)).toBe(0);
    expect(await app.unitsUsed(user.id)).toBe(0);
    expect(app.qstash.messages).toHaveLength(0);
    // The day's document still fits.
    expect((await app.enqueue(user, "a haiku")).status).toBe(202);
  });

  test("429 quota_exceeded names the extraction's cost and what is left", async () => {
    await app.admin.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
       values ('kinds_small', 'Small', 'month', 4, 3) on conflict (id) do nothing`,
    );
    await app.admin.query(
      `insert into public.plan_kinds (plan_id, kind, units) values ('kinds_small', 'extract', 2)
       on conflict do nothing`,
    );
    const user = await app.newUser("kinds_small");
    expect((await app.enqueue(user, "a haiku")).status).toBe(202);
    expect((await post(user, extraction("Ada, 1815"))).status).toBe(202);
    const res = await post(user, extraction("Grace Hopper, born 1906"));
    const body = await refusal(res, 429, "quota_exceeded");
    expect(body.error.message).toMatch(
      /^An extraction costs 2 units; 1 of your 4 is left this period\./,
    );
    expect(res.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await app.unitsUsed(user.id)).toBe(3);
  });

  test("422 idempotency_key_reused: the same key with another kind or input", async () => {
    const user = await app.newUser("pro");
    const key = { "idempotency-key": "kinds-api-key" };
    expect((await post(user, extraction("Ada, 1815"), key)).status).toBe(202);
    expect((await post(user, extraction("Ada, 1815"), key)).status).toBe(200);
    await refusal(await post(user, extraction("Ada, 1816"), key), 422, "idempotency_key_reused");
    await refusal(await app.enqueue(user, "Ada, 1815", key), 422, "idempotency_key_reused");
    expect(await app.unitsUsed(user.id)).toBe(2);
  });
});

describe("the worker reads an extraction through its kind", () => {
  async function run(user: TestUser, text: string) {
    const res = await post(user, extraction(text));
    expect(res.status).toBe(202);
    const id = (await res.json()).job.id as string;
    const delivered = await app.deliver(app.qstash.latestFor(id));
    expect(delivered.status).toBe(200);
    const job = (await (await app.call("job", `/api/jobs/${id}`, { headers: user.headers })).json())
      .job;
    return { id, job, outcome: ((await delivered.json()) as { outcome: string }).outcome };
  }

  /** The run ended the job failed `reason` and gave the user's units back. */
  async function expectRefundedFailure(
    user: TestUser,
    ran: { job: unknown; outcome: string },
    reason: string,
  ) {
    expect(ran.outcome).toBe("failed");
    expect(ran.job).toMatchObject({ status: "failed", failureReason: reason, quotaRefunded: true });
    expect(await app.unitsUsed(user.id)).toBe(0);
  }

  test("success: the JSON is stored, and the job shows the parsed value that fits the schema", async () => {
    const user = await app.newUser("pro");
    const { id, job, outcome } = await run(user, "Ada Lovelace, born 1815.");
    expect(outcome).toBe("completed");
    expect(job).toMatchObject({ status: "succeeded", kind: "extract", captured: 2 });
    expect(job.output).toEqual({ name: expect.any(String), born: expect.anything() });
    expect(JSON.parse((await app.jobRow(id)).output ?? "")).toEqual(job.output);
    expect(await app.unitsUsed(user.id)).toBe(2);
  });

  test("output that breaks the schema: failed output_invalid, refunded by the rule (pro, under its bound), usage recorded, no retry", async () => {
    const user = await app.newUser("pro");
    const ran = await run(user, "Ada Lovelace [fake:json_invalid]");
    await expectRefundedFailure(user, ran, "output_invalid");
    const { id } = ran;
    const failed = (await app.events(id)).find((e) => e.event === "failed");
    expect(failed?.detail).toMatchObject({
      reason: "output_invalid",
      counted: true,
      usage: { source: "provider" },
    });
    expect(app.qstash.forJob(id)).toHaveLength(1);
    // The output never reaches a log line.
    expect(app.logs.join("\n")).not.toContain("Ada Lovelace");
  });

  test("output cut at the plan's bound: failed output_truncated", async () => {
    const user = await app.newUser("free");
    await app.admin.query(
      "insert into public.user_plans (user_id, plan_id) values ($1, 'pro') on conflict (user_id) do update set plan_id = 'pro'",
      [user.id],
    );
    const { job, outcome } = await run(user, "Ada Lovelace [fake:tokens:9000]");
    expect(outcome).toBe("failed");
    expect(job).toMatchObject({ status: "failed", failureReason: "output_truncated" });
  });

  test("a refusal is model_refused, refunded", async () => {
    const user = await app.newUser("pro");
    await expectRefundedFailure(
      user,
      await run(user, "Ada Lovelace [fake:refuse]"),
      "model_refused",
    );
  });

  test("a token plan's extraction holds its input bound + 2,048 and captures what the provider reported", async () => {
    const user = await app.newUser("team");
    const res = await post(user, extraction("Ada Lovelace, born 1815."));
    const enqueued = (await res.json()).job;
    expect(enqueued.meter).toBe("tokens");
    expect(enqueued.hold).toBeGreaterThan(2048 + 2 * JSON.stringify(schema).length);
    await app.deliver(app.qstash.latestFor(enqueued.id));
    const job = (
      await (await app.call("job", `/api/jobs/${enqueued.id}`, { headers: user.headers })).json()
    ).job;
    expect(job.status).toBe("succeeded");
    const completed = (await app.events(enqueued.id)).find((e) => e.event === "completed");
    expect(completed).toBeDefined();
    const { usage } = (completed?.detail ?? {}) as {
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    expect(job.captured).toBe(usage.prompt_tokens + usage.completion_tokens);
    expect(job.captured).toBeLessThan(enqueued.hold);
    expect(await app.unitsUsed(user.id)).toBe(job.captured);
  });
});
