/**
 * The Realtime stand-in (dev/realtime/) through the real supabase-js client, on the project's
 * origin beside the PostgREST stand-in, over a database of its own with RLS policies on
 * `realtime.messages` written as a real project writes them: a signed-in user reads and writes
 * the topic `rt-test:<their id>`.
 */
import { randomUUID } from "node:crypto";
import {
  createClient,
  REALTIME_SUBSCRIBE_STATES,
  type RealtimeChannel,
  type SupabaseClient,
} from "@supabase/supabase-js";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import WebSocket from "ws";
import { createAuthStandIn, makeProject, type ProjectFile } from "../../dev/auth/index.ts";
import { applyRealtimeSchema } from "../../dev/postgres/migrate.ts";
import { type RunningPostgrest, startPostgrest } from "../../dev/postgrest/index.ts";
import { type RealtimeStandIn, startRealtime } from "../../dev/realtime/index.ts";
import { maintainMessagePartitions } from "../../dev/realtime/partitions.ts";
import { adminPool, databaseUrl, useFreshDatabase } from "../support/db.ts";
import { freePort } from "../support/ports.ts";

useFreshDatabase();
const admin = adminPool();

let project: ProjectFile;
let realtime: RealtimeStandIn;
let rest: RunningPostgrest;
const clients: SupabaseClient[] = [];

beforeAll(async () => {
  await admin.query(`
    create policy "rt test: a user reads their own topic" on realtime.messages
      for select to authenticated
      using (realtime.topic() = 'rt-test:' || (select auth.uid())::text and extension = 'broadcast');
    create policy "rt test: a user broadcasts to their own topic" on realtime.messages
      for insert to authenticated
      with check (realtime.topic() = 'rt-test:' || (select auth.uid())::text and extension = 'broadcast')`);
  const port = await freePort();
  project = await makeProject({ shape: "new", issuer: `http://127.0.0.1:${port}/auth/v1` });
  const auth = createAuthStandIn(project);
  realtime = await startRealtime({
    databaseUrl: databaseUrl(),
    jwtSecret: project.jwtSecret,
    serviceRoleKey: project.secretKey,
    anonKey: project.publishableKey,
    jwks: auth.jwks(),
  });
  rest = await startPostgrest({
    port,
    databaseUrl: databaseUrl(),
    jwtSecret: project.jwtSecret,
    serviceRoleKey: project.secretKey,
    anonKey: project.publishableKey,
    auth,
    realtime,
  });
});

afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.removeAllChannels()));
});

afterAll(async () => {
  await rest?.close();
  await realtime?.close();
});

const mint = (userId: string, expiresInSeconds?: number) =>
  createAuthStandIn(project).mint({ userId, ...(expiresInSeconds ? { expiresInSeconds } : {}) });

/** A browser's client: the publishable key, and the signed-in user's token when there is one. */
function client(token?: { current: string }, options: { vsn?: string } = {}): SupabaseClient {
  const c = createClient(rest.url, project.publishableKey, {
    auth: { persistSession: false, autoRefreshToken: false },
    ...(token ? { accessToken: async () => token.current } : {}),
    realtime: { ...(options.vsn ? { vsn: options.vsn } : {}) },
  });
  clients.push(c);
  return c;
}

interface Heard {
  event: string;
  payload: Record<string, unknown>;
  meta?: { id?: string };
}

/**
 * Subscribes, the token set first (as Supabase's guide for private channels says: `await
 * supabase.realtime.setAuth()` before `subscribe`, else the join goes out with the API key's
 * role); resolves with the first status, and collects what the channel hears.
 */
async function join(
  c: SupabaseClient,
  topic: string,
  config: { private?: boolean; self?: boolean; ack?: boolean } = { private: true },
): Promise<{
  channel: RealtimeChannel;
  status: REALTIME_SUBSCRIBE_STATES;
  error?: Error;
  heard: Heard[];
  system: Record<string, unknown>[];
  statuses: REALTIME_SUBSCRIBE_STATES[];
}> {
  const heard: Heard[] = [];
  const system: Record<string, unknown>[] = [];
  const statuses: REALTIME_SUBSCRIBE_STATES[] = [];
  await c.realtime.setAuth();
  const channel = c.channel(topic, {
    config: {
      private: config.private ?? false,
      broadcast: { self: config.self ?? false, ack: config.ack ?? false },
    },
  });
  channel.on("broadcast", { event: "*" }, (m) => heard.push(m as unknown as Heard));
  channel.on("system", {}, (m) => system.push(m));
  return new Promise((resolve) => {
    channel.subscribe((status, error) => {
      statuses.push(status);
      if (statuses.length === 1)
        resolve({ channel, status, ...(error ? { error } : {}), heard, system, statuses });
    });
  });
}

