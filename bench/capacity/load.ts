/**
 * The load: the run's users and their tokens, then the arrivals sent as the page would send
 * them (POST /api/jobs), some jobs followed by the page's own poller (public/poll.js) until they
 * end, some canceled while queued or once they stream.
 */
import type pg from "pg";
import type { Stack } from "../../dev/stack.ts";
import { createPoller, paceOf } from "../../public/poll.js";
import { createUsers } from "../support/pg.ts";
import { quantile, round, sleep } from "../support/util.ts";
import { body, type Plan, type Planned } from "./plan.ts";

/** One more of `k` in the tally `m`. */
export const count = (m: Record<string, number>, k: string) => {
  m[k] = (m[k] ?? 0) + 1;
};

type Api = (token: string, path: string, init?: RequestInit) => Promise<Response>;

/** Picks the next user of a plan, in turn, with the token it calls the app with. */
export interface Users {
  userFor(p: Plan): string;
  tokens: Map<string, string>;
}

export async function createRunUsers(
  sql: pg.Pool,
  stack: Stack,
  planned: Planned[],
): Promise<Users> {
  // The run's users: one per free job (1 a day), pro and team users with a few jobs each,
  // spread so one user's jobs are minutes apart (plan limits and the rate limit are not the
  // point here; the refusals they cause are still counted).
  const byPlan = { free: 0, pro: 0, team: 0 };
  for (const j of planned) byPlan[j.plan]++;
  const users: Record<Plan, string[]> = {
    free: await createUsers(sql, Math.max(1, byPlan.free), "free"),
    pro: await createUsers(sql, Math.max(1, Math.ceil(byPlan.pro / 3)), "pro"),
    team: await createUsers(sql, Math.max(1, Math.ceil(byPlan.team / 3)), "team"),
  };
  const tokens = new Map<string, string>();
  for (const id of Object.values(users).flat())
    tokens.set(id, await stack.auth.mint({ userId: id, expiresInSeconds: 4 * 3600 }));
  const next = { free: 0, pro: 0, team: 0 };
  const userFor = (p: Plan) => users[p][next[p]++ % users[p].length] as string;
  return { userFor, tokens };
}

function apiOf(stack: Stack): Api {
  return (token: string, path: string, init: RequestInit = {}) =>
    fetch(`${stack.urls.app}${path}`, {
      ...init,
      headers: {
        authorization: `Bearer ${token}`,
        ...(init.body ? { "content-type": "application/json" } : {}),
      },
    });
}

async function cancel(
  api: Api,
  cancels: Record<string, number>,
  token: string,
  id: string,
  what: string,
) {
  const res = await api(token, `/api/jobs/${id}`, { method: "DELETE" });
  await res.arrayBuffer();
  count(cancels, `${what} ${res.status}`);
}

/** The page's poller on one job until it ends (and the cancel of one that streams, when planned). */
function follow(
  api: Api,
  cancels: Record<string, number>,
  token: string,
  id: string,
  j: Planned,
): Promise<void> {
  return new Promise<void>((resolve) => {
    let last = "";
    let seen: { phase: string; partialOutput?: string | null } | undefined;
    let canceled = false;
    const poller = createPoller({
      pace: () => paceOf(seen),
      tick: async () => {
        const res = await api(token, `/api/jobs/${id}`);
        if (res.status !== 200) {
          await res.arrayBuffer();
          return "same";
        }
        const job = ((await res.json()) as { job: Record<string, unknown> }).job;
        seen = job as typeof seen;
        if (["succeeded", "failed", "canceled"].includes(String(job.status))) {
          resolve();
          return "stop";
        }
        if (j.scenario === "cancel_running" && !canceled && job.partialOutput) {
          canceled = true;
          await cancel(api, cancels, token, id, "running");
        }
        const now = `${job.phase}|${String(job.partialOutput ?? "").length}`;
        const changed = now !== last;
        last = now;
        return changed ? "changed" : "same";
      },
    });
    poller.start();
  });
}

/** What the load saw from the app: its replies, their latency, the jobs accepted and when. */
export interface LoadResult {
  enqueueMs: number[];
  replies: Record<string, number>;
  sentAt: Map<string, number>;
  cancels: Record<string, number>;
  followed: number;
  loadSeconds: number;
}

/** Sends the planned arrivals on time, each on its own; resolves once every one has its answer. */
export async function sendLoad(
  stack: Stack,
  planned: Planned[],
  o: { seconds: number; rate: number },
  users: Users,
  say: (line: string) => void,
): Promise<LoadResult> {
  const { sql } = stack;
  const { userFor, tokens } = users;
  const api = apiOf(stack);
  const enqueueMs: number[] = [];
  const replies: Record<string, number> = {};
  const sentAt = new Map<string, number>();
  const cancels: Record<string, number> = {};
  const polls: Promise<void>[] = [];
  let followed = 0;
  const inflight = new Set<Promise<void>>();
  const started = performance.now();
  say(`  capacity: ${planned.length} enqueues over ${o.seconds} s at ${o.rate}/s`);
  let lastReport = started;
  for (const [i, j] of planned.entries()) {
    const wait = started + j.at - performance.now();
    if (wait > 0) await sleep(wait);
    const one = (async () => {
      try {
        const userId = userFor(j.plan);
        const token = tokens.get(userId) as string;
        if (j.inject429) stack.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 2 });
        const t0 = performance.now();
        const sent = Date.now();
        const res = await api(token, "/api/jobs", {
          method: "POST",
          body: JSON.stringify(body(j, i)),
        });
        const reply = (await res.json().catch(() => null)) as {
          job?: { id: string };
          error?: { code: string };
        } | null;
        enqueueMs.push(performance.now() - t0);
        count(replies, `${res.status}${reply?.error ? ` ${reply.error.code}` : ""}`);
        const id = reply?.job?.id;
        if (res.status !== 202 || !id) return;
        sentAt.set(id, sent);
        if (j.scenario === "cancel_queued") await cancel(api, cancels, token, id, "queued");
        if (j.follow) {
          followed++;
          polls.push(follow(api, cancels, token, id, j));
        }
      } catch (error) {
        // A request that never got an answer (the machine overloaded): counted, not fatal.
        count(
          replies,
          `no answer (${(error as Error).cause ? String((error as { cause: { code?: string } }).cause.code) : (error as Error).message})`,
        );
      }
    })();
    inflight.add(one);
    void one.finally(() => inflight.delete(one));
    if (performance.now() - lastReport > 30_000) {
      lastReport = performance.now();
      const { rows } = await sql.query<{ n: number }>(
        "select count(*)::int n from public.generation_jobs where status in ('queued', 'running')",
      );
      say(
        `  capacity: ${Math.round((performance.now() - started) / 1000)} s, ${i + 1} sent, ${rows[0]?.n} active, enqueue p50 ${round(quantile(enqueueMs, 0.5), 1)} ms`,
      );
    }
  }
  await Promise.all([...inflight]);
  const loadSeconds = round((performance.now() - started) / 1000, 1);
  return { enqueueMs, replies, sentAt, cancels, followed, loadSeconds };
}
