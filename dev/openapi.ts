/**
 * `npm run openapi`: writes public/openapi.json (served at /openapi.json), the OpenAPI 3.1
 * document of the HTTP API a client calls. Request bodies come from what the handlers check
 * them with: the legacy body's zod schema (lib/validate.ts) and each kind's declared fields
 * (lib/kinds). Responses are written here after lib/view.ts's types, closed
 * (`additionalProperties: false`) so that test/e2e/client.test.ts's contract test fails on a
 * field renamed or added without the document. test/unit/openapi.test.ts fails when the
 * committed file is not what this writes.
 *
 * Left out on purpose: the internal routes (/api/worker, /api/dlq, /api/cron/*, /api/ops/*),
 * called by QStash, Vercel Cron or an operator with secrets no client holds.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import * as z from "zod";
import { FAILURE_REASONS } from "../lib/jobs.ts";
import { declarations } from "../lib/kinds/index.ts";
import type { KindDeclaration, KindField } from "../lib/kinds/kind.ts";
import { MAX_BODY_BYTES, promptBody } from "../lib/validate.ts";
import { API_ERROR_CODES } from "../public/client.js";

export const OPENAPI_FILE = "public/openapi.json";

type Schema = Record<string, unknown>;

const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });
const nullable = (schema: Schema): Schema => ({ anyOf: [schema, { type: "null" }] });
const time: Schema = { type: "string", format: "date-time" };
/** A closed object: every property listed is required unless named in `optional`. */
function closed(properties: Record<string, Schema>, optional: string[] = []): Schema {
  return {
    type: "object",
    properties,
    required: Object.keys(properties).filter((k) => !optional.includes(k)),
    additionalProperties: false,
  };
}

const job = closed({
  id: { type: "string", format: "uuid" },
  kind: { type: "string" },
  prompt: { type: "string" },
  input: { type: "object" },
  status: { enum: ["queued", "running", "succeeded", "failed", "canceled"] },
  phase: {
    enum: [
      "queued",
      "waiting_for_provider",
      "waiting_for_capacity",
      "running",
      "succeeded",
      "failed",
      "canceled",
    ],
  },
  createdAt: time,
  startedAt: nullable(time),
  finishedAt: nullable(time),
  attempts: { type: "integer", minimum: 0 },
  providerQuotaHits: { type: "integer", minimum: 0 },
  resumeAt: nullable(time),
  failureReason: nullable({ enum: [...FAILURE_REASONS] }),
  quotaRefunded: { type: "boolean" },
  refundWithheld: nullable({ enum: ["running_cancel_limit", "paid_refund_limit"] }),
  cancelRefunds: { type: "boolean" },
  cancelCharges: nullable({ enum: ["nothing", "consumed", "bound"] }),
  model: nullable({ type: "string" }),
  reasons: { type: "boolean" },
  output: { description: "The text, or a JSON kind's value; null until it succeeded." },
  partialOutput: nullable({ type: "string" }),
  partialTokens: { type: "integer", minimum: 0 },
  thinking: { type: "boolean" },
  reasoningTokens: nullable({ type: "integer", minimum: 0 }),
  meter: ref("Meter"),
  hold: { type: "integer", minimum: 0 },
  captured: nullable({ type: "integer", minimum: 0 }),
});

const field: Schema = {
  type: "object",
  required: ["name", "label", "type"],
  properties: {
    name: { type: "string" },
    label: { type: "string" },
    type: { enum: ["text", "json", "integer"] },
    maxChars: { type: "integer" },
    maxBytes: { type: "integer" },
    min: { type: "integer" },
    max: { type: "integer" },
    default: { type: "integer" },
    help: { type: "string" },
  },
  additionalProperties: false,
};

const usage = closed(
  {
    plan: { type: "string" },
    meter: ref("Meter"),
    held: { type: "integer", minimum: 0 },
    used: { type: "integer", minimum: 0 },
    limit: { type: "integer", minimum: 0 },
    periodStart: time,
    resetsAt: time,
    active: { type: "integer", minimum: 0 },
    maxActive: { type: "integer", minimum: 0 },
    runningCancelRefunds: closed({ used: { type: "integer" }, limit: { type: "integer" } }),
    kinds: { type: "array", items: ref("PlanKind") },
    catalog: {
      type: "array",
      items: closed(
        {
          id: { type: "string" },
          label: { type: "string" },
          noun: { type: "string" },
          nouns: { type: "string" },
          action: { type: "string" },
          fields: { type: "array", items: field },
          examples: {
            type: "array",
            items: closed({ name: { type: "string" }, input: { type: "object" } }),
          },
          output: { enum: ["text", "json"] },
        },
        ["examples"],
      ),
    },
    organizationId: { type: "string", format: "uuid" },
    memberUsed: { type: "integer", minimum: 0 },
    memberCap: nullable({ type: "integer", minimum: 0 }),
  },
  ["held", "runningCancelRefunds", "catalog", "organizationId", "memberUsed", "memberCap"],
);

