/**
 * The Auth (GoTrue) stand-in over HTTP, driven by the official client (@supabase/auth-js) as
 * the page drives it: each flow the page uses and each error body, on the real database.
 * Tokens are signed with an ES256 key made here (as a project created today signs them) and
 * checked with auth-js's own getClaims against that key's JWKS.
 */
import { randomUUID } from "node:crypto";
import { request as httpRequest } from "node:http";
import {
  AuthApiError,
  AuthSessionMissingError,
  AuthWeakPasswordError,
  GoTrueClient,
} from "@supabase/auth-js";
import { exportJWK, generateKeyPair, jwtVerify, SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { type RunningGotrue, startGotrue } from "../../dev/auth/gotrue-server.ts";
import { adminPool, useFreshDatabase } from "../support/db.ts";
import { refusesItem, spans } from "../support/readme-refusals.ts";

useFreshDatabase();
const admin = adminPool();
const API_KEY = "sb_publishable_test-key";
const SITE = "http://127.0.0.1:3999";
const kid = randomUUID();
const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true });
const jwks = {
  keys: [
    {
      ...(await exportJWK(publicKey)),
      kty: "EC",
      key_ops: ["verify"],
      kid,
      alg: "ES256",
      use: "sig",
    },
  ],
};

let clock = Date.now();
let gotrue: RunningGotrue;
let confirmedGotrue: RunningGotrue;
/** A project whose gateway also takes a secret key, as the stack's does. */
let secretGotrue: RunningGotrue;
const SECRET_KEY = "sb_secret_test-key";
const BROWSER_UA =
  "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36";

function options(autoconfirm: boolean) {
  return {
    port: 0,
    db: admin,
    siteUrl: SITE,
    apiKeys: () => new Set([API_KEY]),
    autoconfirm,
    now: () => new Date(clock),
    sign: (claims: object) =>
      new SignJWT({ ...claims })
        .setProtectedHeader({ alg: "ES256", typ: "JWT", kid })
        .sign(privateKey),
    verify: async (token: string) =>
      (await jwtVerify(token, publicKey, { currentDate: new Date(clock) })).payload,
  };
}

beforeAll(async () => {
  [gotrue, confirmedGotrue, secretGotrue] = await Promise.all([
    startGotrue(options(false)),
    startGotrue(options(true)),
    startGotrue({
      ...options(false),
      apiKeys: () => new Set([API_KEY, SECRET_KEY]),
      adminKeys: () => new Set([SECRET_KEY]),
    }),
  ]);
});
afterAll(async () => {
  await Promise.all([gotrue?.close(), confirmedGotrue?.close(), secretGotrue?.close()]);
});

function client(server = gotrue) {
  const mem = new Map<string, string>();
  return new GoTrueClient({
    url: `${server.url}/auth/v1`,
    headers: { apikey: API_KEY },
    storageKey: `t-${randomUUID()}`,
    storage: {
      getItem: (k) => mem.get(k) ?? null,
      setItem: (k, v) => void mem.set(k, v),
      removeItem: (k) => void mem.delete(k),
    },
    autoRefreshToken: false,
    persistSession: true,
    detectSessionInUrl: false,
  });
}

const email = () => `u-${randomUUID().slice(0, 8)}@example.test`;

function lastMail(to: string) {
  const mail = gotrue.mailbox.list(to)[0];
  if (!mail) throw new Error(`no mail to ${to}`);
  return mail;
}

/** Follows an emailed link as a browser would: the 303 and the fragment it carries. */
async function follow(link: string) {
  const res = await fetch(link, { redirect: "manual" });
  expect(res.status).toBe(303);
  const location = new URL(res.headers.get("location") ?? "");
  return { location, params: new URLSearchParams(location.hash.slice(1)) };
}

/** Signs up and confirms; returns a client signed in through the confirmation link. */
async function confirmedUser(password = "correct horse battery") {
  const address = email();
  const auth = client();
  const { error } = await auth.signUp({ email: address, password });
  expect(error).toBeNull();
  const { params } = await follow(lastMail(address).link);
  const { data, error: setError } = await auth.setSession({
    access_token: params.get("access_token") ?? "",
    refresh_token: params.get("refresh_token") ?? "",
  });
  expect(setError).toBeNull();
  return { address, password, auth, session: data.session };
}

