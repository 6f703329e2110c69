/** `POST /api/jobs` starts a job; `GET /api/jobs` lists the caller's jobs, newest first. */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { type EnqueueOutcome, enqueueJob } from "../../lib/enqueue.ts";
import { HttpError } from "../../lib/errors.ts";
import { handle, json, readJson } from "../../lib/http.ts";
import type { PlanKind, UsageRow } from "../../lib/jobs.ts";
import { declarationFor, loadKind } from "../../lib/kinds/index.ts";
import { aNoun, type KindDeclaration } from "../../lib/kinds/kind.ts";
import { annotate, traced, traceRequest } from "../../lib/trace.ts";
import {
  encodeCursor,
  MAX_BODY_BYTES,
  MAX_PROMPT_CHARS,
  parseIdempotencyKey,
  parseJobRequest,
  parseListQuery,
  parseOrganizationId,
} from "../../lib/validate.ts";
import { toJob, toUsage } from "../../lib/view.ts";

const secondsUntil = (t: Date, now: Date) =>
  String(Math.max(1, Math.ceil((t.getTime() - now.getTime()) / 1000)));

const plural = (n: number, one: string, many: string) =>
  `${n.toLocaleString("en-US")} ${n === 1 ? one : many}`;

/** What the plan offers, in the kinds' own words: "documents (1 unit), extractions (2 units)". */
async function offered(kinds: PlanKind[]): Promise<string> {
  if (kinds.length === 0) return "no kinds";
  const named = await Promise.all(
    kinds.map(async (k) => {
      const kind = await declarationFor(k.kind);
      return `${kind?.nouns ?? `${k.kind} jobs`} (${plural(k.units, "unit", "units")})`;
    }),
  );
  return named.join(", ");
}

/**
 * The 429's sentence: what this job needs and what is left. A token plan's in tokens; a job
 * plan's in units, with the kind's cost when it is more than 1 unit or than what is left.
 */
function quotaMessage(
  kind: KindDeclaration,
  hold: number,
  usage: UsageRow,
  resetsAt: Date,
): string {
  const left = Math.max(usage.limit - usage.used, 0);
  const resets = `It resets at ${resetsAt.toISOString()}.`;
  if (usage.meter === "money")
    return `This ${kind.noun} may cost up to ${usd(hold)} and ${usd(left)} of your ${usd(usage.limit)} are left this period. ${resets}`;
  if (usage.meter === "tokens")
    return `This ${kind.noun} needs up to ${hold} tokens and ${left} of your ${usage.limit} are left this period. ${resets}`;
  if (hold === 1 && left === 0)
    return `You have used all ${usage.limit} generation(s) of this period. ${resets}`;
  return `${aNoun(kind)} costs ${plural(hold, "unit", "units")}; ${left.toLocaleString("en-US")} of your ${usage.limit.toLocaleString("en-US")} ${left === 1 ? "is" : "are"} left this period. ${resets}`;
}

/** Micro-dollars as a person reads them: $0.0047. */
const usd = (micros: number) =>
  `$${(micros / 1_000_000).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`;

/** A reset as a person reads it: "1 Jan" (UTC). */
const day = (t: Date) =>
  t.toLocaleDateString("en-GB", { day: "numeric", month: "short", timeZone: "UTC" });

/** An amount of the plan's meter in words: "3 units", "2,048 tokens", "$0.0047". */
const amount = (usage: UsageRow, n: number) =>
  usage.meter === "money"
    ? usd(n)
    : usage.meter === "tokens"
      ? plural(n, "token", "tokens")
      : plural(n, "unit", "units");

/** The refusals of an organization's job (docs/DESIGN.md#organizations): 403 or 429. */
function organizationRefusal(
  r: Extract<EnqueueOutcome, { outcome: "not_a_member" | "pool_exhausted" | "member_cap_reached" }>,
  now: Date,
): HttpError {
  if (r.outcome === "not_a_member")
    return new HttpError(403, "not_a_member", "You are not a member of this organization.");
  const retry = { "retry-after": secondsUntil(r.resetsAt, now) };
  const usage = { usage: toUsage(r.usage) };
  if (r.outcome === "pool_exhausted")
    return new HttpError(
      429,
      "pool_exhausted",
      `Your team's pool is used up until ${day(r.resetsAt)}: this job needs ${amount(r.usage, r.hold)} and ${amount(r.usage, Math.max(r.usage.limit - r.usage.used, 0))} of ${amount(r.usage, r.usage.limit)} are left.`,
      retry,
      usage,
    );
  const cap = r.usage.member_cap ?? 0;
  return new HttpError(
    429,
    "member_cap_reached",
    `You have reached the cap your admin set (${amount(r.usage, cap)} a period; you have used ${amount(r.usage, r.usage.member_used ?? 0)} and this job needs ${amount(r.usage, r.hold)}) until ${day(r.resetsAt)}.`,
    retry,
    usage,
  );
}

