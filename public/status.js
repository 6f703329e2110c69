// @ts-check
/**
 * What the page says, as pure functions of the API's data: a job's phase, a refusal's code,
 * the usage line. Honest by construction: every sentence states a fact the API returned
 * (a phase, a time, a refund), never an estimate of progress.
 */
import { formatClock, formatCount, formatDuration, formatWait, formatWhen } from "./format.js";

/** @typedef {import("../lib/view.ts").Job} Job */
/** @typedef {import("../lib/view.ts").Usage} Usage */
/** @typedef {import("./format.js").Clock} Clock */

/** Phases in which a job can still change (and be canceled). */
export const ACTIVE_PHASES = ["queued", "waiting_for_provider", "waiting_for_capacity", "running"];

/** @param {Pick<Job, "phase">} job */
export const isActive = (job) => ACTIVE_PHASES.includes(job.phase);

/** Every failure reason in words: the type checker holds this to lib/jobs.ts's FAILURE_REASONS. */
/** @type {Record<import("../lib/jobs.ts").FailureReason, string>} */
export const REASONS = {
  model_refused: "the AI provider refused this prompt",
  delivery_failed: "it could not be delivered to a worker, even after retrying",
  publish_failed: "it could not be put in the queue",
  provider_quota_exhausted: "the AI provider stayed unavailable for too long",
  lease_expired: "the worker handling it stopped responding",
  max_age_exceeded: "it did not finish within the time limit",
  never_delivered: "no worker ever picked it up",
  attempt_budget_exhausted: "its retries used up what one job may cost",
  provider_misconfigured: "the service is misconfigured on our side, not because of your prompt",
  capacity_unavailable: "no cheaper capacity became free within its time limit",
  output_invalid: "the AI model's answer did not match the requested schema",
  output_truncated: "the AI model's answer was cut off at the length limit",
};

/**
 * Why a job failed, in words.
 * @param {string | null} reason
 */
export function failureSentence(reason) {
  return (
    (reason && REASONS[/** @type {keyof typeof REASONS} */ (reason)]) ||
    "something went wrong while generating it"
  );
}

/**
 * The one sentence a job card shows for its phase.
 * @param {Job} job
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function phaseSentence(job, now, clock = {}) {
  const cost = costSentence(job);
  const sentence = phaseOnly(job, now, clock);
  return cost ? `${sentence} ${cost}` : sentence;
}

/**
 * An amount of a token or money plan's meter: "4,400 tokens", or micro-dollars as "$0.0047".
 * @param {number} n
 * @param {string} meter
 */
export function formatAmount(n, meter) {
  if (meter !== "money") return `${formatCount(n)} tokens`;
  return `$${(n / 1_000_000).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`;
}

/**
 * What a job on a token or money plan costs, honestly: while active, the most it holds; once
 * final, what it kept ("This job holds up to 4,400 tokens." / "It used 497 tokens."), and why
 * when an ending kept the whole hold of a reasoning call. Empty on a job plan.
 * @param {Pick<Job, "meter" | "hold" | "captured" | "status"> & { reasons?: boolean }} job
 */
export function costSentence(job) {
  if (job.meter !== "tokens" && job.meter !== "money") return "";
  const amount = (/** @type {number} */ n) => formatAmount(n, job.meter);
  if (job.captured === null || job.captured === undefined)
    return `This job holds up to ${amount(job.hold)} of your quota.`;
  const released = job.hold - job.captured;
  if (released === 0 && job.reasons && job.status !== "succeeded")
    return `It used ${amount(job.captured)}, its whole hold: the model's hidden reasoning is billed by the provider and not reported when a call is cut short.`;
  const rest = job.meter === "money" ? amount(released) : formatCount(released);
  return released > 0
    ? `It used ${amount(job.captured)}; the other ${rest} it held went back.`
    : `It used ${amount(job.captured)}.`;
}

/**
 * The question before canceling a running reasoning call on a token or money plan: what the
 * provider billed for its hidden reasoning is not known, so the cancel keeps the whole hold.
 * @param {Pick<Job, "meter" | "hold">} job
 */
