/**
 * A fuzz run over every route's method, query, headers and body (bad input, docs/RELIABILITY.md).
 * What test/api already pins down case by case (each 4xx code, the 10 MB body, every signature and
 * token variant) is not repeated; here fast-check throws random requests at the in-process handlers
 * over the real parts (test/support/api.ts) and checks, for every one:
 *
 * - never a 5xx for any client input (the database, Redis and the model are up);
 * - a 4xx always has the `{"error":{"code","message"}}` shape;
 * - nothing is reserved by a refused request: the user's units and jobs change only on a 2xx
 *   that created a job, and no drift ever.
 */
import fc from "fast-check";
import { describe, expect, test } from "vitest";
import { type Route, signAsQStash, type TestUser, useApi } from "../support/api.ts";

const RUNS = Number(process.env.QUOTA_JOBS_FUZZ_RUNS ?? 400);
/** Replays a reported failure: the seed fast-check printed. */
const SEED = process.env.QUOTA_JOBS_FUZZ_SEED;
const app = useApi({ env: { RATE_LIMIT_REQUESTS: "100000" } });

const ROUTES: Array<{ route: Route; path: string; methods: string[] }> = [
  { route: "jobs", path: "/api/jobs", methods: ["POST", "GET"] },
  { route: "job", path: "/api/jobs/", methods: ["GET", "DELETE"] },
  { route: "usage", path: "/api/usage", methods: ["GET"] },
  { route: "worker", path: "/api/worker", methods: ["POST"] },
  { route: "dlq", path: "/api/dlq", methods: ["POST"] },
  { route: "sweep", path: "/api/cron/sweep", methods: ["GET"] },
  { route: "health", path: "/api/health", methods: ["GET"] },
];