export function createHandler(deps: () => Deps) {
  return handle({
    async POST(req) {
      const d = deps();
      return traceRequest(d.config, "POST /api/jobs", () => enqueue(d, req));
    },
    async GET(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      const query = parseListQuery(new URL(req.url));
      const r = await d.jobs.list(userId, query);
      const now = d.now();
      const last = r.jobs.at(-1);
      return json(200, {
        jobs: await Promise.all(r.jobs.map((j) => toJob(j, now))),
        nextCursor: r.has_more && last ? encodeCursor(last) : null,
      });
    },
  });
}

async function enqueue(d: Deps, req: Request): Promise<Response> {
  const { userId } = await traced("auth", {}, () => d.auth.userFromRequest(req));
  const idempotencyKey = parseIdempotencyKey(req);
  const body = await readJson(req, { maxBytes: MAX_BODY_BYTES });
  const request = await parseJobRequest(body);
  const organizationId = parseOrganizationId(body);
  const r = await enqueueJob(d, { userId, ...request, idempotencyKey, organizationId });
  annotate({ "job.outcome": r.outcome });
  const now = d.now();
  switch (r.outcome) {
    case "enqueued":
      return json(202, { job: await toJob(r.job, now), usage: toUsage(r.usage) });
    case "replayed":
      return json(200, { job: await toJob(r.job, now), usage: toUsage(r.usage) });
    case "rate_limited":
      throw new HttpError(
        429,
        "rate_limited",
        `Too many requests. Try again in ${r.retryAfterSeconds} s.`,
        {
          "retry-after": String(r.retryAfterSeconds),
        },
      );
    case "quota_exceeded":
      // A plan with no units at all is no plan (an anonymous sign-in without a plan for
      // anonymous users): waiting for the period to reset would not help.
      if (r.usage.limit === 0) {
        throw new HttpError(
          403,
          "no_plan",
          "This account has no plan that includes generations. Sign up with an email address to get one.",
          {},
          { usage: toUsage(r.usage) },
        );
      }
      throw new HttpError(
        429,
        "quota_exceeded",
        quotaMessage(await loadKind(request.kind), r.hold, r.usage, r.resetsAt),
        { "retry-after": secondsUntil(r.resetsAt, now) },
        { usage: toUsage(r.usage) },
      );
    case "not_a_member":
    case "pool_exhausted":
    case "member_cap_reached":
      throw organizationRefusal(r, now);
    case "too_many_active_jobs":
      throw new HttpError(
        409,
        "too_many_active_jobs",
        `Your plan runs ${r.usage.max_active} job(s) at a time. Wait for one to finish or cancel it.`,
        {},
        { usage: toUsage(r.usage) },
      );
    case "idempotency_key_reused":
      throw new HttpError(
        422,
        "idempotency_key_reused",
        "This Idempotency-Key was used with another prompt.",
      );
    case "invalid_prompt":
      throw new HttpError(
        400,
        "invalid_prompt",
        `The prompt must be 1 to ${MAX_PROMPT_CHARS.toLocaleString("en-US")} characters of text.`,
      );
    case "invalid_input":
      throw new HttpError(
        400,
        "invalid_input",
        "The input must be a JSON object.",
        {},
        {
          details: [{ path: "input", message: "Must be an object." }],
        },
      );
    case "unknown_kind":
      throw new HttpError(400, "unknown_kind", `There is no job kind "${request.kind}".`);
    case "kind_not_in_plan":
      throw new HttpError(
        403,
        "kind_not_in_plan",
        `Your plan does not offer ${(await loadKind(request.kind)).nouns}. It offers: ${await offered(r.kinds)}.`,
        {},
        { kinds: r.kinds },
      );
    case "invalid_idempotency_key":
      throw new HttpError(
        400,
        "invalid_idempotency_key",
        "Idempotency-Key must be 1 to 255 characters.",
      );
    case "user_not_found":
      // A valid signature for an account that no longer exists (deleted) or never did. 403,
      // not 401: the token is authentic and signing in again cannot help. Supabase Auth
      // answers the same token the same way (403 user_not_found).
      throw new HttpError(
        403,
        "user_not_found",
        "This account does not exist (it may have been deleted). Sign in with an existing account.",
      );
    case "model_retired":
      // Not the client's fault and not transient: the plan's model is past its shutdown date
      // until the operator moves the plan (docs/RUNBOOK.md#model_shutdown). No Retry-After.
      throw new HttpError(
        503,
        "model_retired",
        "The model this plan runs on has been retired by the provider; new jobs are refused until the plan moves to another model. Nothing was charged.",
      );
    case "unavailable":
      throw new HttpError(
        503,
        "unavailable",
        r.refunded
          ? "The queue is unavailable; nothing was charged. Please retry shortly."
          : "The queue is unavailable. Please retry shortly.",
        { "retry-after": "5" },
      );
  }
}

export default { fetch: createHandler(getDeps) };
