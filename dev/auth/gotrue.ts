/**
 * A local stand-in for Supabase Auth (GoTrue) for email users: exactly what the page uses,
 * answered as supabase/auth's handlers answer (internal/api/signup.go, verify.go, token.go,
 * token_refresh.go, magic_link.go, otp.go, recover.go, user.go, logout.go, auth.go, mail.go,
 * errors.go, apierrors/errorcode.go), behind the gateway's `apikey` check.
 *
 *   POST /auth/v1/signup        confirmations on: 200 with the user and no session, a mail sent
 *   GET  /auth/v1/verify        the emailed link: 303 to redirect_to with the session in the
 *                               fragment (the implicit flow, auth-js's default `flowType`)
 *   POST /auth/v1/token?grant_type=password | refresh_token
 *   POST /auth/v1/otp           magic link (signs the address up first when it is new)
 *   POST /auth/v1/recover       password reset link (type=recovery)
 *   GET  /auth/v1/user, PUT /auth/v1/user (password, user_metadata)
 *   POST /auth/v1/logout?scope=global|local|others
 *
 * Errors carry GoTrue's two shapes: `{"code": 400, "error_code": "…", "msg": "…"}` and, when the
 * request sends `X-Supabase-Api-Version: 2024-01-01` (auth-js does), `{"code": "…", "message":
 * "…"}` with that header echoed. GoTrue routes it does not serve answer 501 in the first shape;
 * any other path chi's 404 (`404 page not found`). PKCE (`code_challenge`) is refused with 501.
 *
 * The access token is signed by the caller's `sign` (the project's ES256 key, or a test's) and
 * checked by its `verify`: no key lives here. Users: gotrue-store.ts. Mail: mailbox.ts.
 * Shares no code with the app.
 */
import {
  createHash,
  randomBytes,
  randomInt,
  randomUUID,
  scrypt,
  timingSafeEqual,
} from "node:crypto";
import { promisify } from "node:util";
import { type Account, createStore, type Db } from "./gotrue-store.ts";
import type { Mailbox } from "./mailbox.ts";

/** The claims GoTrue puts in an access token (internal/tokens/service.go AccessTokenClaims). */
export interface GotrueClaims {
  iss: string;
  sub: string;
  aud: "authenticated";
  exp: number;
  iat: number;
  email: string;
  phone: string;
  app_metadata: { provider: "email"; providers: ["email"] };
  user_metadata: Record<string, unknown>;
  role: "authenticated";
  aal: "aal1";
  amr: { method: string; timestamp: number }[];
  session_id: string;
  is_anonymous: false;
}

export interface GotrueOptions {
  db: Db;
  mailbox: Mailbox;
  /** The URL the browser reaches Auth at: the mail links hang off it. */
  publicUrl: string;
  /** The tokens' `iss`. @default `${publicUrl}/auth/v1` (GoTrue's: `${SUPABASE_URL}/auth/v1`) */
  issuer?: string;
  /** Where links land when `redirect_to` is missing or not allowed (config.toml `site_url`). */
  siteUrl: string;
  /** Further allowed redirect origins (`additional_redirect_urls`). */
  redirectUrls?: string[];
  /** The keys the gateway accepts in `apikey` (publishable/anon and secret/service_role). */
  apiKeys: () => ReadonlySet<string>;
  /** Signs an access token with the project's current key. */
  sign(claims: GotrueClaims): Promise<string>;
  /** Verifies an access token's signature and expiry; throws when it is not good. */
  verify(token: string): Promise<Record<string, unknown>>;
  /** `[auth.email] enable_confirmations = false` → true. @default false */
  autoconfirm?: boolean;
  /** @default 6 (GoTrue's and the CLI's minimum_password_length) */
  minPasswordLength?: number;
  /** Per-address wait between two mails of one kind (`smtp.max_frequency`). @default 60 */
  maxFrequencySeconds?: number;
  /** How long an emailed link is good (`mailer_otp_exp`). @default 3600 */
  otpExpirySeconds?: number;
  /** @default 3600 (config.toml `jwt_expiry`) */
  jwtExpirySeconds?: number;
  now?: () => Date;
}

