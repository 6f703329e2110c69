/**
 * The page's live channel (public/live.js, on the bundled realtime-js the page loads) and the
 * worker's pushes (lib/live.ts) against the Realtime stand-in on a migrated database: the topic
 * `job:<user id>` and its read policy are the migrations' own. What realtime-js's users meet is
 * planted here: a token that expires under a joined channel (the server shuts it down: the page
 * must join again with a token read fresh, not the one it kept), and Realtime going away and
 * coming back.
 */
import { randomUUID } from "node:crypto";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { createAuthStandIn, makeProject, type ProjectFile } from "../../dev/auth/index.ts";
import { type RunningPostgrest, startPostgrest } from "../../dev/postgrest/index.ts";
import { type RealtimeStandIn, startRealtime } from "../../dev/realtime/index.ts";
import { createLive as createPush } from "../../lib/live.ts";
import { createLive, type Live, type LiveMessage } from "../../public/live.js";
import { adminPool, databaseUrl, useFreshDatabase } from "../support/db.ts";
import { freePort } from "../support/ports.ts";

useFreshDatabase();
const admin = adminPool();

let project: ProjectFile;
let realtime: RealtimeStandIn;
let rest: RunningPostgrest;
const opened: Live[] = [];

beforeAll(async () => {
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

afterEach(() => {
  realtime.down(false);
  for (const live of opened.splice(0)) live.close();
});

afterAll(async () => {
  await rest?.close();
  await realtime?.close();
});

const mint = (userId: string, expiresInSeconds?: number) =>
  createAuthStandIn(project).mint({ userId, ...(expiresInSeconds ? { expiresInSeconds } : {}) });

async function until(what: string, check: () => boolean, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** The page's channel for `userId`, with what it hears and each joined/lost it reports. */
function watch(userId: string, token: () => Promise<string | null>) {
  const heard: LiveMessage[] = [];
  const joins: boolean[] = [];
  const live = createLive({
    url: rest.url,
    apikey: project.publishableKey,
    userId,
    token,
    onMessage: (m) => heard.push(m),
    onJoined: (j) => joins.push(j),
  });
  opened.push(live);
  return { live, heard, joins };
}

const stateFromDatabase = (userId: string, payload: Record<string, unknown>) =>
  admin.query("select realtime.send($1::jsonb, 'job_state', $2, true)", [
    JSON.stringify(payload),
    `job:${userId}`,
  ]);

describe("the page's live channel", () => {
  test("joins the user's topic and hears the database's state messages", async () => {
    const me = randomUUID();
    const token = await mint(me);
    const w = watch(me, async () => token);
    await until("the join", () => w.live.joined());
    await stateFromDatabase(me, { job_id: "j1", state: "running", seq: 7 });
    await until("the message", () => w.heard.length === 1);
    expect(w.heard).toMatchObject([
      { event: "job_state", payload: { job_id: "j1", state: "running", seq: 7 } },
    ]);
  });

  test("another user's topic stays silent for it: the join is refused and it polls", async () => {
    const me = randomUUID();
    const token = await mint(randomUUID());
    // the page's topic is its own user's; a token of someone else cannot join it
    const w = watch(me, async () => token);
    await new Promise((r) => setTimeout(r, 1500));
    expect(w.live.joined()).toBe(false);
    await stateFromDatabase(me, { job_id: "j1", state: "running", seq: 1 });
    await new Promise((r) => setTimeout(r, 300));
    expect(w.heard).toEqual([]);
  });

  test("a token that expires under the channel: it joins again with a fresh one, by itself", async () => {
    const me = randomUUID();
    const tokens = [await mint(me, 2), await mint(me)];
    let asked = 0;
    const w = watch(me, async () => tokens[Math.min(asked++, 1)] ?? null);
    await until("the first join", () => w.joins[0] === true);
    // the stand-in shuts the channel down when its token expires, as Realtime does
    await until("the channel lost at the token's expiry", () => w.joins[1] === false, 10_000);
    await until("the join again", () => w.joins[2] === true);
    await stateFromDatabase(me, { job_id: "j2", state: "succeeded", seq: 9 });
    await until("a message on the new channel", () => w.heard.length === 1);
    expect(w.heard[0]?.payload).toMatchObject({ job_id: "j2", seq: 9 });
  });

  test("Realtime away and back: lost, then joined again by itself", async () => {
    const me = randomUUID();
    const token = await mint(me);
    const w = watch(me, async () => token);
    await until("the join", () => w.live.joined());
    realtime.down(true);
    await until("the channel lost", () => !w.live.joined());
    await new Promise((r) => setTimeout(r, 1500));
    expect(w.live.joined()).toBe(false);
    realtime.down(false);
    await until("joined again", () => w.live.joined(), 20_000);
    await stateFromDatabase(me, { job_id: "j3", state: "running", seq: 2 });
    await until("a message after the return", () => w.heard.length === 1);
  });
});

describe("the worker's pushes (lib/live.ts, REST broadcast)", () => {
  test("the answer's delta reaches the user's channel, and only theirs", async () => {
    const me = randomUUID();
    const other = randomUUID();
    const mine = watch(me, async () => await mint(me));
    const theirs = watch(other, async () => await mint(other));
    await until("both joined", () => mine.live.joined() && theirs.live.joined());
    const push = createPush({ supabaseUrl: rest.url, serverKey: project.secretKey });
    await push.progress(me, {
      job_id: "j4",
      attempt: 1,
      offset: 0,
      text: "Hello",
      tokens: 2,
      thinking: false,
      reasoning_tokens: null,
    });
    await until("the delta", () => mine.heard.length === 1);
    expect(mine.heard[0]).toMatchObject({
      event: "job_progress",
      payload: {
        job_id: "j4",
        attempt: 1,
        offset: 0,
        text: "Hello",
        tokens: 2,
        thinking: false,
        reasoning_tokens: null,
      },
    });
    // an ended job's view goes without the prompt and the input (the page has them)
    const view = { id: "j4", status: "succeeded", prompt: "secret plan", input: { prompt: "x" } };
    await push.view(me, view as unknown as Parameters<typeof push.view>[1]);
    await until("the view", () => mine.heard.length === 2);
    expect(mine.heard[1]).toEqual({
      event: "job_view",
      payload: { job: { id: "j4", status: "succeeded" } },
    });
    await new Promise((r) => setTimeout(r, 300));
    expect(theirs.heard).toEqual([]);
  });

  test("Realtime down: a push fails without throwing (the page reads the job instead)", async () => {
    realtime.down(true);
    const push = createPush({ supabaseUrl: rest.url, serverKey: project.secretKey });
    await expect(
      push.progress(randomUUID(), {
        job_id: "j5",
        attempt: 1,
        offset: 0,
        text: "x",
        tokens: 1,
        thinking: false,
        reasoning_tokens: null,
      }),
    ).resolves.toBeUndefined();
  });
});
