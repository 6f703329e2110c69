/**
 * Each transition that changes a job's status broadcasts {job_id, state, seq} on the private
 * Realtime topic job:<user id> (supabase/migrations/20261209000000_job_state_broadcast.sql), in
 * the transition's own transaction: what realtime.messages holds after the call is what Realtime
 * delivers, and a transition rolled back leaves nothing. Then the whole path through the local
 * Realtime stand-in and supabase-js: the owner hears the states, another user may not join.
 * The broadcast is a plain insert when it cannot fail (today's partition, no row level security
 * in the way: supabase/migrations/20261210000000_broadcast_without_subtransaction.sql), else
 * realtime.send, which warns: a broadcast that cannot be made never fails the transition.
 */
import {
  createClient,
  REALTIME_SUBSCRIBE_STATES,
  type SupabaseClient,
} from "@supabase/supabase-js";
import { afterAll, describe, expect, test } from "vitest";
import { createAuthStandIn, makeProject } from "../../dev/auth/index.ts";
import { type RunningPostgrest, startPostgrest } from "../../dev/postgrest/index.ts";
import { type RealtimeStandIn, startRealtime } from "../../dev/realtime/index.ts";
import { maintainMessagePartitions } from "../../dev/realtime/partitions.ts";
import { databaseUrl, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";
import { freePort } from "../support/ports.ts";

// A database of its own: a test below drops today's partition of realtime.messages.
const db = dbFixture({ fresh: true });
const { admin, svc } = db;

/** The broadcasts on a user's topic, oldest first. */
async function broadcasts(user: string) {
  const { rows } = await admin.query(
    `select event, private, payload - 'id' as payload, payload ->> 'id' as id, id::text as message_id
       from realtime.messages
      where topic = $1 and extension = 'broadcast' order by (payload ->> 'seq')::bigint`,
    [`job:${user}`],
  );
  return rows;
}

describe("a transition broadcasts the job's new state", () => {
  test("enqueue, start and complete each send {job_id, state, seq}, seq growing", async () => {
    const user = await db.user();
    const job = await db.enqueued(user);
    await db.started(job.id);
    const done = await rpc(svc, "complete_job", {
      p_job_id: job.id,
      p_attempt: 1,
      p_output: "ok",
    });
    expect(done.outcome).toBe("completed");
    const sent = await broadcasts(user);
    expect(sent.map((b) => [b.event, b.private, b.payload.job_id, b.payload.state])).toEqual([
      ["job_state", true, job.id, "queued"],
      ["job_state", true, job.id, "running"],
      ["job_state", true, job.id, "succeeded"],
    ]);
    expect(sent.map((b) => b.id)).toEqual(sent.map((b) => b.message_id));
    const seqs = sent.map((b) => Number(b.payload.seq));
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    const { rows } = await admin.query(
      "select array_agg(id order by id) as ids from public.job_events where job_id = $1 and from_status is distinct from to_status",
      [job.id],
    );
    expect(seqs).toEqual(rows[0].ids.map(Number));
  });

  test("a transition rolled back broadcasts nothing", async () => {
    const user = await db.user();
    const c = await svc.connect();
    try {
      await c.query("begin");
      const r = await rpc(c, "enqueue_job", { p_user_id: user, p_prompt: "rolled back" });
      expect(r.outcome).toBe("enqueued");
      await c.query("rollback");
    } finally {
      c.release();
    }
    expect(await broadcasts(user)).toEqual([]);
  });
});

describe("a broadcast that cannot be made warns and the transition commits", () => {
  /** enqueue_job on a connection of its own, committed, with the warnings it raised. */
  async function enqueueWarned(user: string) {
    const c = await admin.connect();
    const warnings: string[] = [];
    const onNotice = (n: { message?: string }) => warnings.push(n.message ?? "");
    c.on("notice", onNotice);
    try {
      await c.query("begin");
      await c.query("set local role service_role");
      const r = await rpc(c, "enqueue_job", { p_user_id: user, p_prompt: "warned" });
      await c.query("commit");
      return { outcome: r.outcome, warnings };
    } finally {
      c.off("notice", onNotice);
      c.release();
    }
  }

  test("as the service role, with today's partition: a plain insert, no warning", async () => {
    const user = await db.user();
    const r = await enqueueWarned(user);
    expect(r).toEqual({ outcome: "enqueued", warnings: [] });
    expect((await broadcasts(user)).map((b) => b.payload.state)).toEqual(["queued"]);
  });

  test("without today's partition: realtime.send's warning, the job enqueued", async () => {
    const user = await db.user();
    const { rows } = await admin.query(
      "select 'messages_' || to_char(now() at time zone 'UTC', 'YYYY_MM_DD') as name",
    );
    await admin.query(`drop table realtime.${rows[0].name}`);
    try {
      const r = await enqueueWarned(user);
      expect(r.outcome).toBe("enqueued");
      expect(r.warnings).toEqual([
        expect.stringMatching(/^WarnSendingBroadcastMessage: no partition of relation/),
      ]);
    } finally {
      await maintainMessagePartitions(admin);
    }
    expect(await broadcasts(user)).toEqual([]);
    const { rows: jobs } = await admin.query(
      "select status from public.generation_jobs where user_id = $1",
      [user],
    );
    expect(jobs).toEqual([{ status: "queued" }]);
  });

  test("without the insert privilege: realtime.send's warning, the job enqueued", async () => {
    // A caller row level security applies to takes the same way (realtime.send, refused by the
    // missing insert policy), but could not run a transition at all: the plans and kinds it
    // reads are behind row level security too. The service role bypasses it.
    const user = await db.user();
    await admin.query("revoke insert on realtime.messages from service_role");
    try {
      const r = await enqueueWarned(user);
      expect(r.outcome).toBe("enqueued");
      expect(r.warnings).toEqual([
        expect.stringMatching(/^WarnSendingBroadcastMessage: permission denied for table messages/),
      ]);
    } finally {
      await admin.query("grant insert on realtime.messages to service_role");
    }
    expect(await broadcasts(user)).toEqual([]);
  });
});

describe("through the Realtime stand-in and supabase-js", () => {
  let realtime: RealtimeStandIn | undefined;
  let rest: RunningPostgrest | undefined;
  const clients: SupabaseClient[] = [];
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.removeAllChannels()));
    await rest?.close();
    await realtime?.close();
  });

  test("the owner hears queued then running on job:<id>; another user is refused", async () => {
    const port = await freePort();
    const project = await makeProject({ shape: "new", issuer: `http://127.0.0.1:${port}/auth/v1` });
    const auth = createAuthStandIn(project);
    const keys = {
      jwtSecret: project.jwtSecret,
      serviceRoleKey: project.secretKey,
      anonKey: project.publishableKey,
    };
    realtime = await startRealtime({ databaseUrl: databaseUrl(), jwks: auth.jwks(), ...keys });
    rest = await startPostgrest({ port, databaseUrl: databaseUrl(), auth, realtime, ...keys });
    const [owner, other] = [await db.user(), await db.user()];
    const watch = async (userId: string, topic: string) => {
      const token = await auth.mint({ userId });
      const c = createClient(rest?.url ?? "", project.publishableKey, {
        accessToken: async () => token,
      });
      clients.push(c);
      await c.realtime.setAuth();
      const heard: Record<string, unknown>[] = [];
      const channel = c.channel(topic, { config: { private: true } });
      channel.on("broadcast", { event: "job_state" }, (m) => heard.push(m.payload));
      const status = await new Promise<[string, string | undefined]>((resolve) =>
        channel.subscribe((s, e) => resolve([s, e?.message])),
      );
      return { status, heard };
    };
    const mine = await watch(owner, `job:${owner}`);
    expect(mine.status).toEqual([REALTIME_SUBSCRIBE_STATES.SUBSCRIBED, undefined]);
    const theirs = await watch(other, `job:${owner}`);
    expect(theirs.status).toEqual([
      REALTIME_SUBSCRIBE_STATES.CHANNEL_ERROR,
      `Unauthorized: You do not have permissions to read from this Channel topic: job:${owner}`,
    ]);
    const job = await db.enqueued(owner);
    await db.started(job.id);
    const end = Date.now() + 10_000;
    while (mine.heard.length < 2 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    expect(mine.heard.map((p) => [p.job_id, p.state])).toEqual([
      [job.id, "queued"],
      [job.id, "running"],
    ]);
  });
});