class GotrueError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reasons?: string[],
  ) {
    super(message);
  }
}

const API_VERSION = "X-Supabase-Api-Version";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const REFRESH_TOKEN = /^[a-z0-9]{12}$/;
/** Paths GoTrue serves that this stand-in does not: refused with 501, not chi's 404. */
const NOT_SERVED = new Set([
  "/settings",
  "/authorize",
  "/callback",
  "/magiclink",
  "/invite",
  "/resend",
  "/reauthenticate",
  "/sso",
  "/factors",
  "/admin",
  "/user/identities",
  "/health",
  "/oauth",
]);
const ROUTES: Record<string, string[]> = {
  "/signup": ["POST"],
  "/verify": ["GET"],
  "/token": ["POST"],
  "/otp": ["POST"],
  "/recover": ["POST"],
  "/user": ["GET", "PUT"],
  "/logout": ["POST"],
};
/** supabase/auth's default mail templates (internal/mailer/template.go), with `{{ .ConfirmationURL }}`. */
const TEMPLATES = {
  signup: [
    "Confirm Your Signup",
    '<h2>Confirm your signup</h2><p>Follow this link to confirm your user:</p><p><a href="%s">Confirm your mail</a></p>',
  ],
  magiclink: [
    "Your Magic Link",
    '<h2>Magic Link</h2><p>Follow this link to login:</p><p><a href="%s">Log In</a></p>',
  ],
  recovery: [
    "Reset Your Password",
    '<h2>Reset Password</h2><p>Follow this link to reset the password for your user:</p><p><a href="%s">Reset Password</a></p>',
  ],
} as const;

const scryptAsync = promisify(scrypt) as (p: string, s: Buffer, n: number) => Promise<Buffer>;

async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  return `scrypt$${salt.toString("base64")}$${(await scryptAsync(password, salt, 32)).toString("base64")}`;
}

async function passwordMatches(password: string, stored: string): Promise<boolean> {
  const [, salt = "", hash = ""] = stored.split("$");
  const want = Buffer.from(hash, "base64");
  const got = await scryptAsync(password, Buffer.from(salt, "base64"), want.length || 32);
  return want.length === got.length && timingSafeEqual(want, got);
}

/** GoTrue's token hash: hex SHA-224 of address + one-time code (crypto.GenerateTokenHash). */
const tokenHash = (email: string, otp: string) =>
  createHash("sha224")
    .update(email + otp)
    .digest("hex");

/** Twelve lower-case letters and digits: GoTrue's (legacy-format) refresh token. */
function newRefreshToken(): string {
  const abc = "abcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from({ length: 12 }, () => abc[randomInt(abc.length)]).join("");
}

const iso = (d: Date | null) => (d ? d.toISOString() : undefined);

/** A user as GoTrue's models.User marshals it (omitempty fields left out when unset). */
function userJson(a: Account) {
  const identity = {
    identity_id: a.id,
    id: a.id,
    user_id: a.id,
    identity_data: {
      email: a.email,
      email_verified: a.email_confirmed_at !== null,
      phone_verified: false,
      sub: a.id,
    },
    provider: "email",
    last_sign_in_at: iso(a.last_sign_in_at) ?? iso(a.created_at),
    created_at: iso(a.created_at),
    updated_at: iso(a.updated_at),
    email: a.email,
  };
  return {
    id: a.id,
    aud: "authenticated",
    role: "authenticated",
    email: a.email,
    email_confirmed_at: iso(a.email_confirmed_at),
    phone: "",
    confirmation_sent_at: iso(a.confirmation_sent_at),
    confirmed_at: iso(a.email_confirmed_at),
    recovery_sent_at: iso(a.recovery_sent_at),
    last_sign_in_at: iso(a.last_sign_in_at),
    app_metadata: { provider: "email", providers: ["email"] },
    user_metadata: a.user_metadata,
    identities: [identity],
    created_at: iso(a.created_at),
    updated_at: iso(a.updated_at),
    is_anonymous: false,
  };
}