export function boundCancelWarning(job) {
  return `Canceling now stops the generation but keeps this job's whole hold (${formatAmount(job.hold, job.meter)}): the model may be reasoning, which the provider bills and does not report when a call is cut short.`;
}

/**
 * @param {Job} job
 * @param {Date} now
 * @param {Clock} clock
 */
function phaseOnly(job, now, clock) {
  switch (job.phase) {
    case "queued":
      return "Queued. It starts as soon as a worker is free.";
    case "waiting_for_provider":
      return job.resumeAt
        ? `Waiting for the AI provider, resumes around ${formatClock(job.resumeAt, clock)}. You can close this page.`
        : "Waiting for the AI provider. You can close this page.";
    case "waiting_for_capacity":
      // The economy plan's flex tier had no capacity: nothing was billed, and it tries again.
      return job.resumeAt
        ? `Waiting for cheaper capacity, tries again around ${formatClock(job.resumeAt, clock)}. You can close this page.`
        : "Waiting for cheaper capacity. You can close this page.";
    case "running": {
      const since = job.startedAt ? Date.parse(job.startedAt) : Date.parse(job.createdAt);
      const running = `running for ${formatDuration(now.getTime() - since)}`;
      // Reasoning streams no visible text: say so, with the provider's count when it gave one.
      if (job.thinking)
        return job.reasoningTokens
          ? `Thinking… ${formatCount(job.reasoningTokens)} reasoning tokens so far, ${running}.`
          : `Thinking…, ${running}.`;
      return `Generating now, ${running}.`;
    }
    case "succeeded":
      return job.finishedAt ? `Done ${formatWhen(job.finishedAt, now, clock)}.` : "Done.";
    case "failed":
      // A token plan's job says what it used instead (costSentence).
      return `Failed: ${failureSentence(job.failureReason)}.${job.quotaRefunded && job.meter !== "tokens" ? " Your generation was refunded." : ""}`;
    case "canceled":
      if (job.meter === "tokens") return "Canceled.";
      return job.quotaRefunded
        ? "Canceled. Your generation was refunded."
        : job.refundWithheld === "running_cancel_limit"
          ? "Canceled while generating. The unit stays used: your plan's refunded cancels for this period were used up."
          : "Canceled.";
    default:
      return `Status: ${job.status}.`;
  }
}

/**
 * The short word for a phase, used in a card's badge and in announcements.
 * @param {Job["phase"]} phase
 */
export function phaseLabel(phase) {
  return (
    {
      queued: "Queued",
      waiting_for_provider: "Waiting for the AI provider",
      waiting_for_capacity: "Waiting for cheaper capacity",
      running: "Generating",
      succeeded: "Done",
      failed: "Failed",
      canceled: "Canceled",
    }[phase] ?? phase
  );
}

/**
 * "today's", "this month's", "this period's": read from the quota period's length.
 * @param {Pick<Usage, "periodStart" | "resetsAt">} usage
 */
export function periodWord(usage) {
  const days = (Date.parse(usage.resetsAt) - Date.parse(usage.periodStart)) / 86_400_000;
  if (days <= 1.05) return "today's";
  if (days >= 27 && days <= 32) return "this month's";
  return "this period's";
}

/**
 * The question before canceling a job that will not be refunded (a running job past the plan's
 * refunds after provider spend): "Canceling now stops the generation; this unit will not be
 * refunded (you have used your 1 refunded cancel today)."
 * @param {Pick<Usage, "periodStart" | "resetsAt" | "runningCancelRefunds"> | null} usage
 */
export function cancelWarning(usage) {
  const start = "Canceling now stops the generation; this unit will not be refunded";
  const limit = usage?.runningCancelRefunds?.limit;
  if (!usage || limit === undefined) return `${start}.`;
  if (limit === 0)
    return `${start} (your plan refunds no generation canceled once it has started).`;
  const word = periodWord(usage);
  const when =
    word === "today's" ? "today" : word === "this month's" ? "this month" : "this period";
  const cancels = limit === 1 ? "refunded cancel" : "refunded cancels";
  return `${start} (you have used your ${limit} ${cancels} ${when}).`;
}