describe("sign-up with email confirmation", () => {
  test("sign-up answers the user and no session; the mail's link confirms and signs in with an ES256 token", async () => {
    const address = email();
    const auth = client();
    const { data, error } = await auth.signUp({
      email: address,
      password: "correct horse battery",
      options: { emailRedirectTo: `${SITE}/welcome` },
    });
    expect(error).toBeNull();
    expect(data.session).toBeNull();
    expect(data.user).toMatchObject({
      email: address,
      aud: "authenticated",
      role: "authenticated",
    });
    expect(data.user?.email_confirmed_at).toBeUndefined();
    expect(data.user?.identities).toHaveLength(1);
    const userId = data.user?.id ?? "";
    const { rows } = await admin.query("select email from auth.users where id = $1", [userId]);
    expect(rows).toEqual([{ email: address }]);

    const mail = lastMail(address);
    expect(mail.subject).toBe("Confirm Your Signup");
    const link = new URL(mail.link);
    expect(link.pathname).toBe("/auth/v1/verify");
    expect(link.searchParams.get("type")).toBe("signup");
    expect(mail.html).toContain("Confirm your mail");

    const signInFirst = await auth.signInWithPassword({
      email: address,
      password: "correct horse battery",
    });
    expect(signInFirst.error).toBeInstanceOf(AuthApiError);
    expect(signInFirst.error).toMatchObject({
      status: 400,
      code: "email_not_confirmed",
      message: "Email not confirmed",
    });

    const { location, params } = await follow(mail.link);
    expect(`${location.origin}${location.pathname}`).toBe(`${SITE}/welcome`);
    expect([...params.keys()]).toEqual([
      "access_token",
      "expires_at",
      "expires_in",
      "refresh_token",
      "sb",
      "token_type",
      "type",
    ]);
    expect(params.get("type")).toBe("signup");
    const set = await auth.setSession({
      access_token: params.get("access_token") ?? "",
      refresh_token: params.get("refresh_token") ?? "",
    });
    expect(set.error).toBeNull();
    expect(set.data.user?.email_confirmed_at).toBeTruthy();

    const claims = await auth.getClaims(params.get("access_token") ?? "", { jwks });
    expect(claims.error).toBeNull();
    expect(claims.data?.header).toMatchObject({ alg: "ES256", kid, typ: "JWT" });
    expect(claims.data?.claims).toMatchObject({
      iss: `${gotrue.url}/auth/v1`,
      sub: userId,
      aud: "authenticated",
      role: "authenticated",
      email: address,
      aal: "aal1",
      is_anonymous: false,
      app_metadata: { provider: "email", providers: ["email"] },
    });
    expect(claims.data?.claims.amr?.[0]).toMatchObject({ method: "otp" });

    // the link is spent
    const again = await follow(mail.link);
    expect(Object.fromEntries(again.params)).toEqual({
      error: "access_denied",
      error_code: "otp_expired",
      error_description: "Email link is invalid or has expired",
      sb: "",
    });
    // now the password works
    const signIn = await client().signInWithPassword({
      email: address,
      password: "correct horse battery",
    });
    expect(signIn.error).toBeNull();
    expect(signIn.data.session?.user.id).toBe(userId);
  });

  test("an unknown redirect_to lands on the site instead", async () => {
    const address = email();
    await client().signUp({
      email: address,
      password: "secret-one",
      options: { emailRedirectTo: "https://evil.example/" },
    });
    const { location } = await follow(lastMail(address).link);
    expect(location.origin).toBe(SITE);
  });

  test("a link older than an hour has expired", async () => {
    const address = email();
    await client().signUp({ email: address, password: "secret-one" });
    const link = lastMail(address).link;
    clock += 3601_000;
    try {
      const { params } = await follow(link);
      expect(params.get("error_code")).toBe("otp_expired");
    } finally {
      clock -= 3601_000;
    }
  });

  test("a weak password is refused with its reasons", async () => {
    const { error } = await client().signUp({ email: email(), password: "short" });
    expect(error).toBeInstanceOf(AuthWeakPasswordError);
    expect(error).toMatchObject({
      status: 422,
      code: "weak_password",
      message: "Password should be at least 6 characters.",
      reasons: ["length"],
    });
  });

  test("a second sign-up within a minute is rate limited; after it a new mail goes out", async () => {
    const address = email();
    expect((await client().signUp({ email: address, password: "secret-one" })).error).toBeNull();
    const { error } = await client().signUp({ email: address, password: "secret-one" });
    expect(error).toMatchObject({ status: 429, code: "over_email_send_rate_limit" });
    expect(error?.message).toMatch(
      /^For security purposes, you can only request this after \d+ seconds\.$/,
    );
    clock += 61_000;
    try {
      expect((await client().signUp({ email: address, password: "secret-one" })).error).toBeNull();
      expect(gotrue.mailbox.list(address)).toHaveLength(2);
    } finally {
      clock -= 61_000;
    }
  });

  test("signing up again as a confirmed user: a made-up user with no identities (confirmations on), user_already_exists (off)", async () => {
    const { address } = await confirmedUser();
    const { data, error } = await client().signUp({ email: address, password: "another one" });
    expect(error).toBeNull();
    expect(data.session).toBeNull();
    expect(data.user?.identities).toEqual([]);

    const other = email();
    const first = await client(confirmedGotrue).signUp({ email: other, password: "secret-one" });
    expect(first.data.session?.access_token).toBeTruthy();
    const second = await client(confirmedGotrue).signUp({ email: other, password: "secret-one" });
    expect(second.error).toMatchObject({
      status: 422,
      code: "user_already_exists",
      message: "User already registered",
    });
  });
});

