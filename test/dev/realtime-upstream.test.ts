/**
 * supabase-js's own Realtime integration tests, run against the Realtime stand-in
 * (dev/realtime/) instead of `supabase start`.
 *
 * Where they come from: github.com/supabase/supabase-js, file
 * `packages/core/supabase-js/test/integration.test.ts` at commit
 * 381bded5ced48c4621830576bf8cbecc34edc85c: the `Realtime with vsn: $vsn` block (run for
 * vsn 1.0.0 and 2.0.0) and `Custom JWT` → `Realtime`. The RLS policies are that repo's
 * `packages/core/supabase-js/supabase/migrations/20250423000000_realtime_rls_setup.sql`,
 * verbatim. supabase-js is MIT licensed (Copyright (c) 2020 Supabase); the tests are quoted
 * under that licence.
 *
 * The steps, assertions and timeouts are upstream's. What changed, and why:
 *
 * - Setup: upstream talks to `supabase start` at 127.0.0.1:54321 with its fixed demo keys.
 *   Here the project is made as test/dev/realtime.test.ts makes it (a project created today:
 *   ES256 user tokens, `sb_publishable_…` key), on a database of this file's own with the two
 *   upstream policies, the Realtime stand-in mounted on the PostgREST stand-in's origin, and
 *   sign-up answered by the repo's Auth (GoTrue) stand-in with confirmations off, as
 *   `supabase start` has them (`[auth.email] enable_confirmations = false`): `signUp` returns
 *   a session and the client is signed in, as upstream's `beforeEach` relies on.
 * - Custom JWT: upstream signs HS256 with `supabase start`'s JWT secret through `jsonwebtoken`.
 *   The stand-in's project keeps that same legacy secret beside its ES256 key (as a project
 *   moved to signing keys keeps it, and Realtime verifies HS256 tokens with the tenant's
 *   `jwt_secret`), so the token is signed HS256 with `project.jwtSecret`, through `jose`
 *   (a dependency here; `jsonwebtoken` is not): same header, same claims, `iat` and a 1 h
 *   `exp` as `jsonwebtoken` sets them.
 * - Transport: upstream falls back to `ws` when Node has no WebSocket; Node 24 has one, so
 *   the fallback is gone.
 * - Types: upstream's `any` are narrowed (`unknown`, or the payload's shape).
 * - Binary httpSend on vsn 1.0.0: upstream skips it (`test.skip`). A skipped test proves
 *   nothing, so here it asserts what Realtime does for a 1.0.0 socket: the REST call is
 *   accepted, and the binary broadcast is dropped for that socket
 *   (`RealtimeChannel.MessageDispatcher` converts a user broadcast for the V1 serializer with
 *   `UserBroadcast.convert_to_json_broadcast`, which refuses a binary payload), while a JSON
 *   broadcast sent after it arrives.
 */
import { createClient, type RealtimeChannel, type SupabaseClient } from "@supabase/supabase-js";
import { SignJWT } from "jose";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, test } from "vitest";
import { createGotrue } from "../../dev/auth/gotrue.ts";
import { projectKeys } from "../../dev/auth/gotrue-stack.ts";
import { createAuthStandIn, makeProject, type ProjectFile } from "../../dev/auth/index.ts";
import { createMailbox } from "../../dev/auth/mailbox.ts";
import { type RunningPostgrest, startPostgrest } from "../../dev/postgrest/index.ts";
import { type RealtimeStandIn, startRealtime } from "../../dev/realtime/index.ts";
import { adminPool, databaseUrl, useFreshDatabase } from "../support/db.ts";
import { freePort } from "../support/ports.ts";

useFreshDatabase();
const admin = adminPool();

let project: ProjectFile;
let realtime: RealtimeStandIn;
let rest: RunningPostgrest;
let SUPABASE_URL: string;
let PUBLISHABLE_KEY: string;
let JWT_SECRET: string;