/** `{error: {code, message}}` and what a refusal sends beside it. */
const problem = closed(
  {
    error: closed({
      code: { enum: API_ERROR_CODES.filter((c) => c !== "network") },
      message: { type: "string" },
    }),
    usage: ref("Usage"),
    job: ref("Job"),
    kinds: { type: "array", items: ref("PlanKind") },
    details: {
      type: "array",
      items: closed({ path: { type: "string" }, message: { type: "string" } }),
    },
  },
  ["usage", "job", "kinds", "details"],
);

/** A kind's `input` as its declared fields say (the kind's `parse` is the whole check). */
/** The optional organization whose pool holds the job (docs/DESIGN.md#organizations). */
const organizationId: Schema = {
  ...nullable({ type: "string", format: "uuid" }),
  description:
    "An organization the caller belongs to: the job holds on its pool, under the member's cap. Absent or null: the caller's own plan.",
};

function kindInput(kind: KindDeclaration): Schema {
  const property = (f: KindField): Schema => {
    const described = f.help ? { description: `${f.label}. ${f.help}` } : { description: f.label };
    if (f.type === "text")
      return { type: "string", minLength: 1, maxLength: f.maxChars, ...described };
    if (f.type === "integer")
      return { type: "integer", minimum: f.min, maximum: f.max, default: f.default, ...described };
    return { type: "object", ...described };
  };
  return {
    type: "object",
    title: kind.label,
    properties: {
      kind: { const: kind.id },
      organization_id: organizationId,
      input: {
        type: "object",
        properties: Object.fromEntries(kind.fields.map((f) => [f.name, property(f)])),
        required: kind.fields.filter((f) => f.type !== "integer").map((f) => f.name),
        additionalProperties: false,
      },
    },
    required: ["kind", "input"],
  };
}

const jsonBody = (schema: Schema) => ({ content: { "application/json": { schema } } });
const reply = (description: string, schema: Schema) => ({ description, ...jsonBody(schema) });
const refused = (description: string) => reply(description, ref("Problem"));
const unauthorized = refused("No valid access token (`unauthorized`).");
const bearer = [{ bearer: [] }];
const jobId = {
  name: "id",
  in: "path",
  required: true,
  schema: { type: "string", format: "uuid" },
};