describe("sign-in, refresh and sign-out", () => {
  test("a wrong password and an unknown address get the same invalid_credentials", async () => {
    const { address } = await confirmedUser();
    for (const attempt of [
      { email: address, password: "wrong password" },
      { email: email(), password: "wrong password" },
    ]) {
      const { error } = await client().signInWithPassword(attempt);
      expect(error).toMatchObject({
        status: 400,
        code: "invalid_credentials",
        message: "Invalid login credentials",
      });
    }
  });

  const refresh = (token: string | undefined) =>
    client().refreshSession({ refresh_token: token ?? "" });

  test("a refresh rotates the token; the one just rotated, sent again, gets the active one back (the client lost the answer)", async () => {
    const { session } = await confirmedUser();
    const first = await refresh(session?.refresh_token);
    expect(first.error).toBeNull();
    expect(first.data.session?.refresh_token).not.toBe(session?.refresh_token);
    // GoTrue: the revoked parent of the session's active token gets that token, at any time
    clock += 60_000;
    try {
      const again = await refresh(session?.refresh_token);
      expect(again.error).toBeNull();
      expect(again.data.session?.refresh_token).toBe(first.data.session?.refresh_token);
      expect(again.data.session?.access_token).toBeTruthy();
    } finally {
      clock -= 60_000;
    }
    const unknown = await refresh("abcdefghijkl");
    expect(unknown.error).toMatchObject({ status: 400, code: "refresh_token_not_found" });
  });

  test("an older rotated token is reusable for 10 s; past that it revokes the whole session: refresh_token_already_used", async () => {
    const { session } = await confirmedUser();
    const a = session?.refresh_token;
    const b = (await refresh(a)).data.session?.refresh_token; // a and then b rotated now
    const c = (await refresh(b)).data.session?.refresh_token; // the active token is c
    const start = clock;
    try {
      // a is not the active token's parent: within the interval it is a concurrent refresh
      clock = start + 9_000;
      const within = await refresh(a);
      expect(within.error).toBeNull();
      const d = within.data.session?.refresh_token;
      expect(d).not.toBe(c);
      // b, 11 s after it was rotated, is past the interval
      clock = start + 11_000;
      const past = await refresh(b);
      expect(past.error).toMatchObject({
        status: 400,
        code: "refresh_token_already_used",
        message: "Invalid Refresh Token: Already Used",
      });
      // every token of the session was revoked with it (GoTrue's RevokeTokenFamily): once
      // their own interval is over, the tokens that were live (c, d) are refused too
      clock = start + 22_000;
      for (const token of [c, d])
        expect((await refresh(token)).error).toMatchObject({
          status: 400,
          code: "refresh_token_already_used",
        });
    } finally {
      clock = start;
    }
  });

  test("sign-out ends the session: its access token and refresh token stop working", async () => {
    const { auth, session } = await confirmedUser();
    expect((await auth.getUser()).data.user?.email).toBeTruthy();
    expect((await auth.signOut()).error).toBeNull();
    const raw = await fetch(`${gotrue.url}/auth/v1/user`, {
      headers: { apikey: API_KEY, authorization: `Bearer ${session?.access_token}` },
    });
    expect(raw.status).toBe(403);
    expect(await raw.json()).toEqual({
      code: 403,
      error_code: "session_not_found",
      msg: "Session from session_id claim in JWT does not exist",
    });
    // auth-js turns that answer into "no session"
    const after = await client().getUser(session?.access_token);
    expect(after.error).toBeInstanceOf(AuthSessionMissingError);
    const refresh = await client().refreshSession({ refresh_token: session?.refresh_token ?? "" });
    expect(refresh.error).toMatchObject({ code: "refresh_token_not_found" });
  });
});