/** What an HTTP header can carry: visible ASCII and spaces, now and then Latin-1. */
const headerText = fc.oneof(
  { weight: 4, arbitrary: fc.stringMatching(/^[\x20-\x7e]{0,80}$/) },
  { weight: 1, arbitrary: fc.stringMatching(/^[\x20-\x7e\xa0-\xff]{0,300}$/) },
);
const text = fc.oneof(
  fc.string({ unit: "binary", maxLength: 200 }),
  fc.string({ unit: "grapheme", maxLength: 50 }),
  fc.string({ maxLength: 20 }).map((s) => `${s}\u0000\u0007\u202e\ud800${s}`),
);
const promptValue = fc.oneof(
  text,
  fc.string({ minLength: 7_990, maxLength: 8_010 }),
  fc.constant(" \t\n\u00a0\u3000"),
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(text, { maxLength: 3 }),
  fc.object({ maxDepth: 2 }),
);
const body = fc.oneof(
  fc.record({ prompt: promptValue }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
  fc.record({ prompt: fc.string({ minLength: 1, maxLength: 60 }) }).map((o) => JSON.stringify(o)),
  fc.record({ prompt: fc.string({ minLength: 1, maxLength: 60 }) }).map((o) => JSON.stringify(o)),
  fc.record({ prompt: fc.string({ minLength: 1, maxLength: 60 }) }).map((o) => JSON.stringify(o)),
  fc
    .record({ prompt: promptValue, extra: fc.jsonValue({ maxDepth: 2 }) })
    .map((o) => JSON.stringify(o)),
  fc.json({ maxDepth: 3 }),
  fc.record({ jobId: fc.oneof(fc.uuid(), text) }).map((o) => JSON.stringify(o)),
  fc
    .record({ sourceBody: fc.oneof(text, fc.base64String()), status: fc.jsonValue() })
    .map((o) => JSON.stringify(o)),
  text,
  fc.uint8Array({ maxLength: 300 }),
  fc.constant(""),
  fc.nat(100_000).map((n) => `{"prompt":"${"x".repeat(n)}"}`),
);
const contentType = fc.option(
  fc.oneof(
    { weight: 6, arbitrary: fc.constant("application/json") },
    {
      weight: 3,
      arbitrary: fc.constantFrom(
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "application/json;;;",
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/x-www-form-urlencoded",
        "application/jsonx",
      ),
    },
    { weight: 1, arbitrary: headerText },
  ),
  { nil: undefined, freq: 8 },
);
const auth = fc.constantFrom(
  ...["valid", "valid", "valid", "valid", "valid", "valid"],
  ...["missing", "garbage", "bearer-garbage", "other-user"],
);
const signature = fc.constantFrom(
  ...["valid-for-body", "valid-for-body", "valid-for-body", "valid-for-body"],
  ...["missing", "garbage", "valid-other-url"],
);
const method = (allowed: string[]) =>
  fc.oneof(
    { weight: 12, arbitrary: fc.constantFrom(...allowed) },
    {
      weight: 2,
      arbitrary: fc.constantFrom("GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS", "get"),
    },
    { weight: 1, arbitrary: fc.stringMatching(/^[A-Z]{1,10}$/) },
  );
const query = fc.option(
  fc.dictionary(fc.constantFrom("limit", "cursor", "id", "x"), text, { maxKeys: 3 }),
  { nil: undefined },
);
const request = fc.record({
  route: fc.constantFrom(...ROUTES),
  idSuffix: fc.oneof(fc.uuid(), text, fc.constant("")),
  garbage: headerText,
  query,
  auth,
  signature,
  contentType,
  contentLength: fc.option(fc.oneof(fc.nat(), fc.constant(-1), headerText), {
    nil: undefined,
  }),
  idempotencyKey: fc.option(headerText, { nil: undefined }),
  body,
});

const requests = request.chain((r) => method(r.route.methods).map((m) => ({ ...r, method: m })));
type Fuzz = typeof requests extends fc.Arbitrary<infer T> ? T : never;

async function build(r: Fuzz, user: TestUser, other: TestUser): Promise<Request | null> {
  let path = r.route.path;
  try {
    if (r.route.route === "job") path += encodeURIComponent(r.idSuffix);
  } catch {
    return null; // a lone surrogate: no URL can carry it
  }
  if (r.query) path += `?${new URLSearchParams(r.query).toString()}`;
  const url = `https://app.test${path}`;
  const raw = typeof r.body === "string" ? r.body : Buffer.from(r.body).toString("latin1");
  const headers = new Headers();
  try {
    if (r.auth === "valid") headers.set("authorization", user.headers.authorization);
    if (r.auth === "other-user") headers.set("authorization", other.headers.authorization);
    if (r.auth === "garbage") headers.set("authorization", r.garbage);
    if (r.auth === "bearer-garbage") headers.set("authorization", `Bearer ${r.garbage}`);
    if (r.contentType !== undefined) headers.set("content-type", r.contentType);
    if (r.contentLength !== undefined) headers.set("content-length", String(r.contentLength));
    if (r.idempotencyKey !== undefined) headers.set("idempotency-key", r.idempotencyKey);
    if (r.signature === "garbage") headers.set("upstash-signature", r.garbage || "x.y.z");
    if (r.signature === "valid-for-body")
      headers.set("upstash-signature", await signAsQStash(url.split("?")[0] ?? url, raw));
    if (r.signature === "valid-other-url")
      headers.set("upstash-signature", await signAsQStash("https://app.test/api/other", raw));
  } catch {
    return null; // not a header value any HTTP client can send
  }
  const hasBody = !["GET", "HEAD"].includes(r.method.toUpperCase());
  try {
    return new Request(url, {
      method: r.method,
      headers,
      ...(hasBody ? { body: typeof r.body === "string" ? r.body : r.body } : {}),
    });
  } catch {
    return null; // a method or URL fetch itself refuses
  }
}

async function ledger(userId: string) {
  const { rows } = await app.admin.query<{ units: number; jobs: number }>(
    `select coalesce((select sum(units_used) from public.quota_usage where user_id = $1), 0)::int as units,
            (select count(*) from public.generation_jobs where user_id = $1)::int as jobs`,
    [userId],
  );
  return rows[0] ?? { units: 0, jobs: 0 };
}

describe("fuzzing every route", () => {
  test(
    `${RUNS} random requests: never a 5xx, always the error shape on a 4xx, nothing reserved by a refusal`,
    async () => {
      const user = await app.newUser("pro");
      const other = await app.newUser("free");
      const statuses: Record<number, number> = {};
      let sent = 0;
      const started = Date.now();
      await fc.assert(
        fc.asyncProperty(requests, async (r) => {
          const req = await build(r, user, other);
          if (!req) return;
          const before = await ledger(user.id);
          const res = await app.handlers[r.route.route](req);
          sent++;
          statuses[res.status] = (statuses[res.status] ?? 0) + 1;
          const text = await res.text();
          expect(res.status, text).toBeLessThan(500);
          if (res.status >= 400) {
            const parsed = JSON.parse(text) as { error: { code: unknown; message: unknown } };
            expect(typeof parsed.error.code).toBe("string");
            expect(typeof parsed.error.message).toBe("string");
          }
          const after = await ledger(user.id);
          if (res.status !== 202) {
            expect(after.jobs, "a refusal created no job").toBe(before.jobs);
            expect(after.units, "a refusal reserved nothing").toBeLessThanOrEqual(before.units);
          }
          if (after.jobs > before.jobs || after.units > before.units) {
            expect(res.status).toBe(202);
            expect(after.units - before.units).toBeLessThanOrEqual(1);
          }
          // Keep the user able to enqueue: cancel what a 202 started.
          if (res.status === 202) {
            const { job } = JSON.parse(text) as { job: { id: string } };
            await app.deps.jobs.cancel(job.id, user.id);
          }
        }),
        { numRuns: RUNS, ...(SEED ? { seed: Number(SEED) } : {}) },
      );
      const drift = await app.admin.query("select * from public.quota_drift");
      expect(drift.rows).toEqual([]);
      process.stderr.write(
        `[reliability] fuzz: ${sent} requests in ${Date.now() - started} ms, by status ${JSON.stringify(statuses)}\n`,
      );
      expect(sent).toBeGreaterThan(RUNS / 2);
    },
    Math.max(120_000, RUNS * 250),
  ); // ~7 ms a request alone, ~45 ms beside the nightly's schedules on a busy 2-core machine
});