/**
 * "Free plan: 0 of 1 generation used. Resets tomorrow at 09:00."
 * @param {Usage} usage
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function usageSentence(usage, now, clock = {}) {
  const plan = usage.plan.charAt(0).toUpperCase() + usage.plan.slice(1);
  if (usage.meter === "tokens") {
    const held = usage.held ? ` (${formatCount(usage.held)} of them held by active jobs)` : "";
    return `${plan} plan: ${formatCount(usage.used)} tokens used of ${formatCount(usage.limit)}${held}. Resets ${formatWhen(usage.resetsAt, now, clock)}.`;
  }
  if (usage.meter === "money") {
    const held = usage.held
      ? ` (${formatAmount(usage.held, "money")} of it held by active jobs)`
      : "";
    return `${plan} plan: ${formatAmount(usage.used, "money")} used of ${formatAmount(usage.limit, "money")}${held}. Resets ${formatWhen(usage.resetsAt, now, clock)}.`;
  }
  const unit = usage.limit === 1 ? "generation" : "generations";
  return `${plan} plan: ${usage.used} of ${usage.limit} ${unit} used. Resets ${formatWhen(usage.resetsAt, now, clock)}.`;
}

/**
 * A refusal or failure as the page knows it: the API's error code and what came with it.
 * `code: "network"` means no answer arrived (the request may or may not have been processed).
 * @typedef {{
 *   code: string,
 *   message?: string,
 *   status?: number,
 *   retryAfterSeconds?: number | null,
 *   usage?: Usage | null,
 *   details?: { path: string, message: string }[],
 * }} Problem
 */

/**
 * The sentence a person reads for an API refusal. `now` and `clock` place times in the
 * user's day.
 * @param {Problem} problem
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function errorSentence(problem, now, clock = {}) {
  const wait = problem.retryAfterSeconds;
  const retryIn = wait ? ` Try again in ${formatWait(wait)}.` : " Try again in a moment.";
  switch (problem.code) {
    case "quota_exceeded": {
      const usage = problem.usage;
      const resetsAt =
        usage?.resetsAt ?? (wait ? new Date(now.getTime() + wait * 1000).toISOString() : null);
      const period = usage ? periodWord(usage) : "this period's";
      const when = resetsAt ? formatWhen(resetsAt, now, clock) : "when your quota resets";
      if (usage?.meter === "tokens")
        return `Not enough tokens left for this prompt: ${formatCount(Math.max(usage.limit - usage.used, 0))} of ${formatCount(usage.limit)} remain, and a job holds its prompt plus its longest answer. They come back ${when}.`;
      return usage && usage.limit !== 1
        ? `You have used all ${usage.limit} of ${period} generations. They come back ${when}.`
        : `You have used ${period} generation. It comes back ${when}.`;
    }
    case "too_many_active_jobs": {
      const max = problem.usage?.maxActive ?? 1;
      return max === 1
        ? "Your plan runs one job at a time. Wait for it to finish, or cancel it, then try again."
        : `Your plan runs ${max} jobs at a time. Wait for one to finish, or cancel one, then try again.`;
    }
    case "rate_limited":
      return `You are sending requests too quickly.${retryIn}`;
    case "unavailable":
      return `The service is busy right now, and nothing was charged.${retryIn}`;
    case "invalid_prompt":
      return `This prompt cannot be sent. ${problem.message ?? "Write 1 to 8,000 characters of text."}`;
    case "payload_too_large":
      return "This prompt is too long. Keep it under 8,000 characters.";
    case "unauthorized":
      return "Your session has ended. Please sign in again.";
    case "idempotency_key_reused":
      return "This prompt changed while it was being sent. Press Generate again.";
    case "not_found":
      return "This job no longer exists.";
    case "already_finished":
      return "This job had already finished, so there was nothing to cancel.";
    case "pool_exhausted": {
      const usage = problem.usage;
      const used = usage ? `: ${ofLimit(usage)} used` : "";
      return `Your team's pool is used up until ${until(usage, wait, now, clock)}${used}. You can still use your own plan.`;
    }
    case "member_cap_reached": {
      const usage = problem.usage;
      const cap =
        usage?.memberCap != null
          ? ` (${amountOf(usage, usage.memberCap)} a period; you have used ${amountOf(usage, usage.memberUsed ?? 0)})`
          : "";
      return `You have reached the cap your admin set${cap}. It resets ${usage ? formatWhen(usage.resetsAt, now, clock) : "when the period ends"}.`;
    }
    case "not_a_member":
      return "You are not a member of this team any more. Choose your own plan or another team.";
    case "forbidden":
      return "Only the team's owners and admins can do that.";
    case "invitation_used":
      return "This invitation has already been used: an invitation joins one person, once.";
    case "invitation_expired":
      return "This invitation has expired. Ask the team's admin for a new one.";
    case "invitation_not_found":
      return "This invitation does not exist: it may have been withdrawn. Ask the team's admin for a new one.";
    case "wrong_recipient":
      return "This invitation was sent to another address. Sign in with the address it was sent to, then open the link again.";
    case "already_member":
      return "That address is already a member of this team.";
    case "invalid_invitation":
    case "invalid_cap":
      return problem.message ?? "Check the address, the role and the cap, then try again.";
    case "no_such_member":
      return "That person is not a member of this team any more.";
    case "last_owner":
      return "A team keeps at least one owner: the last owner cannot leave or be removed.";
    case "mail_rate_limited":
      return `Too many invitation mails were sent just now, so this one was not sent and no invitation was made.${retryIn}`;
    case "mail_failed":
      return "The invitation mail could not be sent, so no invitation was made. Try again in a moment.";
    case "network":
      return "Could not reach the service. Check your connection and try again: retrying will not charge you twice.";
    default:
      return "Something went wrong on our side. Please try again in a moment.";
  }
}

/**
 * An amount of a usage's meter: "3 generations", "4,400 tokens", "$0.25".
 * @param {Pick<Usage, "meter">} usage
 * @param {number} n
 */