async function until(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** `realtime.send` in a transaction of its own, committed or rolled back. */
async function sendFromDatabase(
  topic: string,
  event: string,
  payload: Record<string, unknown>,
  end: "commit" | "rollback" = "commit",
): Promise<void> {
  const c = await admin.connect();
  try {
    await c.query("begin");
    await c.query("select realtime.send($1::jsonb, $2, $3, true)", [
      JSON.stringify(payload),
      event,
      topic,
    ]);
    await c.query(end);
  } finally {
    c.release();
  }
}

describe("private channels, authorized by the RLS policies on realtime.messages", () => {
  test("a user joins their own topic", async () => {
    const me = randomUUID();
    const joined = await join(client({ current: await mint(me) }), `rt-test:${me}`);
    expect([joined.status, joined.error?.message]).toEqual([
      REALTIME_SUBSCRIBE_STATES.SUBSCRIBED,
      undefined,
    ]);
  });

  test("another user's topic is refused in Realtime's words", async () => {
    const [me, other] = [randomUUID(), randomUUID()];
    const joined = await join(client({ current: await mint(me) }), `rt-test:${other}`);
    expect(joined.status).toBe(REALTIME_SUBSCRIBE_STATES.CHANNEL_ERROR);
    expect(joined.error?.message).toBe(
      `Unauthorized: You do not have permissions to read from this Channel topic: rt-test:${other}`,
    );
  });

  test("an anonymous client (the publishable key alone) is refused", async () => {
    const someone = randomUUID();
    const joined = await join(client(), `rt-test:${someone}`);
    expect(joined.status).toBe(REALTIME_SUBSCRIBE_STATES.CHANNEL_ERROR);
    expect(joined.error?.message).toBe(
      `Unauthorized: You do not have permissions to read from this Channel topic: rt-test:${someone}`,
    );
  });

  test("an expired token is refused at the join", async () => {
    const me = randomUUID();
    const token = await createAuthStandIn(project).mint({
      userId: me,
      now: new Date(Date.now() - 7200_000),
    });
    const joined = await join(client({ current: token }), `rt-test:${me}`);
    expect(joined.status).toBe(REALTIME_SUBSCRIBE_STATES.CHANNEL_ERROR);
    expect(joined.error?.message).toMatch(/^InvalidJWTToken: Token has expired \d+ seconds ago$/);
  });

  test("the probe rows of the check are rolled back", async () => {
    const me = randomUUID();
    await join(client({ current: await mint(me) }), `rt-test:${me}`);
    const { rows } = await admin.query(
      "select count(*)::int as n from realtime.messages where topic = $1",
      [`rt-test:${me}`],
    );
    expect(rows[0].n).toBe(0);
  });
});

describe("the partitions of realtime.messages", () => {
  test("yesterday to three days ahead exist; a day older than 72 hours is dropped", async () => {
    const day = (offset: number) =>
      `messages_${new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10).replaceAll("-", "_")}`;
    const old = day(-5);
    const from = new Date(Date.now() - 5 * 86_400_000).toISOString().slice(0, 10);
    const to = new Date(Date.now() - 4 * 86_400_000).toISOString().slice(0, 10);
    await admin.query(
      `create table realtime.${old} partition of realtime.messages for values from ('${from}') to ('${to}')`,
    );
    await maintainMessagePartitions(admin);
    const { rows } = await admin.query<{ name: string }>(
      "select c.relname as name from pg_inherits i join pg_class c on c.oid = i.inhrelid where i.inhparent = 'realtime.messages'::regclass",
    );
    const names = rows.map((r) => r.name);
    expect(names).not.toContain(old);
    for (const offset of [-1, 0, 1, 2, 3]) expect(names).toContain(day(offset));
  });
});

describe("broadcast from the database (realtime.send)", () => {
  test("a committed row reaches the joined channel, with its id as meta", async () => {
    const me = randomUUID();
    const topic = `rt-test:${me}`;
    const joined = await join(client({ current: await mint(me) }), topic);
    await sendFromDatabase(topic, "job", { job_id: "j1", state: "running" });
    await until("the broadcast", () => joined.heard.length === 1);
    const [m] = joined.heard;
    expect(m?.event).toBe("job");
    expect(m?.payload).toEqual({ job_id: "j1", state: "running", id: m?.meta?.id });
    expect(m?.meta?.id).toMatch(/^[0-9a-f-]{36}$/);
  });

  test("a rolled-back row never arrives; committed rows arrive in commit order", async () => {
    const me = randomUUID();
    const topic = `rt-test:${me}`;
    const joined = await join(client({ current: await mint(me) }), topic);
    await sendFromDatabase(topic, "planted", { n: 0 }, "rollback");
    // Two transactions: the first to begin commits last.
    const [a, b] = [await admin.connect(), await admin.connect()];
    try {
      await a.query("begin");
      await a.query("select realtime.send('{\"n\": 2}', 'seq', $1, true)", [topic]);
      await b.query("begin");
      await b.query("select realtime.send('{\"n\": 1}', 'seq', $1, true)", [topic]);
      await b.query("commit");
      await a.query("commit");
    } finally {
      a.release();
      b.release();
    }
    await until("both committed rows", () => joined.heard.length >= 2);
    // Delivery is in commit order, so a rolled-back row would have come before these.
    expect(joined.heard.map((m) => [m.event, m.payload.n])).toEqual([
      ["seq", 1],
      ["seq", 2],
    ]);
  });

  test("a row for another user's topic, or a public one, does not reach this channel", async () => {
    const [me, other] = [randomUUID(), randomUUID()];
    const topic = `rt-test:${me}`;
    const joined = await join(client({ current: await mint(me) }), topic);
    await sendFromDatabase(`rt-test:${other}`, "seq", { n: 1 });
    const c = await admin.connect();
    try {
      await c.query("select realtime.send('{\"n\": 2}', 'seq', $1, false)", [topic]);
    } finally {
      c.release();
    }
    await sendFromDatabase(topic, "seq", { n: 3 });
    await until("the row for this topic", () => joined.heard.length >= 1);
    expect(joined.heard.map((m) => m.payload.n)).toEqual([3]);
  });

  test("a client on vsn 1.0.0 (JSON objects) hears it too", async () => {
    const me = randomUUID();
    const topic = `rt-test:${me}`;
    const joined = await join(client({ current: await mint(me) }, { vsn: "1.0.0" }), topic);
    expect([joined.status, joined.error?.message]).toEqual([
      REALTIME_SUBSCRIBE_STATES.SUBSCRIBED,
      undefined,
    ]);
    await sendFromDatabase(topic, "job", { state: "done" });
    await until("the broadcast", () => joined.heard.length === 1);
    expect(joined.heard[0]?.payload.state).toBe("done");
  });
});

describe("read by logical decoding, as Realtime reads it", () => {
  interface Slot {
    slot_name: string;
    plugin: string;
    temporary: boolean;
    /** Confirmed (acknowledged) at or past the LSN asked about: WAL before it is not held. */
    acked: boolean;
  }
  const slots = async (lsn = "0/0") =>
    (
      await admin.query<Slot>(
        `select slot_name, plugin, temporary, confirmed_flush_lsn >= $1::pg_lsn as acked
           from pg_replication_slots where database = current_database() order by slot_name`,
        [lsn],
      )
    ).rows;

  /** `probe` until it holds, every 50 ms. */
  async function eventually(what: string, probe: () => Promise<boolean>, ms = 10_000) {
    const end = Date.now() + ms;
    while (!(await probe())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  test("the publication holds the inserts of realtime.messages only", async () => {
    const { rows } = await admin.query(
      `select pubinsert, pubupdate, pubdelete, pubtruncate,
              (select count(*)::int from pg_publication_tables t
                where t.pubname = p.pubname and t.schemaname = 'realtime'
                  and t.tablename like 'messages\\_%') as partitions,
              (select count(*)::int from pg_publication_tables t
                where t.pubname = p.pubname and t.tablename not like 'messages\\_%') as others
         from pg_publication p where pubname = 'supabase_realtime_messages_publication'`,
    );
    expect(rows).toEqual([
      {
        pubinsert: true,
        pubupdate: false,
        pubdelete: false,
        pubtruncate: false,
        partitions: expect.any(Number),
        others: 0,
      },
    ]);
    expect(rows[0].partitions).toBeGreaterThan(0);
  });

  test("each stand-in streams a temporary pgoutput slot, acknowledged past each commit", async () => {
    const me = randomUUID();
    const topic = `rt-test:${me}`;
    const joined = await join(client({ current: await mint(me) }), topic);
    await sendFromDatabase(topic, "seq", { n: 1 });
    await until("the broadcast", () => joined.heard.length === 1);
    const { rows } = await admin.query("select pg_current_wal_lsn()::text as lsn");
    await eventually("each slot confirmed past the commit", async () =>
      (await slots(rows[0].lsn)).every((s) => s.acked),
    );
    // One a stand-in running on this database (the legacy project's starts with its tests).
    const found = await slots();
    expect(found).toHaveLength(1);
    for (const s of found) {
      expect(s).toMatchObject({ plugin: "pgoutput", temporary: true });
      expect(s.slot_name).toMatch(/^realtime_stand_in_[0-9a-f]{12}$/);
    }
  });

  test("a kept database loses the NOTIFY trigger the stand-in once listened to", async () => {
    const c = await admin.connect();
    try {
      // As dev/postgres/realtime-compat.sql made it before the stand-in decoded the WAL.
      await c.query(`
        create function realtime.stand_in_notify() returns trigger language plpgsql as $$
        begin
          perform pg_notify('realtime_stand_in',
            json_build_object('id', new.id, 'inserted_at', new.inserted_at)::text);
          return null;
        end $$;
        create trigger stand_in_notify after insert on realtime.messages
          for each row when (new.extension = 'broadcast') execute function realtime.stand_in_notify()`);
      expect(await applyRealtimeSchema(c)).toBe("kept");
      const { rows } = await c.query(
        `select (select count(*)::int from pg_trigger where tgname = 'stand_in_notify') as triggers,
                to_regprocedure('realtime.stand_in_notify()')::text as fn`,
      );
      expect(rows).toEqual([{ triggers: 0, fn: null }]);
    } finally {
      c.release();
    }
  });

  test("a stand-in closed leaves no slot behind", async () => {
    const before = (await slots()).map((s) => s.slot_name);
    const extra = await startRealtime({
      databaseUrl: databaseUrl(),
      jwtSecret: project.jwtSecret,
      serviceRoleKey: project.secretKey,
    });
    expect(await slots()).toHaveLength(before.length + 1);
    await extra.close();
    await eventually("the slot dropped", async () => (await slots()).length === before.length);
    expect((await slots()).map((s) => s.slot_name)).toEqual(before);
  });
});

describe("the socket", () => {
  test("a heartbeat on topic phoenix is answered ok", async () => {
    const me = randomUUID();
    const c = client({ current: await mint(me) });
    await join(c, `rt-test:${me}`);
    const beats: string[] = [];
    c.realtime.onHeartbeat((status) => beats.push(status));
    await c.realtime.sendHeartbeat();
    await until("the heartbeat's reply", () => beats.includes("ok"));
    expect(beats).toEqual(["sent", "ok"]);
  });

  test("a new access token for the same user keeps the channel; another user's closes it", async () => {
    const [me, other] = [randomUUID(), randomUUID()];
    const topic = `rt-test:${me}`;
    const token = { current: await mint(me) };
    const c = client(token);
    const joined = await join(c, topic);
    token.current = await mint(me, 7200);
    await c.realtime.setAuth();
    await sendFromDatabase(topic, "seq", { n: 1 });
    await until("the broadcast after the refresh", () => joined.heard.length === 1);

    token.current = await mint(other);
    await c.realtime.setAuth();
    await until("the channel's close", () =>
      joined.statuses.includes(REALTIME_SUBSCRIBE_STATES.CLOSED),
    );
    expect(joined.system).toEqual([
      {
        extension: "system",
        status: "error",
        message: `You do not have permissions to read from this Channel topic: ${topic}`,
        channel: topic,
      },
    ]);
    await sendFromDatabase(topic, "seq", { n: 2 });
    await sendFromDatabase(topic, "seq", { n: 3 });
    // A second joined channel on the same topic proves the rows went out.
    const again = await join(client({ current: await mint(me) }), topic);
    expect([again.status, again.error?.message]).toEqual([
      REALTIME_SUBSCRIBE_STATES.SUBSCRIBED,
      undefined,
    ]);
    await sendFromDatabase(topic, "seq", { n: 4 });
    await until("the later channel's row", () => again.heard.length === 1);
    expect(joined.heard.map((m) => m.payload.n)).toEqual([1]);
  });

  test("a channel whose token expires is shut down when it does", async () => {
    const me = randomUUID();
    const joined = await join(client({ current: await mint(me, 2) }), `rt-test:${me}`);
    expect(joined.status).toBe(REALTIME_SUBSCRIBE_STATES.SUBSCRIBED);
    await until("the channel's close", () =>
      joined.statuses.includes(REALTIME_SUBSCRIBE_STATES.CLOSED),
    );
    expect(joined.system).toMatchObject([
      {
        extension: "system",
        status: "error",
        message: expect.stringMatching(/^Token has expired \d+ seconds ago$/),
      },
    ]);
  });

  test("a client's broadcast reaches the user's other client, and is acknowledged", async () => {
    const me = randomUUID();
    const topic = `rt-test:${me}`;
    const sender = await join(client({ current: await mint(me) }), topic, {
      private: true,
      ack: true,
    });
    const listener = await join(client({ current: await mint(me) }), topic);
    expect(
      await sender.channel.send({ type: "broadcast", event: "hello", payload: { a: 1 } }),
    ).toBe("ok");
    await until("the broadcast", () => listener.heard.length === 1);
    expect(listener.heard[0]).toMatchObject({ event: "hello", payload: { a: 1 } });
    expect(sender.heard).toEqual([]);
  });

  test("what the stand-in does not serve is refused in words: Postgres Changes, 404 elsewhere", async () => {
    const me = randomUUID();
    const c = client({ current: await mint(me) });
    await c.realtime.setAuth();
    const refused = await new Promise<string | undefined>((resolve) => {
      c.channel(`rt-test:${me}`, { config: { private: true } })
        .on("postgres_changes", { event: "*", schema: "public" }, () => {})
        .subscribe((_status, error) => resolve(error?.message));
    });
    expect(refused).toBe(
      "Postgres Changes is not served by the local Realtime stand-in (dev/realtime)",
    );
    const single = await fetch(`${rest.url}/realtime/v1/api/broadcast/t/events`, {
      method: "POST",
      headers: { apikey: project.publishableKey, "content-type": "application/json" },
      body: "{}",
    });
    expect(single.status).toBe(404);
  });

  test("an unknown API key, or none, is refused at the handshake", async () => {
    const handshake = (query: string) =>
      new Promise<{ status: number; body: unknown }>((resolve, reject) => {
        const ws = new WebSocket(
          `${rest.url.replace("http", "ws")}/realtime/v1/websocket?${query}`,
        );
        ws.on("unexpected-response", (_req, res) => {
          let text = "";
          res.on("data", (d: Buffer) => {
            text += d.toString();
          });
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
        });
        ws.on("open", () => reject(new Error("the handshake was accepted")));
      });
    expect(await handshake("apikey=sb_publishable_not-this-projects&vsn=2.0.0")).toEqual({
      status: 401,
      body: {
        message: "Invalid API key",
        hint: "Double check your Supabase `anon` or `service_role` API key.",
      },
    });
    expect(await handshake("vsn=2.0.0")).toEqual({
      status: 401,
      body: { error: "API key is missing" },
    });
  });
});

describe("POST /realtime/v1/api/broadcast", () => {
  const post = (body: unknown, headers: Record<string, string>) =>
    fetch(`${rest.url}/realtime/v1/api/broadcast`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });

  test("202 with no body; a private message goes out when the token may write the topic", async () => {
    const [me, other] = [randomUUID(), randomUUID()];
    const topic = `rt-test:${me}`;
    const joined = await join(client({ current: await mint(me) }), topic);
    const asOther = await post(
      { messages: [{ topic, event: "seq", payload: { n: 1 }, private: true }] },
      { apikey: project.publishableKey, authorization: `Bearer ${await mint(other)}` },
    );
    expect([asOther.status, await asOther.text()]).toEqual([202, ""]);
    const asMe = await post(
      { messages: [{ topic, event: "seq", payload: { n: 2 }, private: true, id: "m-2" }] },
      { apikey: project.publishableKey, authorization: `Bearer ${await mint(me)}` },
    );
    expect(asMe.status).toBe(202);
    const asServer = await post(
      { messages: [{ topic, event: "seq", payload: { n: 3 }, private: true }] },
      { apikey: project.secretKey },
    );
    expect(asServer.status).toBe(202);
    await until("two broadcasts", () => joined.heard.length === 2);
    expect(joined.heard).toEqual([
      { type: "broadcast", event: "seq", payload: { n: 2 }, meta: { id: "m-2" } },
      { type: "broadcast", event: "seq", payload: { n: 3 } },
    ]);
  });

  test("a public message reaches a public channel of that name only", async () => {
    const name = `rt-public:${randomUUID()}`;
    const open = await join(client(), name, { private: false });
    expect(open.status).toBe(REALTIME_SUBSCRIBE_STATES.SUBSCRIBED);
    const res = await post(
      { messages: [{ topic: name, event: "note", payload: { hi: true } }] },
      { apikey: project.publishableKey },
    );
    expect(res.status).toBe(202);
    await until("the broadcast", () => open.heard.length === 1);
    expect(open.heard[0]).toEqual({ type: "broadcast", event: "note", payload: { hi: true } });
  });

  test("422 names what a message lacks; 401 for a token it cannot verify", async () => {
    const invalid = await post(
      {
        messages: [
          { topic: "t", event: "e", payload: { ok: 1 } },
          { topic: "t", event: "e" },
        ],
      },
      { apikey: project.publishableKey },
    );
    expect([invalid.status, await invalid.json()]).toEqual([
      422,
      { errors: { messages: [{}, { payload: ["can't be blank"] }] } },
    ]);
    const forged = await post(
      { messages: [{ topic: "t", event: "e", payload: {} }] },
      { apikey: project.publishableKey, authorization: "Bearer not.a.token" },
    );
    expect([forged.status, await forged.json()]).toEqual([401, { message: "Unauthorized" }]);
  });
});

describe("a legacy project: HS256 user tokens and the anon / service_role JWT keys", () => {
  let legacy: ProjectFile;
  let legacyRealtime: RealtimeStandIn;
  let legacyRest: RunningPostgrest;
  beforeAll(async () => {
    const port = await freePort();
    legacy = await makeProject({ shape: "legacy", issuer: `http://127.0.0.1:${port}/auth/v1` });
    const auth = createAuthStandIn(legacy);
    const keys = {
      jwtSecret: legacy.jwtSecret,
      serviceRoleKey: legacy.secretKey,
      anonKey: legacy.publishableKey,
    };
    legacyRealtime = await startRealtime({
      databaseUrl: databaseUrl(),
      jwks: auth.jwks(),
      ...keys,
    });
    legacyRest = await startPostgrest({
      port,
      databaseUrl: databaseUrl(),
      auth,
      realtime: legacyRealtime,
      ...keys,
    });
  });
  afterAll(async () => {
    await legacyRest?.close();
    await legacyRealtime?.close();
  });

  const legacyClient = (token?: string) => {
    const c = createClient(legacyRest.url, legacy.publishableKey, {
      auth: { persistSession: false, autoRefreshToken: false },
      ...(token ? { accessToken: async () => token } : {}),
    });
    clients.push(c);
    return c;
  };

  test("a user joins their own topic; the anon key's own token is refused", async () => {
    const me = randomUUID();
    const token = await createAuthStandIn(legacy).mint({ userId: me });
    const mine = await join(legacyClient(token), `rt-test:${me}`);
    expect([mine.status, mine.error?.message]).toEqual([
      REALTIME_SUBSCRIBE_STATES.SUBSCRIBED,
      undefined,
    ]);
    // Signed out, supabase-js sends the anon key itself as the access token: role anon.
    const anonymous = await join(legacyClient(), `rt-test:${me}`);
    expect(anonymous.error?.message).toBe(
      `Unauthorized: You do not have permissions to read from this Channel topic: rt-test:${me}`,
    );
  });
});