export function createGotrue(o: GotrueOptions) {
  const store = createStore(o.db);
  const now = o.now ?? (() => new Date());
  const base = o.publicUrl.replace(/\/+$/, "");
  const minLength = o.minPasswordLength ?? 6;
  const frequencyMs = (o.maxFrequencySeconds ?? 60) * 1000;
  const otpExpiryMs = (o.otpExpirySeconds ?? 3600) * 1000;
  const jwtExpiry = o.jwtExpirySeconds ?? 3600;
  const allowed = [o.siteUrl, ...(o.redirectUrls ?? [])].map((u) => new URL(u).origin);

  const bad = (code: string, msg: string) => new GotrueError(400, code, msg);

  function checkPassword(password: string) {
    if (password.length < minLength)
      throw new GotrueError(
        422,
        "weak_password",
        `Password should be at least ${minLength} characters.`,
        ["length"],
      );
  }

  function validateEmail(value: unknown): string {
    const email = typeof value === "string" ? value.trim() : "";
    if (!email) throw bad("validation_failed", "An email address is required");
    if (email.length > 255) throw bad("validation_failed", "An email address is too long");
    if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email))
      throw bad("validation_failed", "Unable to validate email address: invalid format");
    return email.toLowerCase();
  }

  /** utilities.GetReferrer: `redirect_to` when it is the site or an allowed URL, else the site. */
  function redirectTo(url: URL): string {
    const asked = url.searchParams.get("redirect_to");
    try {
      if (asked && allowed.includes(new URL(asked).origin)) return asked;
    } catch {
      // not a URL: the site
    }
    return o.siteUrl;
  }

  /** Sends one kind of link, unless one went to this address within `max_frequency`. */
  async function mail(a: Account, type: keyof typeof TEMPLATES, redirect: string) {
    const kind = type === "signup" ? "confirmation" : "recovery";
    const sentAt = kind === "confirmation" ? a.confirmation_sent_at : a.recovery_sent_at;
    const t = now();
    if (sentAt && sentAt.getTime() + frequencyMs > t.getTime()) {
      const left = Math.floor((sentAt.getTime() + frequencyMs - t.getTime()) / 1000);
      throw new GotrueError(
        429,
        "over_email_send_rate_limit",
        `For security purposes, you can only request this after ${left} seconds.`,
      );
    }
    const otp = String(randomInt(1_000_000)).padStart(6, "0");
    const hash = tokenHash(a.email, otp);
    await store.setToken(a.id, kind, hash, t);
    const link = `${base}/auth/v1/verify?${new URLSearchParams({ token: hash, type, redirect_to: redirect })}`;
    const [subject, html] = TEMPLATES[type];
    o.mailbox.send({
      to: a.email,
      subject,
      html: html.replace("%s", link.replaceAll("&", "&amp;")),
      link,
      otp,
    });
  }

  async function session(a: Account, method: "password" | "otp") {
    const sessionId = randomUUID();
    const refresh = newRefreshToken();
    const t = now();
    const signedIn = await store.startSession(a.id, sessionId, method, refresh, t);
    return tokenResponse(signedIn, sessionId, refresh, method, t);
  }

  async function tokenResponse(
    a: Account,
    sessionId: string,
    refresh: string,
    method: string,
    t: Date,
  ) {
    const iat = Math.floor(t.getTime() / 1000);
    const exp = iat + jwtExpiry;
    const accessToken = await o.sign({
      iss: o.issuer ?? `${base}/auth/v1`,
      sub: a.id,
      aud: "authenticated",
      exp,
      iat,
      email: a.email,
      phone: "",
      app_metadata: { provider: "email", providers: ["email"] },
      user_metadata: a.user_metadata,
      role: "authenticated",
      aal: "aal1",
      amr: [{ method, timestamp: iat }],
      session_id: sessionId,
      is_anonymous: false,
    });
    return {
      access_token: accessToken,
      token_type: "bearer",
      expires_in: jwtExpiry,
      expires_at: exp,
      refresh_token: refresh,
      user: userJson(a),
    };
  }

  /** auth.go requireAuthentication + maybeLoadUserOrSession. */
  async function authenticated(request: Request) {
    const header = request.headers.get("authorization") ?? "";
    const token = /^Bearer (\S+)$/i.exec(header)?.[1];
    if (!token)
      throw new GotrueError(401, "no_authorization", "This endpoint requires a valid Bearer token");
    let claims: Record<string, unknown>;
    try {
      claims = await o.verify(token);
    } catch (e) {
      const why =
        (e as { code?: string }).code === "ERR_JWT_EXPIRED"
          ? "token has invalid claims: token is expired"
          : "signature is invalid";
      throw new GotrueError(
        403,
        "bad_jwt",
        `invalid JWT: unable to parse or verify signature, ${why}`,
      );
    }
    const sub = typeof claims.sub === "string" ? claims.sub : "";
    if (!sub) throw new GotrueError(403, "bad_jwt", "invalid claim: missing sub claim");
    if (!UUID.test(sub)) throw bad("bad_jwt", "invalid claim: sub claim must be a UUID");
    const account = await store.byId(sub);
    if (!account)
      throw new GotrueError(403, "user_not_found", "User from sub claim in JWT does not exist");
    const sessionId = typeof claims.session_id === "string" ? claims.session_id : "";
    if (!UUID.test(sessionId) || !(await store.sessionExists(sessionId)))
      throw new GotrueError(
        403,
        "session_not_found",
        "Session from session_id claim in JWT does not exist",
      );
    return { account, sessionId };
  }

  async function body(request: Request): Promise<Record<string, unknown>> {
    const text = await request.text();
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw bad("bad_json", `Could not parse request body as JSON: ${(e as Error).message}`);
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed))
      throw bad("bad_json", "Could not parse request body as JSON: not an object");
    if (
      typeof (parsed as { code_challenge?: unknown }).code_challenge === "string" &&
      (parsed as { code_challenge: string }).code_challenge
    )
      throw new GotrueError(
        501,
        "not_implemented",
        "The PKCE flow is not served by the local Auth stand-in (auth-js's default flowType is implicit)",
      );
    return parsed as Record<string, unknown>;
  }

  const metadataOf = (v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

  /** signup.go: a new user, or the existing one again; confirmation mail unless autoconfirm. */
  async function signup(
    email: string,
    password: string,
    data: Record<string, unknown>,
    redirect: string,
  ) {
    let a = await store.byEmail(email);
    if (a?.email_confirmed_at) {
      if (o.autoconfirm)
        throw new GotrueError(422, "user_already_exists", "User already registered");
      // sanitizeUser: a made-up user with no identities, so the answer does not tell who is registered
      const t = now().toISOString();
      return {
        ...userJson(a),
        id: randomUUID(),
        role: "",
        email_confirmed_at: undefined,
        confirmed_at: undefined,
        last_sign_in_at: undefined,
        recovery_sent_at: undefined,
        confirmation_sent_at: t,
        created_at: t,
        updated_at: t,
        user_metadata: data,
        identities: [],
      };
    }
    a ??= await store.create({
      id: randomUUID(),
      email,
      hash: await hashPassword(password),
      metadata: data,
      now: now(),
    });
    if (o.autoconfirm) {
      const confirmed = (await store.spendToken(a.id, "confirmation", now())) as Account;
      return session(confirmed, "password");
    }
    await mail(a, "signup", redirect);
    return userJson((await store.byId(a.id)) as Account);
  }

  const routes: Record<string, (request: Request, url: URL) => Promise<Response>> = {
    "POST /signup": async (request, url) => {
      const p = await body(request);
      if (typeof p.phone === "string" && p.phone)
        throw new GotrueError(
          501,
          "not_implemented",
          "Phone sign-up is not served by the local Auth stand-in",
        );
      const password = typeof p.password === "string" ? p.password : "";
      if (!password) throw bad("validation_failed", "Signup requires a valid password");
      checkPassword(password);
      const email = validateEmail(p.email);
      return Response.json(await signup(email, password, metadataOf(p.data), redirectTo(url)));
    },

    "GET /verify": async (_request, url) => {
      const type = url.searchParams.get("type") ?? "";
      const token = url.searchParams.get("token") ?? "";
      if (!type) throw bad("validation_failed", "Verify requires a verification type");
      if (!token) throw bad("validation_failed", "Verify requires a token or a token hash");
      if (type === "invite" || type === "email_change" || type === "email")
        throw new GotrueError(
          501,
          "not_implemented",
          `Verification type ${type} is not served by the local Auth stand-in`,
        );
      if (type !== "signup" && type !== "recovery" && type !== "magiclink")
        throw bad("validation_failed", "Invalid email verification type");
      const redirect = redirectTo(url);
      const kind = type === "signup" ? "confirmation" : "recovery";
      const found = await store.byToken(
        kind === "confirmation" ? "confirmation_token" : "recovery_token",
        token,
      );
      const sentAt =
        found && (kind === "confirmation" ? found.confirmation_sent_at : found.recovery_sent_at);
      if (!found || !sentAt || sentAt.getTime() + otpExpiryMs < now().getTime()) {
        // prepErrorRedirectURL: the error in the fragment (implicit flow), 403 → access_denied
        const to = new URL(redirect);
        to.hash = new URLSearchParams({
          error: "access_denied",
          error_code: "otp_expired",
          error_description: "Email link is invalid or has expired",
          sb: "",
        }).toString();
        return new Response(null, { status: 303, headers: { location: to.toString() } });
      }
      const spent = (await store.spendToken(found.id, kind, now())) as Account;
      const t = await session(spent, "otp");
      // AccessTokenResponse.AsRedirectURL: url.Values.Encode, keys sorted
      const q = new URLSearchParams(
        Object.entries({
          access_token: t.access_token,
          expires_at: String(t.expires_at),
          expires_in: String(t.expires_in),
          refresh_token: t.refresh_token,
          sb: "",
          token_type: t.token_type,
          type,
        }),
      );
      return new Response(null, { status: 303, headers: { location: `${redirect}#${q}` } });
    },

    "POST /token": async (request, url) => {
      const grant = url.searchParams.get("grant_type") ?? "";
      if (grant === "pkce" || grant === "id_token" || grant === "web3")
        throw new GotrueError(
          501,
          "not_implemented",
          `grant_type=${grant} is not served by the local Auth stand-in`,
        );
      if (grant !== "password" && grant !== "refresh_token")
        throw bad("invalid_credentials", "unsupported_grant_type");
      const p = await body(request);
      if (grant === "refresh_token") {
        const token = typeof p.refresh_token === "string" ? p.refresh_token : "";
        if (!REFRESH_TOKEN.test(token))
          throw bad("validation_failed", "Refresh token is not valid");
        const next = newRefreshToken();
        const t = now();
        const rotated = await store.rotate(token, next, t);
        if (!rotated)
          throw bad("refresh_token_not_found", "Invalid Refresh Token: Refresh Token Not Found");
        if (rotated === "revoked")
          throw bad("refresh_token_already_used", "Invalid Refresh Token: Already Used");
        const a = (await store.byId(rotated.user_id)) as Account;
        return Response.json(
          await tokenResponse(a, rotated.session_id, next, rotated.amr_method, t),
        );
      }
      if (typeof p.phone === "string" && p.phone)
        throw new GotrueError(
          501,
          "not_implemented",
          "Phone sign-in is not served by the local Auth stand-in",
        );
      if (typeof p.email !== "string" || !p.email)
        throw bad("validation_failed", "missing email or phone");
      const a = await store.byEmail(p.email.trim().toLowerCase());
      const password = typeof p.password === "string" ? p.password : "";
      if (!a || !(await passwordMatches(password, a.encrypted_password)))
        throw bad("invalid_credentials", "Invalid login credentials");
      if (!a.email_confirmed_at) throw bad("email_not_confirmed", "Email not confirmed");
      return Response.json(await session(a, "password"));
    },

    "POST /otp": async (request, url) => {
      const p = await body(request);
      if (typeof p.phone === "string" && p.phone)
        throw new GotrueError(
          501,
          "not_implemented",
          "Phone OTP is not served by the local Auth stand-in",
        );
      if (typeof p.email !== "string" || !p.email)
        throw bad("validation_failed", "One of email or phone must be set");
      const email = validateEmail(p.email);
      const redirect = redirectTo(url);
      const a = await store.byEmail(email);
      if (!a?.email_confirmed_at) {
        if (!a && p.create_user === false)
          throw new GotrueError(422, "otp_disabled", "Signups not allowed for otp");
        // magic_link.go: a new address signs up with a random password (the mail confirms it)
        await signup(email, randomBytes(24).toString("base64url"), metadataOf(p.data), redirect);
        return Response.json({});
      }
      await mail(a, "magiclink", redirect);
      return Response.json({});
    },

    "POST /recover": async (request, url) => {
      const p = await body(request);
      if (typeof p.email !== "string" || !p.email)
        throw bad("validation_failed", "Password recovery requires an email");
      const a = await store.byEmail(validateEmail(p.email));
      if (a) await mail(a, "recovery", redirectTo(url));
      return Response.json({});
    },

    "GET /user": async (request) => {
      const { account } = await authenticated(request);
      return Response.json(userJson(account));
    },

    "PUT /user": async (request) => {
      const { account, sessionId } = await authenticated(request);
      const p = await body(request);
      if (typeof p.email === "string" && p.email && p.email.toLowerCase() !== account.email)
        throw new GotrueError(
          501,
          "not_implemented",
          "Changing the email is not served by the local Auth stand-in",
        );
      if (typeof p.phone === "string" && p.phone)
        throw new GotrueError(
          501,
          "not_implemented",
          "Phone numbers are not served by the local Auth stand-in",
        );
      let hash: string | undefined;
      if (typeof p.password === "string") {
        checkPassword(p.password);
        if (await passwordMatches(p.password, account.encrypted_password))
          throw new GotrueError(
            422,
            "same_password",
            "New password should be different from the old password.",
          );
        hash = await hashPassword(p.password);
      }
      let metadata: Record<string, unknown> | undefined;
      if (p.data && typeof p.data === "object") {
        // UpdateUserMetaData: merge, a null value removes the key
        metadata = { ...account.user_metadata };
        for (const [k, v] of Object.entries(p.data)) {
          if (v === null) delete metadata[k];
          else metadata[k] = v;
        }
      }
      const updated = (await store.update(
        account.id,
        { ...(hash ? { hash } : {}), ...(metadata ? { metadata } : {}) },
        now(),
      )) as Account;
      // a new password ends the user's other sessions (models.User.UpdatePassword)
      if (hash) await store.endSessions(account.id, sessionId, "others");
      return Response.json(userJson(updated));
    },

    "POST /logout": async (request, url) => {
      const scope = url.searchParams.get("scope") ?? "global";
      if (scope !== "global" && scope !== "local" && scope !== "others")
        throw bad("validation_failed", `Unsupported logout scope "${scope}"`);
      const { account, sessionId } = await authenticated(request);
      await store.endSessions(account.id, sessionId, scope);
      return new Response(null, { status: 204 });
    },
  };

  /** The gateway in front: the key check (verify is an open route there, as mail links carry no key). */
  function gateway(request: Request, path: string): Response | undefined {
    if (path === "/verify") return undefined;
    const key = request.headers.get("apikey") ?? new URL(request.url).searchParams.get("apikey");
    if (!key)
      return Response.json(
        {
          message: "No API key found in request",
          hint: "No `apikey` request header or url param was found.",
        },
        { status: 401 },
      );
    if (!o.apiKeys().has(key))
      return Response.json(
        {
          message: "Invalid API key",
          hint: "Double check your Supabase `anon` or `service_role` API key.",
        },
        { status: 401 },
      );
    return undefined;
  }

  function errorResponse(e: GotrueError, request: Request): Response {
    const asked = request.headers.get(API_VERSION) ?? "";
    const versioned = /^\d{4}-\d{2}-\d{2}$/.test(asked) && asked >= "2024-01-01";
    const extra = e.reasons ? { weak_password: { reasons: e.reasons } } : {};
    const headers: Record<string, string> = versioned ? { [API_VERSION]: "2024-01-01" } : {};
    if (!versioned || !e.reasons) headers["x-sb-error-code"] = e.code;
    const payload = versioned
      ? { code: e.code, message: e.message, ...extra }
      : { code: e.status, error_code: e.code, msg: e.message, ...extra };
    return Response.json(payload, { status: e.status, headers });
  }

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname.replace(/^\/auth\/v1/, "").replace(/\/+$/, "") || "/";
    const refused = gateway(request, path);
    if (refused) return refused;
    const methods = ROUTES[path];
    if (!methods) {
      const top = `/${path.split("/")[1] ?? ""}`;
      if (NOT_SERVED.has(path) || NOT_SERVED.has(top) || path === "/verify")
        return errorResponse(
          new GotrueError(
            501,
            "not_implemented",
            `${request.method} /auth/v1${path} is not served by the local Auth stand-in`,
          ),
          request,
        );
      return new Response("404 page not found\n", {
        status: 404,
        headers: { "content-type": "text/plain; charset=utf-8" },
      });
    }
    const handler = routes[`${request.method} ${path}`];
    if (!handler) {
      if (path === "/verify" && request.method === "POST")
        return errorResponse(
          new GotrueError(
            501,
            "not_implemented",
            "POST /auth/v1/verify (a typed code) is not served by the local Auth stand-in",
          ),
          request,
        );
      return new Response(null, { status: 405 });
    }
    await store.ready();
    try {
      return await handler(request, url);
    } catch (e) {
      if (e instanceof GotrueError) return errorResponse(e, request);
      throw e;
    }
  }

  return {
    /** Answers one request under `/auth/v1`, CORS included (rs/cors in api.go: any origin, credentials). */
    async handle(request: Request): Promise<Response> {
      const origin = request.headers.get("origin");
      const cors: Record<string, string> = origin
        ? {
            "access-control-allow-origin": origin,
            "access-control-allow-credentials": "true",
            vary: "Origin",
            "access-control-expose-headers": `X-Total-Count, Link, ${API_VERSION}`,
          }
        : {};
      if (
        request.method === "OPTIONS" &&
        origin &&
        request.headers.get("access-control-request-method")
      ) {
        return new Response(null, {
          status: 204,
          headers: {
            ...cors,
            "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE",
            "access-control-allow-headers":
              request.headers.get("access-control-request-headers") ?? "",
          },
        });
      }
      const response = await route(request);
      const headers = new Headers(response.headers);
      for (const [k, v] of Object.entries(cors)) headers.set(k, v);
      headers.set("cache-control", "no-store");
      return new Response(response.body, { status: response.status, headers });
    },
    /** Creates the stand-in's schema now (else on the first request). */
    ready: () => store.ready(),
  };
}

export type Gotrue = ReturnType<typeof createGotrue>;