beforeAll(async () => {
  // packages/core/supabase-js/supabase/migrations/20250423000000_realtime_rls_setup.sql
  await admin.query(`
    create policy "authenticated can read all messages on topic"
    on "realtime"."messages"
    for select
    to authenticated
    using ( realtime.topic() like '%channel%' );

    create policy "authenticated can insert messages on topic"
    on "realtime"."messages"
    for insert
    to authenticated
    with check (realtime.topic() like '%channel%');`);
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  project = await makeProject({ shape: "new", issuer: `${origin}/auth/v1` });
  const standIn = createAuthStandIn(project);
  const gotrue = createGotrue({
    db: admin,
    mailbox: createMailbox(),
    publicUrl: origin,
    issuer: project.issuer,
    siteUrl: origin,
    apiKeys: () => new Set([project.publishableKey, project.secretKey]),
    adminKeys: () => new Set([project.secretKey]),
    autoconfirm: true,
    ...(await projectKeys(project)),
  });
  await gotrue.ready();
  const auth = {
    jwks: () => standIn.jwks(),
    handle: (request: Request) =>
      new URL(request.url).pathname.startsWith("/auth/v1/.well-known/")
        ? standIn.handle(request)
        : gotrue.handle(request),
  };
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
  SUPABASE_URL = rest.url;
  PUBLISHABLE_KEY = project.publishableKey;
  JWT_SECRET = project.jwtSecret;
});

afterAll(async () => {
  await rest?.close();
  await realtime?.close();
});

/** What a broadcast handler is given (realtime-js's payload). */
type Heard = { payload?: unknown; [key: string]: unknown } | undefined;