export function amountOf(usage, n) {
  if (usage.meter === "tokens" || usage.meter === "money") return formatAmount(n, usage.meter);
  return n === 1 ? "1 generation" : `${formatCount(n)} generations`;
}

/**
 * "3 of 10 generations", "2,000 of 5,000 tokens", "$0.25 of $1.00".
 * @param {Pick<Usage, "meter" | "used" | "limit">} usage
 */
const ofLimit = (usage) =>
  usage.meter === "money"
    ? `${amountOf(usage, usage.used)} of ${amountOf(usage, usage.limit)}`
    : `${formatCount(usage.used)} of ${amountOf(usage, usage.limit)}`;

/**
 * "tomorrow at 09:00", "1 Jan at 09:00", "09:00": when a usage's period ends, to follow "until".
 * @param {Usage | null | undefined} usage
 * @param {number | null | undefined} wait  the Retry-After, when no usage came
 * @param {Date} now
 * @param {Clock} clock
 */
function until(usage, wait, now, clock) {
  const at = usage?.resetsAt ?? (wait ? new Date(now.getTime() + wait * 1000) : null);
  if (!at) return "the period ends";
  return formatWhen(at, now, clock).replace(/^(on|at) /, "");
}

/**
 * An organization's usage line, as a member reads it: "Acme's pool: 3 of 10 generations used.
 * Your cap: 2 generations (1 used). Resets tomorrow at 09:00."
 * @param {Usage} usage  an organization's (its `used` and `limit` are the pool's)
 * @param {string} name
 * @param {Date} now
 * @param {Clock} [clock]
 */
export function poolSentence(usage, name, now, clock = {}) {
  const used = `${ofLimit(usage)} used`;
  const cap =
    usage.memberCap == null
      ? ""
      : ` Your cap: ${amountOf(usage, usage.memberCap)} (${amountOf(usage, usage.memberUsed ?? 0)} used).`;
  return `${name}'s pool: ${used}.${cap} Resets ${formatWhen(usage.resetsAt, now, clock)}.`;
}