describe("magic link and password reset", () => {
  test("a magic link to a confirmed user signs them in; create_user=false for a new address is refused", async () => {
    const { address } = await confirmedUser();
    clock += 61_000;
    try {
      const { error } = await client().signInWithOtp({ email: address });
      expect(error).toBeNull();
      const mail = lastMail(address);
      expect(mail.subject).toBe("Your Magic Link");
      const { params } = await follow(mail.link);
      expect(params.get("type")).toBe("magiclink");
      const user = await client().getUser(params.get("access_token") ?? "");
      expect(user.data.user?.email).toBe(address);
    } finally {
      clock -= 61_000;
    }
    const refused = await client().signInWithOtp({
      email: email(),
      options: { shouldCreateUser: false },
    });
    expect(refused.error).toMatchObject({
      status: 422,
      code: "otp_disabled",
      message: "Signups not allowed for otp",
    });
  });

  test("a magic link to a new address signs it up: the mail is the confirmation", async () => {
    const address = email();
    expect((await client().signInWithOtp({ email: address })).error).toBeNull();
    const mail = lastMail(address);
    expect(mail.subject).toBe("Confirm Your Signup");
    const { params } = await follow(mail.link);
    expect(params.get("access_token")).toBeTruthy();
  });

  test("reset: the recovery link signs in, the new password replaces the old, the same one is refused", async () => {
    const { address, password } = await confirmedUser();
    expect(
      (await client().resetPasswordForEmail(address, { redirectTo: `${SITE}/` })).error,
    ).toBeNull();
    const mail = lastMail(address);
    expect(mail.subject).toBe("Reset Your Password");
    const { params } = await follow(mail.link);
    expect(params.get("type")).toBe("recovery");
    const auth = client();
    await auth.setSession({
      access_token: params.get("access_token") ?? "",
      refresh_token: params.get("refresh_token") ?? "",
    });
    const same = await auth.updateUser({ password });
    expect(same.error).toMatchObject({
      status: 422,
      code: "same_password",
      message: "New password should be different from the old password.",
    });
    const weak = await auth.updateUser({ password: "abc" });
    expect(weak.error).toMatchObject({ status: 422, code: "weak_password" });
    expect((await auth.updateUser({ password: "a brand new one" })).error).toBeNull();
    expect((await client().signInWithPassword({ email: address, password })).error).toMatchObject({
      code: "invalid_credentials",
    });
    expect(
      (await client().signInWithPassword({ email: address, password: "a brand new one" })).error,
    ).toBeNull();
    // an unknown address gets the same empty 200 (no enumeration)
    expect((await client().resetPasswordForEmail(email())).error).toBeNull();
  });
});

