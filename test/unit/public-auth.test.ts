import { HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import {
  AuthError,
  authErrorSentence,
  createAuth,
  STORAGE_KEY,
  toEpochMs,
} from "../../public/auth.js";

// GoTrue (Supabase Auth) is a boundary we do not own: msw answers the way it answers.
const supabase = { url: "https://abcdefghijklmnop.supabase.co", anonKey: "anon-public-key" };
const tokenUrl = `${supabase.url}/auth/v1/token`;
const userId = "0d6f0a4e-8a3b-4f0e-9d51-1b2c3d4e5f60";

type Seen = { grant: string | null; apikey: string | null; body: Record<string, string> };
const seen: Seen[] = [];

const server = setupServer(
  http.post(tokenUrl, async ({ request }) => {
    const url = new URL(request.url);
    const body = (await request.json()) as Record<string, string>;
    seen.push({
      grant: url.searchParams.get("grant_type"),
      apikey: request.headers.get("apikey"),
      body,
    });
    if (request.headers.get("apikey") !== supabase.anonKey) {
      return HttpResponse.json({ message: "Invalid API key" }, { status: 401 });
    }
    const ok = (n: number) =>
      HttpResponse.json({
        access_token: `access-${n}`,
        token_type: "bearer",
        expires_in: 3600,
        expires_at: Math.floor(Date.now() / 1000) + 3600,
        refresh_token: `refresh-${n}`,
        user: { id: userId, aud: "authenticated", email: "ada@example.com" },
      });
    if (url.searchParams.get("grant_type") === "password") {
      if (body.email === "new@example.com") {
        return HttpResponse.json(
          { code: 400, error_code: "email_not_confirmed", msg: "Email not confirmed" },
          { status: 400 },
        );
      }
      if (body.password !== "correct horse") {
        return HttpResponse.json(
          { code: 400, error_code: "invalid_credentials", msg: "Invalid login credentials" },
          { status: 400 },
        );
      }
      return ok(1);
    }
    if (body.refresh_token === "refresh-1") return ok(2);
    return HttpResponse.json(
      { code: 400, error_code: "refresh_token_not_found", msg: "Invalid Refresh Token" },
      { status: 400 },
    );
  }),
);
beforeAll(() => server.listen({ onUnhandledRequest: "error" }));
afterEach(() => {
  server.resetHandlers();
  seen.length = 0;
});
afterAll(() => server.close());

function memoryStorage() {
  const m = new Map<string, string>();
  return {
    getItem: (k: string) => m.get(k) ?? null,
    setItem: (k: string, v: string) => void m.set(k, v),
    removeItem: (k: string) => void m.delete(k),
    map: m,
  };
}

describe("Supabase Auth by email and password (GoTrue REST)", () => {
  test("signs in with the anon key as apikey, keeps the session in sessionStorage", async () => {
    const storage = memoryStorage();
    const auth = createAuth({ supabase, storage });
    await auth.signInWithPassword("ada@example.com", "correct horse");
    expect(seen).toEqual([
      {
        grant: "password",
        apikey: "anon-public-key",
        // auth-js adds its captcha field (empty without a captcha)
        body: { email: "ada@example.com", password: "correct horse", gotrue_meta_security: {} },
      },
    ]);
    expect(auth.session()).toMatchObject({
      kind: "supabase",
      userId,
      email: "ada@example.com",
      accessToken: "access-1",
    });
    expect(await auth.accessToken()).toBe("access-1");
    // a reload of the tab finds it again; nothing but the anon key was ever configured
    const again = createAuth({ supabase, storage });
    expect(again.session()?.accessToken).toBe("access-1");
    expect(storage.map.get(STORAGE_KEY)).not.toContain("password");
  });

  test("wrong password and unconfirmed email are told apart, in words", async () => {
    const auth = createAuth({ supabase });
    const wrong = await auth.signInWithPassword("ada@example.com", "nope").catch((e) => e);
    expect(wrong).toBeInstanceOf(AuthError);
    expect(authErrorSentence(wrong.code)).toBe("That email and password do not match an account.");
    const unconfirmed = await auth.signInWithPassword("new@example.com", "x").catch((e) => e);
    expect(unconfirmed.code).toBe("email_not_confirmed");
    expect(auth.session()).toBeNull();
  });

  test("a refresh uses grant_type=refresh_token; two callers at once share one", async () => {
    const auth = createAuth({ supabase });
    await auth.signInWithPassword("ada@example.com", "correct horse");
    expect(await auth.accessToken()).toBe("access-1");
    const [a, b] = await Promise.all([auth.refresh(), auth.refresh()]);
    expect([a, b]).toEqual(["access-2", "access-2"]);
    expect(await auth.accessToken()).toBe("access-2");
    expect(seen.filter((s) => s.grant === "refresh_token")).toEqual([
      { grant: "refresh_token", apikey: "anon-public-key", body: { refresh_token: "refresh-1" } },
    ]);
    expect(auth.session()?.email).toBe("ada@example.com");
  });

  test("a refresh token the server no longer accepts signs the user out", async () => {
    const storage = memoryStorage();
    const auth = createAuth({ supabase, storage });
    await auth.signInWithPassword("ada@example.com", "correct horse");
    await auth.refresh(); // refresh-1 → access-2 / refresh-2, which this fake GoTrue forgets
    const changes: unknown[] = [];
    auth.onChange((s) => changes.push(s));
    expect(await auth.refresh()).toBeNull();
    expect(auth.session()).toBeNull();
    expect(changes).toEqual([null]);
    expect(storage.map.has(STORAGE_KEY)).toBe(false);
  });

  test("a network failure is not a wrong password", async () => {
    server.use(http.post(tokenUrl, () => HttpResponse.error()));
    const auth = createAuth({ supabase });
    const e = await auth.signInWithPassword("ada@example.com", "correct horse").catch((x) => x);
    expect(e.code).toBe("network");
  });
});

describe("the dev sign-in (npm run dev only)", () => {
  test("POST /__dev/sign-in with the chosen plan; refresh signs in again as the same user", async () => {
    const calls: unknown[] = [];
    const fakeFetch = (async (input: RequestInfo | URL, init?: RequestInit) => {
      const body = JSON.parse(String(init?.body));
      calls.push({ url: String(input), body });
      return Response.json({
        userId: body.userId ?? userId,
        accessToken: `dev-${calls.length}`,
        plan: body.plan,
        expiresAt: new Date(Date.now() + 8 * 3600_000).toISOString(),
      });
    }) as typeof fetch;
    const auth = createAuth({ fetch: fakeFetch });
    await auth.devSignIn("pro");
    expect(auth.session()).toMatchObject({
      kind: "dev",
      userId,
      plan: "pro",
      accessToken: "dev-1",
    });
    expect(await auth.refresh()).toBe("dev-2");
    expect(calls).toEqual([
      { url: "/__dev/sign-in", body: { plan: "pro" } },
      { url: "/__dev/sign-in", body: { plan: "pro", userId } },
    ]);
  });

  test("expiry accepted as seconds, milliseconds or ISO", () => {
    expect(toEpochMs(1_800_000_000, 0)).toBe(1_800_000_000_000);
    expect(toEpochMs(1_800_000_000_000, 0)).toBe(1_800_000_000_000);
    expect(toEpochMs("2027-01-15T08:00:00.000Z", 0)).toBe(Date.parse("2027-01-15T08:00:00Z"));
    expect(toEpochMs("soon", 42)).toBe(42);
  });
});