function paths(kinds: KindDeclaration[]): Schema {
  const { $schema: _, ...legacy } = z.toJSONSchema(promptBody, { io: "input" });
  const enqueueBody = {
    required: true,
    ...jsonBody({
      oneOf: [
        ...kinds.map(kindInput),
        {
          ...legacy,
          properties: { ...(legacy.properties as Schema), organization_id: organizationId },
          title: "A document (legacy body)",
        },
      ],
    }),
  };
  const jobReply = closed({ job: ref("Job"), usage: ref("Usage") });
  return {
    "/api/jobs": {
      get: {
        operationId: "listJobs",
        summary: "The caller's jobs, newest first",
        security: bearer,
        parameters: [
          {
            name: "limit",
            in: "query",
            schema: { type: "integer", minimum: 1, maximum: 100, default: 20 },
          },
          { name: "cursor", in: "query", schema: { type: "string" } },
        ],
        responses: {
          "200": reply(
            "A page of jobs; `nextCursor` asks for the next (null: none).",
            closed({
              jobs: { type: "array", items: ref("Job") },
              nextCursor: nullable({ type: "string" }),
            }),
          ),
          "400": refused("A limit or cursor this API does not accept (`invalid_query`)."),
          "401": unauthorized,
        },
      },
      post: {
        operationId: "enqueueJob",
        summary: "Start a job (held against the plan's quota until it ends)",
        security: bearer,
        parameters: [
          {
            name: "idempotency-key",
            in: "header",
            schema: { type: "string", minLength: 1, maxLength: 255, pattern: "^[\\x21-\\x7e]+$" },
          },
        ],
        requestBody: enqueueBody,
        responses: {
          "202": reply("The job, queued.", jobReply),
          "200": reply("The job this Idempotency-Key already made (nothing held again).", jobReply),
          "400": refused("A body, input or key refused: see `error.code` and `details`."),
          "401": unauthorized,
          "403": refused(
            "No plan, a kind the plan does not offer, no such account, or not a member of the organization (`not_a_member`).",
          ),
          "409": refused("Too many active jobs (`too_many_active_jobs`)."),
          "413": refused(`A body over ${MAX_BODY_BYTES} bytes (\`payload_too_large\`).`),
          "415": refused("Not `application/json` (`unsupported_media_type`)."),
          "422": refused("The Idempotency-Key was used with another body."),
          "429": refused(
            "Quota used up, the organization's pool used up (`pool_exhausted`), the member's cap reached (`member_cap_reached`), or too many requests; Retry-After says when.",
          ),
          "503": refused("A dependency is unavailable, or the plan's model retired; nothing held."),
        },
      },
    },
    "/api/jobs/{id}": {
      parameters: [jobId],
      get: {
        operationId: "getJob",
        summary: "One of the caller's jobs",
        security: bearer,
        responses: {
          "200": reply("The job.", closed({ job: ref("Job") })),
          "401": unauthorized,
          "404": refused("No such job of the caller's (`not_found`)."),
        },
      },
      delete: {
        operationId: "cancelJob",
        summary:
          "Cancel a job (a refund for a queued one, and a running one within the plan's bound)",
        security: bearer,
        responses: {
          "200": reply(
            "Canceled.",
            closed({ job: ref("Job"), quotaRefunded: { type: "boolean" } }),
          ),
          "401": unauthorized,
          "404": refused("No such job of the caller's (`not_found`)."),
          "409": refused("The job already ended (`already_finished`, with the job)."),
        },
      },
    },
    "/api/usage": {
      get: {
        operationId: "getUsage",
        summary: "The caller's plan, what this period used, and the kinds",
        security: bearer,
        responses: { "200": reply("The usage.", ref("Usage")), "401": unauthorized },
      },
    },
    "/api/me": {
      delete: {
        operationId: "deleteMe",
        summary: "Erase the caller: their jobs (active ones canceled) and their account",
        security: bearer,
        responses: {
          "200": reply(
            "Erased.",
            closed({
              deleted: { const: true },
              jobs: { type: "integer", minimum: 0 },
              canceledJobs: { type: "integer", minimum: 0 },
              accountDeleted: { type: "boolean" },
            }),
          ),
          "401": unauthorized,
        },
      },
    },
    "/api/me/export": {
      get: {
        operationId: "exportMe",
        summary: "Everything stored about the caller, as the database stores it (snake case)",
        security: bearer,
        responses: {
          "200": reply(
            "The export (an attachment).",
            closed({
              exported_at: time,
              user_id: { type: "string", format: "uuid" },
              plan: nullable({
                type: "object",
                description: "The user_plans row; null: the default plan.",
              }),
              usage: { type: "array", items: { type: "object" } },
              log_pseudonym: nullable({ type: "string" }),
              jobs: { type: "array", items: { type: "object" } },
            }),
          ),
          "401": unauthorized,
          "429": refused("Too many exports this hour (`rate_limited`); Retry-After says when."),
        },
      },
    },
    "/api/health": {
      get: {
        operationId: "getHealth",
        summary: "Whether the service can take jobs (the cron secret also gets each dependency)",
        responses: {
          "200": reply("Up.", closed({ status: { const: "ok" } })),
          "503": reply("A dependency is down.", closed({ status: { const: "degraded" } })),
        },
      },
    },
    "/api/public-config": {
      get: {
        operationId: "getPublicConfig",
        summary: "What the page needs to sign in: Supabase's URL and publishable key",
        responses: {
          "200": reply(
            "The public configuration.",
            closed({
              supabaseUrl: { type: "string", format: "uri" },
              supabasePublishableKey: nullable({ type: "string" }),
            }),
          ),
        },
      },
    },
  };
}

/** The document, as `npm run openapi` writes it. */
export async function renderOpenApi(): Promise<string> {
  const doc = {
    openapi: "3.1.0",
    info: {
      title: "quota-jobs",
      version: "1",
      description:
        "Quota-safe asynchronous LLM jobs (docs/DESIGN.md#http-api). Written by `npm run openapi`; the internal routes (worker, dlq, cron, ops) are not part of it.",
    },
    paths: paths(await declarations()),
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer", bearerFormat: "JWT" } },
      schemas: {
        Job: job,
        Usage: usage,
        Problem: problem,
        Meter: { enum: ["jobs", "tokens", "money"] },
        PlanKind: closed({ kind: { type: "string" }, units: { type: "integer", minimum: 0 } }),
      },
    },
  };
  return `${JSON.stringify(doc, null, 2)}\n`;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(OPENAPI_FILE, await renderOpenApi());
  console.log(`wrote ${OPENAPI_FILE}`);
}
