/**
 * What every GoTrue flow (gotrue-signup.ts, gotrue-token.ts, gotrue-links.ts, gotrue-user.ts)
 * shares: the options, GoTrue's error, the user as GoTrue marshals it, password hashing, the
 * mail of a link, a session's tokens, the bearer check and the request body, as supabase/auth's
 * handlers have them (internal/api/auth.go, mail.go, errors.go, internal/models/user.go).
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
  app_metadata: Record<string, unknown>;
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
  /**
   * The keys the gateway turns into a `service_role` token for Auth (the secret key, or the
   * legacy service_role key): a Bearer equal to one of them is an admin. @default none
   */
  adminKeys?: () => ReadonlySet<string>;
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
  /**
   * How long a rotated refresh token may still be used (config.toml
   * `refresh_token_reuse_interval`, GOTRUE_SECURITY_REFRESH_TOKEN_REUSE_INTERVAL). @default 10
   */
  refreshTokenReuseIntervalSeconds?: number;
  now?: () => Date;
}

export class GotrueError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly reasons?: string[],
  ) {
    super(message);
  }
}

/**
 * What GoTrue serves and the stand-in does not is refused as GoTrue refuses a feature the
 * project has switched off: that check's status and `error_code` (internal/api/*.go), a message
 * saying what is off. Never a 5xx: auth-js takes any 5xx for a network failure and hands the
 * caller an empty retryable error (`AuthRetryableFetchError("{}")`), which says nothing.
 */
export const disabled = (status: number, code: string, message: string) =>
  new GotrueError(status, code, message);

/** A feature with no switch of its own: 404 `feature_disabled`, as GoTrue's middleware answers. */
export const featureDisabled = (what: string) =>
  disabled(404, "feature_disabled", `${what} is disabled on the local Auth stand-in`);

/** The phone provider is off: each flow's own refusal (signup.go, token.go, otp.go). */
export const PHONE_DISABLED = {
  signup: () => disabled(400, "phone_provider_disabled", "Phone signups are disabled"),
  login: () => disabled(422, "phone_provider_disabled", "Phone logins are disabled"),
  otp: () => disabled(400, "phone_provider_disabled", "Unsupported phone provider"),
};

/** Phone users are not served: a body with a `phone` gets `refusal`. */
export function refusePhone(p: Record<string, unknown>, refusal: () => GotrueError): void {
  if (typeof p.phone === "string" && p.phone) throw refusal();
}

export const API_VERSION = "X-Supabase-Api-Version";
export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const REFRESH_TOKEN = /^[a-z0-9]{12}$/;

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

export async function hashPassword(password: string): Promise<string> {
  const salt = randomBytes(16);
  return `scrypt$${salt.toString("base64")}$${(await scryptAsync(password, salt, 32)).toString("base64")}`;
}

export async function passwordMatches(password: string, stored: string): Promise<boolean> {
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
export function newRefreshToken(): string {
  const abc = "abcdefghijklmnopqrstuvwxyz0123456789";
  return Array.from({ length: 12 }, () => abc[randomInt(abc.length)]).join("");
}

const iso = (d: Date | null) => (d ? d.toISOString() : undefined);

/** A user as GoTrue's models.User marshals it (omitempty fields left out when unset). */
export function userJson(a: Account) {
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
    app_metadata: a.app_metadata,
    user_metadata: a.user_metadata,
    identities: [identity],
    created_at: iso(a.created_at),
    updated_at: iso(a.updated_at),
    is_anonymous: false,
  };
}

/** A 400 refusal, as most of GoTrue's are. */
const bad = (code: string, msg: string) => new GotrueError(400, code, msg);

/** An address as GoTrue accepts one, lowercased. */
function validateEmail(value: unknown): string {
  const email = typeof value === "string" ? value.trim() : "";
  if (!email) throw bad("validation_failed", "An email address is required");
  if (email.length > 255) throw bad("validation_failed", "An email address is too long");
  if (!/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email))
    throw bad("validation_failed", "Unable to validate email address: invalid format");
  return email.toLowerCase();
}

/** The request's JSON object; a PKCE request is refused (the implicit flow is served). */
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
    throw featureDisabled("The PKCE flow (auth-js's default flowType, implicit, is served)");
  return parsed as Record<string, unknown>;
}

/** A metadata argument: an object, else none. */
const metadataOf = (v: unknown) =>
  v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};

/** One flow's routes: `"METHOD /path"` → handler. */
export type Routes = Record<string, (request: Request, url: URL) => Promise<Response>>;

/** The per-instance pieces the flows share, made once by createGotrue. */
export function createContext(o: GotrueOptions) {
  const store = createStore(o.db);
  const now = o.now ?? (() => new Date());
  const base = o.publicUrl.replace(/\/+$/, "");
  const minLength = o.minPasswordLength ?? 6;
  const frequencyMs = (o.maxFrequencySeconds ?? 60) * 1000;
  const otpExpiryMs = (o.otpExpirySeconds ?? 3600) * 1000;
  const jwtExpiry = o.jwtExpirySeconds ?? 3600;
  const allowed = [o.siteUrl, ...(o.redirectUrls ?? [])].map((u) => new URL(u).origin);

  function checkPassword(password: string) {
    if (password.length < minLength)
      throw new GotrueError(
        422,
        "weak_password",
        `Password should be at least ${minLength} characters.`,
        ["length"],
      );
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
      app_metadata: a.app_metadata,
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

  return {
    // the module's helpers too, so a flow takes everything from its context
    ...{ hashPassword, passwordMatches, newRefreshToken, userJson, featureDisabled, refusePhone },
    o,
    store,
    now,
    base,
    otpExpiryMs,
    bad,
    checkPassword,
    validateEmail,
    redirectTo,
    mail,
    session,
    tokenResponse,
    authenticated,
    body,
    metadataOf,
  };
}

export type Context = ReturnType<typeof createContext>;