describe("the wire, without the client", () => {
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${gotrue.url}/auth/v1${path}`, {
      method: "POST",
      headers: { apikey: API_KEY, "content-type": "application/json", ...headers },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });

  test("errors in GoTrue's initial shape without the API-version header, and in 2024-01-01's with it", async () => {
    const legacy = await post("/token?grant_type=password", {
      email: email(),
      password: "nope-nope",
    });
    expect(legacy.status).toBe(400);
    expect(legacy.headers.get("x-sb-error-code")).toBe("invalid_credentials");
    expect(await legacy.json()).toEqual({
      code: 400,
      error_code: "invalid_credentials",
      msg: "Invalid login credentials",
    });
    const versioned = await post(
      "/token?grant_type=password",
      { email: email(), password: "nope-nope" },
      { "X-Supabase-Api-Version": "2024-01-01" },
    );
    expect(versioned.headers.get("x-supabase-api-version")).toBe("2024-01-01");
    expect(await versioned.json()).toEqual({
      code: "invalid_credentials",
      message: "Invalid login credentials",
    });
    const weak = await post("/signup", { email: email(), password: "x" });
    expect(weak.status).toBe(422);
    expect(await weak.json()).toEqual({
      code: 422,
      error_code: "weak_password",
      msg: "Password should be at least 6 characters.",
      weak_password: { reasons: ["length"] },
    });
  });

  test("bad input: not JSON, no email, a bad address, an unknown grant; never a 5xx", async () => {
    const cases: [Response, number, string, string][] = [
      [await post("/signup", "{not json"), 400, "bad_json", ""],
      [
        await post("/signup", { password: "secret-one" }),
        400,
        "validation_failed",
        "An email address is required",
      ],
      [
        await post("/signup", { email: "not-an-address", password: "secret-one" }),
        400,
        "validation_failed",
        "Unable to validate email address: invalid format",
      ],
      [
        await post("/signup", { email: email() }),
        400,
        "validation_failed",
        "Signup requires a valid password",
      ],
      [
        await post("/token?grant_type=magic", {}),
        400,
        "invalid_credentials",
        "unsupported_grant_type",
      ],
      [
        await post("/token?grant_type=refresh_token", { refresh_token: "x" }),
        400,
        "validation_failed",
        "Refresh token is not valid",
      ],
      [await post("/recover", {}), 400, "validation_failed", "Password recovery requires an email"],
      [
        await post("/logout?scope=everyone", {}),
        400,
        "validation_failed",
        'Unsupported logout scope "everyone"',
      ],
    ];
    for (const [res, status, code, msg] of cases) {
      const body = await res.json();
      expect({ status: res.status, code: body.error_code }).toEqual({ status, code });
      if (msg) expect(body.msg).toBe(msg);
    }
    const verify = await fetch(`${gotrue.url}/auth/v1/verify?token=abc`);
    expect(verify.status).toBe(400);
    expect((await verify.json()).msg).toBe("Verify requires a verification type");
  });

  test("the gateway wants this project's key; verify (the mail link) is open", async () => {
    const none = await fetch(`${gotrue.url}/auth/v1/user`);
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({
      message: "No API key found in request",
      hint: "No `apikey` request header or url param was found.",
    });
    const wrong = await post(
      "/signup",
      { email: email(), password: "secret-one" },
      { apikey: "sb_publishable_other" },
    );
    expect(wrong.status).toBe(401);
    expect((await wrong.json()).message).toBe("Invalid API key");
    const noToken = await fetch(`${gotrue.url}/auth/v1/user`, { headers: { apikey: API_KEY } });
    expect(noToken.status).toBe(401);
    expect((await noToken.json()).error_code).toBe("no_authorization");
    const forged = await fetch(`${gotrue.url}/auth/v1/user`, {
      headers: { apikey: API_KEY, authorization: "Bearer e30.e30.c2ln" },
    });
    expect(forged.status).toBe(403);
    expect((await forged.json()).error_code).toBe("bad_jwt");
  });

  test("what it does not serve is refused as GoTrue refuses it switched off; chi's 404 for the rest", async () => {
    const pkce = await post("/signup", {
      email: email(),
      password: "secret-one",
      code_challenge: "abc",
      code_challenge_method: "s256",
    });
    expect(pkce.status).toBe(404);
    expect(await pkce.json()).toEqual({
      code: 404,
      error_code: "feature_disabled",
      msg: "The PKCE flow (auth-js's default flowType, implicit, is served) is disabled on the local Auth stand-in",
    });
    const authorize = await fetch(`${gotrue.url}/auth/v1/authorize?provider=github`, {
      headers: { apikey: API_KEY },
    });
    expect(authorize.status).toBe(400);
    expect((await authorize.json()).error_code).toBe("provider_disabled");
    const nothing = await fetch(`${gotrue.url}/auth/v1/no-such-route`, {
      headers: { apikey: API_KEY },
    });
    expect(nothing.status).toBe(404);
    expect(await nothing.text()).toBe("404 page not found\n");
    const method = await fetch(`${gotrue.url}/auth/v1/signup`, { headers: { apikey: API_KEY } });
    expect(method.status).toBe(405);
  });

  test("every path, grant and verify type dev/README.md's refusal list names is a JSON 4xx saying what is disabled", async () => {
    const item = spans(refusesItem("Supabase Auth"));
    const paths = item.filter((s) => /^\/[a-z/]+$/.test(s));
    const grants = item.flatMap((s) => /^grant_type=(\w+)$/.exec(s)?.[1] ?? []);
    const types = ["invite", "email_change", "email"].filter((t) => item.includes(t));
    expect([paths.length, types.length]).toEqual([13, 3]);
    const calls: Array<[string, string, string?]> = [
      ...paths.map((p): [string, string] => ["GET", p]),
      ...[...grants, ...item.filter((s) => s === "id_token" || s === "web3")].map(
        (g): [string, string, string] => ["POST", `/token?grant_type=${g}`, "{}"],
      ),
      ...types.map((t): [string, string] => ["GET", `/verify?type=${t}&token=x`]),
      ["POST", "/verify", "{}"],
    ];
    const answers: Array<[string, number, string]> = [];
    for (const [method, path, body] of calls) {
      const res = await fetch(`${gotrue.url}/auth/v1${path}`, {
        method,
        headers: { apikey: API_KEY, "content-type": "application/json" },
        ...(body === undefined ? {} : { body }),
      });
      answers.push([`${method} ${path}`, res.status, (await res.json()).error_code]);
    }
    expect(answers.length).toBeGreaterThanOrEqual(20);
    // each code dev/README.md names is one of them, and every answer is one it names
    const codes = item.filter((s) => /^[a-z0-9_]+_(disabled|not_enabled)$/.test(s));
    expect(
      answers.filter(([, status, code]) => status < 400 || status > 499 || !codes.includes(code)),
    ).toEqual([]);
    expect([...new Set(answers.map(([, , code]) => code))].sort()).toEqual(
      codes.filter((c) => !c.startsWith("phone_")).sort(),
    );
  });

  test("through auth-js each refusal is an AuthApiError with GoTrue's status and code, not an empty retryable error", async () => {
    const auth = client();
    const cases: Array<[string, Promise<{ error: unknown }>, number, string]> = [
      [
        "phone sign-up",
        auth.signUp({ phone: "+15555550100", password: "secret-one" }),
        400,
        "phone_provider_disabled",
      ],
      [
        "phone sign-in",
        auth.signInWithPassword({ phone: "+15555550100", password: "secret-one" }),
        422,
        "phone_provider_disabled",
      ],
      ["phone OTP", auth.signInWithOtp({ phone: "+15555550100" }), 400, "phone_provider_disabled"],
      [
        "a typed code",
        auth.verifyOtp({ email: email(), token: "123456", type: "email" }),
        404,
        "feature_disabled",
      ],
      ["resend", auth.resend({ type: "signup", email: email() }), 404, "feature_disabled"],
      [
        "id token",
        auth.signInWithIdToken({ provider: "google", token: "x" }),
        400,
        "provider_disabled",
      ],
      ["PKCE code", auth.exchangeCodeForSession("abc"), 404, "feature_disabled"],
    ];
    for (const [what, call, status, code] of cases) {
      const { error } = await call;
      expect(error, what).toBeInstanceOf(AuthApiError);
      expect({
        what,
        status: (error as AuthApiError).status,
        code: (error as AuthApiError).code,
      }).toEqual({ what, status, code });
      expect((error as AuthApiError).message, what).toMatch(/disabled|not enabled|Unsupported/);
    }
  });

  test("a secret key from a browser is refused, as the platform's gateway refuses it; from a server it is a key", async () => {
    const browser = new GoTrueClient({
      url: `${secretGotrue.url}/auth/v1`,
      headers: { apikey: SECRET_KEY, "user-agent": BROWSER_UA },
      autoRefreshToken: false,
      persistSession: false,
    });
    const refused = await browser.signInWithPassword({ email: email(), password: "secret-one" });
    expect(refused.error).toBeInstanceOf(AuthApiError);
    expect(refused.error).toMatchObject({
      status: 401,
      message: "Forbidden use of secret API key in browser",
    });
    // the same request from a server: the key is good, the credentials are not
    const server = new GoTrueClient({
      url: `${secretGotrue.url}/auth/v1`,
      headers: { apikey: SECRET_KEY },
      autoRefreshToken: false,
      persistSession: false,
    });
    const answered = await server.signInWithPassword({ email: email(), password: "secret-one" });
    expect(answered.error).toMatchObject({ status: 400, code: "invalid_credentials" });
    // the publishable key from a browser is what a page uses
    const page = await fetch(`${secretGotrue.url}/auth/v1/user`, {
      headers: { apikey: API_KEY, "user-agent": BROWSER_UA },
    });
    expect((await page.json()).error_code).toBe("no_authorization");
  });

  test("a browser's preflight is answered for any origin, with the API-version header exposed", async () => {
    const res = await fetch(`${gotrue.url}/auth/v1/token?grant_type=password`, {
      method: "OPTIONS",
      headers: {
        origin: SITE,
        "access-control-request-method": "POST",
        "access-control-request-headers": "apikey, content-type, x-supabase-api-version",
      },
    });
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(SITE);
    expect(res.headers.get("access-control-allow-headers")).toBe(
      "apikey, content-type, x-supabase-api-version",
    );
    const real = await post("/recover", { email: email() }, { origin: SITE });
    expect(real.headers.get("access-control-expose-headers")).toContain("X-Supabase-Api-Version");
  });

  test("what GoTrue keeps beside auth.users is closed to the API roles", async () => {
    const { rows } = await admin.query<{ role: string; usage: boolean }>(
      `select r as role, has_schema_privilege(r, 'dev_auth', 'USAGE') as usage
         from unnest(array['anon', 'authenticated']) r`,
    );
    expect(rows).toEqual([
      { role: "anon", usage: false },
      { role: "authenticated", usage: false },
    ]);
    const hashes = await admin.query<{ encrypted_password: string }>(
      "select encrypted_password from dev_auth.accounts limit 1",
    );
    expect(hashes.rows[0]?.encrypted_password).toMatch(/^scrypt\$/);
  });
});

describe("the mailbox", () => {
  test("JSON and an HTML page with the links, only at its own loopback address", async () => {
    const address = email();
    await client().signUp({ email: address, password: "secret-one" });
    const json = await fetch(`${gotrue.url}/__mail/messages?to=${encodeURIComponent(address)}`);
    const { messages } = await json.json();
    expect(messages).toHaveLength(1);
    expect(messages[0]).toMatchObject({ to: address, subject: "Confirm Your Signup" });
    const html = await (await fetch(`${gotrue.url}/__mail`)).text();
    expect(html).toContain(messages[0].link.replaceAll("&", "&amp;"));
    // fetch will not send another Host; node:http will (a rebound DNS name's request)
    const status = await new Promise<number | undefined>((resolve, reject) => {
      const req = httpRequest(
        `${gotrue.url}/__mail`,
        { headers: { host: `evil.example:${gotrue.port}` } },
        (res) => {
          res.resume();
          resolve(res.statusCode);
        },
      );
      req.on("error", reject);
      req.end();
    });
    expect(status).toBe(403);
  });
});