describe.each([{ vsn: "1.0.0" }, { vsn: "2.0.0" }])("Realtime with vsn: $vsn", ({ vsn }) => {
  const channelName = `channel-${crypto.randomUUID()}`;
  let channel: RealtimeChannel;
  let email: string;
  let password: string;
  let supabase: SupabaseClient;

  beforeEach(async () => {
    // Create client with specific version
    supabase = createClient(SUPABASE_URL, PUBLISHABLE_KEY, {
      realtime: {
        heartbeatIntervalMs: 500,
        vsn,
      },
    });

    await supabase.auth.signOut();
    email = `test-${Date.now()}@example.com`;
    password = "password123";
    await supabase.auth.signUp({ email, password });

    const config = { broadcast: { ack: true, self: true }, private: true };
    channel = supabase.channel(channelName, { config });
  });

  afterEach(async () => {
    await supabase.removeAllChannels();
  });

  test("is able to connect and broadcast", async () => {
    const testMessage = { message: "test" };
    let receivedMessage: unknown;
    let subscribed = false;
    let attempts = 0;

    channel
      .on("broadcast", { event: "test-event" }, (payload) => {
        receivedMessage = payload;
      })
      .subscribe((status) => {
        if (status === "SUBSCRIBED") subscribed = true;
      });

    // Wait for subscription
    while (!subscribed) {
      if (attempts > 50) throw new Error("Timeout waiting for subscription");
      await new Promise((resolve) => setTimeout(resolve, 100));
      attempts++;
    }

    attempts = 0;

    await channel.send({ type: "broadcast", event: "test-event", payload: testMessage });

    // Wait on message
    while (!receivedMessage) {
      if (attempts > 50) throw new Error("Timeout waiting for message");
      await new Promise((resolve) => setTimeout(resolve, 100));
      attempts++;
    }
    expect(receivedMessage).toBeDefined();
    expect(supabase.realtime.getChannels().length).toBe(1);
  }, 10000);

  test("socket stays connected when switching channels (no race condition)", async () => {
    const config = { broadcast: { ack: true, self: true }, private: true };

    // Subscribe channel A and wait for it to be joined
    const channelA = supabase.channel(`${channelName}-a`, { config });
    await new Promise<void>((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error("Timeout waiting for channelA")), 8000);
      channelA.subscribe((status) => {
        if (status === "SUBSCRIBED") {
          clearTimeout(timeout);
          resolve();
        }
      });
    });

    // Remove channel A — should NOT disconnect immediately
    await supabase.removeChannel(channelA);
    expect(supabase.realtime.isConnected()).toBe(true);

    // Immediately subscribe channel B — should reuse the open socket
    const channelB = supabase.channel(`${channelName}-b`, { config });
    let channelBSubscribed = false;
    await new Promise<void>((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error("Timeout waiting for channelB")), 8000);
      channelB
        .on("broadcast", { event: "ping" }, () => {})
        .subscribe((status) => {
          if (status === "SUBSCRIBED") {
            channelBSubscribed = true;
            clearTimeout(timeout);
            resolve();
          }
        });
    });

    expect(channelBSubscribed).toBe(true);
    // Socket was never disconnected — channelB joined on the existing connection
    expect(supabase.realtime.isConnected()).toBe(true);
  }, 20000);

  test("socket disconnects after removeChannel when no channels remain", async () => {
    await new Promise<void>((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error("Timeout waiting for subscription")), 8000);
      channel.subscribe((status) => {
        if (status === "SUBSCRIBED") {
          clearTimeout(timeout);
          resolve();
        }
      });
    });

    expect(supabase.realtime.isConnected()).toBe(true);

    await supabase.removeChannel(channel);
    // Deferred disconnect is scheduled — socket still open
    expect(supabase.realtime.isConnected()).toBe(true);

    // Wait for deferred disconnect (2 * heartbeatIntervalMs = 1000 ms)
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(supabase.realtime.isConnected()).toBe(false);
  }, 15000);

  test("socket disconnects after channel.unsubscribe() when no channels remain", async () => {
    await new Promise<void>((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error("Timeout waiting for subscription")), 8000);
      channel.subscribe((status) => {
        if (status === "SUBSCRIBED") {
          clearTimeout(timeout);
          resolve();
        }
      });
    });

    expect(supabase.realtime.isConnected()).toBe(true);

    await channel.unsubscribe();
    // Deferred disconnect is scheduled — socket still open
    expect(supabase.realtime.isConnected()).toBe(true);

    // Wait for deferred disconnect (2 * heartbeatIntervalMs = 1000 ms)
    await new Promise((resolve) => setTimeout(resolve, 1200));
    expect(supabase.realtime.isConnected()).toBe(false);
  }, 15000);

  test("removeAllChannels disconnects socket immediately", async () => {
    const channelA = supabase.channel(`${channelName}-a`);
    const channelB = supabase.channel(`${channelName}-b`);

    await Promise.all([
      new Promise<void>((resolve, reject) => {
        const timeout = setTimeout(() => reject(new Error("Timeout waiting for channelA")), 8000);
        channelA.subscribe((status) => {
          if (status === "SUBSCRIBED") {
            clearTimeout(timeout);
            resolve();
          }
        });
      }),
      new Promise<void>((resolve, reject) => {
        const timeout = setTimeout(() => reject(new Error("Timeout waiting for channelB")), 8000);
        channelB.subscribe((status) => {
          if (status === "SUBSCRIBED") {
            clearTimeout(timeout);
            resolve();
          }
        });
      }),
    ]);

    expect(supabase.realtime.isConnected()).toBe(true);

    await supabase.removeAllChannels();
    // removeAllChannels is an explicit teardown — no deferred timer, disconnect is immediate
    expect(supabase.realtime.isConnected()).toBe(false);
  }, 20000);

  test("httpSend delivers JSON broadcast to a public channel", async () => {
    const publicChannelName = `public-${crypto.randomUUID()}`;
    const publicChannel = supabase.channel(publicChannelName, {
      config: { broadcast: { self: true } },
    });

    let received: Heard;
    await new Promise<void>((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error("subscribe timeout")), 8000);
      publicChannel
        .on("broadcast", { event: "json" }, (payload) => {
          received = payload;
        })
        .subscribe((status) => {
          if (status === "SUBSCRIBED") {
            clearTimeout(timeout);
            resolve();
          }
        });
    });

    const result = await publicChannel.httpSend("json", { hello: "public" });
    expect(result).toEqual({ success: true });

    let attempts = 0;
    while (!received) {
      if (attempts++ > 50) throw new Error("Timeout waiting for broadcast");
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(received.payload).toEqual({ hello: "public" });
  }, 15000);

  test("httpSend delivers JSON broadcast to a private channel", async () => {
    let received: Heard;
    await new Promise<void>((resolve, reject) => {
      const timeout = setTimeout(() => reject(new Error("subscribe timeout")), 8000);
      channel
        .on("broadcast", { event: "json-private" }, (payload) => {
          received = payload;
        })
        .subscribe((status) => {
          if (status === "SUBSCRIBED") {
            clearTimeout(timeout);
            resolve();
          }
        });
    });

    const result = await channel.httpSend("json-private", { hello: "private" });
    expect(result).toEqual({ success: true });

    let attempts = 0;
    while (!received) {
      if (attempts++ > 50) throw new Error("Timeout waiting for broadcast");
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(received.payload).toEqual({ hello: "private" });
  }, 15000);

  if (vsn === "2.0.0")
    test("httpSend delivers a binary broadcast to a private channel", async () => {
      let received: Heard;
      await new Promise<void>((resolve, reject) => {
        const timeout = setTimeout(() => reject(new Error("subscribe timeout")), 8000);
        channel
          .on("broadcast", { event: "binary" }, (payload) => {
            received = payload;
          })
          .subscribe((status) => {
            if (status === "SUBSCRIBED") {
              clearTimeout(timeout);
              resolve();
            }
          });
      });

      const bytes = new Uint8Array([1, 2, 3, 4, 5]);
      const result = await channel.httpSend("binary", bytes);
      expect(result).toEqual({ success: true });

      let attempts = 0;
      while (!received) {
        if (attempts++ > 50) throw new Error("Timeout waiting for broadcast");
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(new Uint8Array(received.payload as ArrayBuffer)).toEqual(bytes);
    }, 15000);
  // Upstream: `test.skip` on 1.0.0. Here: what Realtime does for a 1.0.0 socket.
  else
    test("httpSend binary to a private channel: accepted, not delivered to a 1.0.0 socket", async () => {
      let received: Heard;
      let marker: Heard;
      await new Promise<void>((resolve, reject) => {
        const timeout = setTimeout(() => reject(new Error("subscribe timeout")), 8000);
        channel
          .on("broadcast", { event: "binary" }, (payload) => {
            received = payload;
          })
          .on("broadcast", { event: "after-binary" }, (payload) => {
            marker = payload;
          })
          .subscribe((status) => {
            if (status === "SUBSCRIBED") {
              clearTimeout(timeout);
              resolve();
            }
          });
      });

      const bytes = new Uint8Array([1, 2, 3, 4, 5]);
      const result = await channel.httpSend("binary", bytes);
      expect(result).toEqual({ success: true });
      // Sent after the binary one, on the same path: once it is here, the binary one would be.
      expect(await channel.httpSend("after-binary", { after: true })).toEqual({ success: true });

      let attempts = 0;
      while (!marker) {
        if (attempts++ > 50) throw new Error("Timeout waiting for broadcast");
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(marker.payload).toEqual({ after: true });
      expect(received).toBeUndefined();
    }, 15000);
});

describe("Custom JWT", () => {
  describe("Realtime", () => {
    test("will connect with a properly signed jwt token", async () => {
      const jwtToken = await new SignJWT({
        sub: "1234567890",
        role: "anon",
        iss: "supabase-demo",
      })
        .setProtectedHeader({ alg: "HS256", typ: "JWT" })
        .setIssuedAt()
        .setExpirationTime("1h")
        .sign(new TextEncoder().encode(JWT_SECRET));
      const supabaseWithCustomJwt = createClient(SUPABASE_URL, PUBLISHABLE_KEY, {
        accessToken: () => Promise.resolve(jwtToken),
        realtime: {},
      });

      try {
        // Wait for subscription using Promise to avoid polling
        await new Promise<void>((resolve, reject) => {
          const timeout = setTimeout(() => {
            reject(new Error("Timeout waiting for subscription"));
          }, 4000);

          supabaseWithCustomJwt.channel("test-channel").subscribe((status, err) => {
            if (status === "SUBSCRIBED") {
              clearTimeout(timeout);
              // Verify token was set
              expect(supabaseWithCustomJwt.realtime.accessTokenValue).toBe(jwtToken);
              resolve();
            } else if (status === "CHANNEL_ERROR" || status === "TIMED_OUT") {
              clearTimeout(timeout);
              reject(err || new Error(`Subscription failed with status: ${status}`));
            }
          });
        });
      } finally {
        // Always cleanup channels and connection, even if test fails
        await supabaseWithCustomJwt.removeAllChannels();
      }
    }, 5000);
  });
});
