// @ts-check
/**
 * Who the page is signed in as, and the access token the API needs.
 *
 * - Supabase Auth (GoTrue), through the official client, auth-js (bundled into
 *   `vendor/auth-js.js`, served from this origin): sign-up with email confirmation, sign-in by
 *   password or magic link, password reset, sign-out. Its default implicit flow: an emailed link
 *   lands back on this page with the session in the URL fragment, which auth-js reads (and
 *   clears) when it starts. It refreshes the token before it expires. The publishable (or
 *   legacy anon) key is the only key the browser ever holds.
 * - Under `npm run dev`: the dev server's `POST /__dev/sign-in` mints a local token (that route
 *   does not exist in a deployment); "refresh" signs in again as the same user.
 *
 * Sessions live in sessionStorage (this tab only, gone when it closes): auth-js's own under
 * `quota-jobs.supabase`, and the page's summary under `quota-jobs.session`. Another tab's
 * sign-in as someone else, which auth-js announces to every tab, does not change this one's.
 */
import { narrowConnectSrc } from "./csp.js";
import {
  GoTrueClient,
  isAuthApiError,
  isAuthRetryableFetchError,
  isAuthWeakPasswordError,
} from "./vendor/auth-js.js";

/**
 * @typedef {object} Session
 * @property {"dev" | "supabase"} kind
 * @property {string} userId
 * @property {string} accessToken
 * @property {string | null} refreshToken
 * @property {number} expiresAt  epoch ms
 * @property {string | null} email
 * @property {string | null} plan  the plan the dev sign-in chose (dev only)
 */

/** @typedef {{ url: string, anonKey: string }} SupabaseAuthConfig */

export const STORAGE_KEY = "quota-jobs.session";
export const SUPABASE_STORAGE_KEY = "quota-jobs.supabase";
/** Dev sessions: refresh this long before the token expires (auth-js keeps its own margin). */
export const REFRESH_MARGIN_MS = 60_000;

/**
 * @typedef {"invalid_credentials" | "email_not_confirmed" | "rate_limited" | "weak_password"
 *   | "already_registered" | "same_password" | "link_expired" | "invalid_email" | "network"
 *   | "unavailable"} AuthErrorCode
 */

export class AuthError extends Error {
  /** @param {AuthErrorCode} code */
  constructor(code) {
    super(code);
    this.name = "AuthError";
    this.code = code;
  }
}

/** @param {AuthErrorCode} code */
export function authErrorSentence(code) {
  switch (code) {
    case "invalid_credentials":
      return "That email and password do not match an account.";
    case "email_not_confirmed":
      return "Confirm your email address first: open the link we sent you.";
    case "rate_limited":
      return "Too many attempts. Wait a minute and try again.";
    case "weak_password":
      return "Choose a longer password: at least 6 characters.";
    case "already_registered":
      return "That email address already has an account. Sign in, or reset your password.";
    case "same_password":
      return "Choose a password different from your current one.";
    case "link_expired":
      return "That link has expired or was already used. Ask for a new one.";
    case "invalid_email":
      return "That does not look like an email address.";
    case "network":
      return "Could not reach the sign-in service. Check your connection and try again.";
    default:
      return "Sign-in is unavailable right now. Please try again in a moment.";
  }
}

/**
 * GoTrue's `error_code`s that have a sentence of their own, as this page's codes.
 * @type {Readonly<Record<string, AuthErrorCode>>}
 */
const AUTH_API_CODES = {
  invalid_credentials: "invalid_credentials",
  email_not_confirmed: "email_not_confirmed",
  user_already_exists: "already_registered",
  same_password: "same_password",
  otp_expired: "link_expired",
  validation_failed: "invalid_email",
};

/**
 * What GoTrue's answer means for the person, from auth-js's error (its `code` is GoTrue's
 * `error_code`).
 * @param {unknown} error
 * @returns {AuthError}
 */
export function fromAuthJs(error) {
  if (error instanceof AuthError) return error;
  if (isAuthWeakPasswordError(error)) return new AuthError("weak_password");
  if (isAuthRetryableFetchError(error) && error.status === 0) return new AuthError("network");
  if (isAuthApiError(error)) {
    if (error.status === 429) return new AuthError("rate_limited");
    const code =
      error.code && Object.hasOwn(AUTH_API_CODES, error.code)
        ? AUTH_API_CODES[error.code]
        : undefined;
    if (code) return new AuthError(code);
  }
  return new AuthError("unavailable");
}

/**
 * An expiry as epoch ms, from seconds, milliseconds or an ISO string.
 * @param {unknown} value
 * @param {number} fallback
 */
export function toEpochMs(value, fallback) {
  if (typeof value === "number" && Number.isFinite(value)) {
    return value < 1e12 ? value * 1000 : value;
  }
  if (typeof value === "string") {
    const t = Date.parse(value);
    if (!Number.isNaN(t)) return t;
  }
  return fallback;
}

/**
 * A session of auth-js's as the page keeps it.
 *
 * @param {import("@supabase/auth-js").Session} s
 * @param {Session | null} before
 * @param {number} nowMs
 * @returns {Session}
 */
function sessionOf(s, before, nowMs) {
  return {
    kind: "supabase",
    userId: s.user.id,
    accessToken: s.access_token,
    refreshToken: s.refresh_token,
    expiresAt: toEpochMs(s.expires_at, nowMs + s.expires_in * 1000),
    email: s.user.email ?? before?.email ?? null,
    plan: null,
  };
}

/**
 * The session the tab kept, or null.
 *
 * @param {Pick<Storage, "getItem"> | null} storage
 * @returns {Session | null}
 */
function loadSession(storage) {
  try {
    const raw = storage?.getItem(STORAGE_KEY);
    const s = raw ? JSON.parse(raw) : null;
    return s && typeof s.accessToken === "string" && typeof s.userId === "string" ? s : null;
  } catch {
    return null;
  }
}

/**
 * A dev session from the local app server's dev-only sign-in.
 *
 * @param {typeof fetch} fetchImpl
 * @param {number} nowMs
 * @param {DevPlan} plan
 * @param {string} [userId]
 * @returns {Promise<Session>}
 */
async function devSignIn(fetchImpl, nowMs, plan, userId) {
  let res;
  try {
    res = await fetchImpl("/__dev/sign-in", {
      method: "POST",
      cache: "no-store",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(userId ? { plan, userId } : { plan }),
    });
  } catch {
    throw new AuthError("network");
  }
  /** @type {any} */
  const body = await res.json().catch(() => null);
  if (res.status !== 200 || typeof body?.accessToken !== "string")
    throw new AuthError("unavailable");
  return {
    kind: "dev",
    userId: String(body.userId),
    accessToken: body.accessToken,
    refreshToken: null,
    expiresAt: toEpochMs(body.expiresAt, nowMs + 3_600_000),
    email: null,
    plan: typeof body.plan === "string" ? body.plan : plan,
  };
}

/**
 * @param {{
 *   supabase?: SupabaseAuthConfig | null,
 *   fetch?: typeof fetch,
 *   storage?: Pick<Storage, "getItem" | "setItem" | "removeItem"> | null,
 *   now?: () => number,
 * }} options
 */
export function createAuth(options = {}) {
  const fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const storage = options.storage ?? null;
  const now = options.now ?? (() => Date.now());
  /** @type {Set<(s: Session | null) => void>} */
  const listeners = new Set();
  /** @type {Session | null} */
  let session = loadSession(storage);
  /** @type {Promise<string | null> | null} */
  let refreshing = null;

  const cfg = options.supabase ?? null;
  const gotrue = cfg
    ? new GoTrueClient({
        url: `${cfg.url}/auth/v1`,
        headers: { apikey: cfg.anonKey },
        storageKey: SUPABASE_STORAGE_KEY,
        ...(storage ? { storage } : {}),
        persistSession: Boolean(storage),
        autoRefreshToken: true,
        detectSessionInUrl: true,
        flowType: "implicit",
        fetch: fetchImpl,
      })
    : null;
  gotrue?.onAuthStateChange((event, s) => {
    // auth-js calls back inside its lock: only record here, never call back into it.
    // auth-js also tells every tab of this origin about another tab's sign-in (its
    // BroadcastChannel); a session is this tab's only, so another user's is not taken up here
    // (this tab's page shows its own user's jobs). A sign-out elsewhere still signs out here.
    if (s && session && s.user.id !== session.userId) return;
    if (s) set(fromSupabase(s, session));
    else if (event === "SIGNED_OUT" && session?.kind === "supabase") set(null);
  });

  /**
   * @param {import("@supabase/auth-js").Session} s
   * @param {Session | null} before
   */
  const fromSupabase = (s, before) => sessionOf(s, before, now());

  /** @param {Session | null} next */
  function set(next) {
    const changed = next?.accessToken !== session?.accessToken;
    session = next;
    try {
      if (next) storage?.setItem(STORAGE_KEY, JSON.stringify(next));
      else storage?.removeItem(STORAGE_KEY);
    } catch {
      // storage full or disabled: the session still lives in memory
    }
    if (changed) for (const fn of listeners) fn(next);
  }

  /** @returns {GoTrueClient} */
  function client() {
    if (!gotrue) throw new AuthError("unavailable");
    return gotrue;
  }

  /**
   * @param {DevPlan} plan
   * @param {string} [userId]
   */
  const devSignInRaw = (plan, userId) => devSignIn(fetchImpl, now(), plan, userId);

  /** A new token now (after a 401 or near expiry); null (signed out) when that fails. */
  function refresh() {
    refreshing ??= (async () => {
      const s = session;
      if (!s) return null;
      try {
        if (s.kind === "dev") {
          const next = await devSignInRaw(devPlan(s.plan), s.userId);
          set(next);
          return next.accessToken;
        }
        const { data, error } = await client().refreshSession();
        if (error) throw error;
        if (data.session) set(fromSupabase(data.session, s));
        return data.session?.access_token ?? null;
      } catch (e) {
        // A network failure keeps the session (the token may still be good); anything else
        // means the refresh token is no longer accepted.
        if (fromAuthJs(e).code !== "network") set(null);
        return null;
      } finally {
        refreshing = null;
      }
    })();
    return refreshing;
  }

  /** @param {string} redirectTo */
  const here = (redirectTo) => ({ emailRedirectTo: redirectTo });

  return {
    /** @returns {Session | null} */
    session: () => session,
    /** @param {(s: Session | null) => void} fn */
    onChange(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    /**
     * Waits for auth-js to start: it takes a session from an emailed link in the URL fragment
     * (and clears the fragment). Throws `link_expired` when the link carried an error.
     */
    async ready() {
      if (!gotrue) {
        if (session?.kind === "supabase") set(null);
        return;
      }
      const { error } = await gotrue.initialize();
      const { data } = await gotrue.getSession();
      if (data.session) set(fromSupabase(data.session, session));
      else if (session?.kind === "supabase") set(null);
      if (error) throw new AuthError("link_expired");
    },
    /** The access token to send, refreshed first when it is about to expire. */
    async accessToken() {
      if (!session) return null;
      if (session.kind === "supabase") {
        const { data } = await client().getSession();
        return data.session?.access_token ?? null;
      }
      if (session.expiresAt - now() < REFRESH_MARGIN_MS) {
        const fresh = await refresh();
        if (fresh) return fresh;
        // a failed refresh over a flaky network: the old token is still worth a try
        return session && session.expiresAt > now() ? session.accessToken : null;
      }
      return session.accessToken;
    },
    refresh,
    /**
     * @param {string} email
     * @param {string} password
     */
    async signInWithPassword(email, password) {
      const { data, error } = await client().signInWithPassword({ email, password });
      if (error) throw fromAuthJs(error);
      set(fromSupabase(data.session, session));
    },
    /**
     * A new account: GoTrue mails a confirmation link (no session until it is followed).
     * With confirmations on, an address that already has an account gets a made-up user with
     * no identities (GoTrue does not say who is registered; auth-js's docs say to look there).
     * @param {string} email
     * @param {string} password
     * @param {string} redirectTo where the emailed link lands
     * @returns {Promise<"confirm_email" | "signed_in">}
     */
    async signUp(email, password, redirectTo) {
      const { data, error } = await client().signUp({ email, password, options: here(redirectTo) });
      if (error) throw fromAuthJs(error);
      if (data.session) {
        set(fromSupabase(data.session, session));
        return "signed_in";
      }
      if (data.user && data.user.identities?.length === 0)
        throw new AuthError("already_registered");
      return "confirm_email";
    },
    /**
     * @param {string} email
     * @param {string} redirectTo
     */
    async sendMagicLink(email, redirectTo) {
      const { error } = await client().signInWithOtp({ email, options: here(redirectTo) });
      if (error) throw fromAuthJs(error);
    },
    /**
     * @param {string} email
     * @param {string} redirectTo
     */
    async sendPasswordReset(email, redirectTo) {
      const { error } = await client().resetPasswordForEmail(email, { redirectTo });
      if (error) throw fromAuthJs(error);
    },
    /** @param {string} password */
    async updatePassword(password) {
      const { error } = await client().updateUser({ password });
      if (error) throw fromAuthJs(error);
    },
    /** @param {DevPlan} plan */
    async devSignIn(plan) {
      set(await devSignInRaw(plan));
    },
    async signOut() {
      const s = session;
      set(null);
      // revokes the session server side; auth-js forgets it locally even when that fails
      if (s?.kind === "supabase" && gotrue) await gotrue.signOut().catch(() => undefined);
    },
  };
}

/** @typedef {ReturnType<typeof createAuth>} Auth */

/** A plan's id (`public.plans`: the dev server says which there are, and refuses any other). */
/** @typedef {string} DevPlan */

/**
 * A plan's id for the dev sign-in, from anything stored or submitted (free otherwise).
 * @param {unknown} plan
 * @returns {DevPlan}
 */
export function devPlan(plan) {
  return typeof plan === "string" && /^[a-z0-9_-]{1,64}$/.test(plan) ? plan : "free";
}

/**
 * @typedef {{ id: string, name: string, period: string, units: number, meter: string }} DevPlanOffer
 */

/** What the deployment offers: the dev sign-in (npm run dev only) and/or Supabase Auth. */
export async function discover() {
  const [dev, config] = await Promise.all([
    fetch("/__dev/info", { cache: "no-store" })
      .then(async (r) => (r.ok ? await r.json() : null))
      .catch(() => null),
    fetch("/api/public-config", { cache: "no-store" })
      .then(async (r) => (r.ok ? await r.json() : null))
      .catch(() => null),
  ]);
  // the publishable key (new name), or the legacy anon key (old name)
  const key = config?.supabasePublishableKey ?? config?.supabaseAnonKey;
  const supabase =
    config && typeof config.supabaseUrl === "string" && typeof key === "string"
      ? { url: config.supabaseUrl.replace(/\/+$/, ""), anonKey: key }
      : null;
  // From here on the page may reach the app and this one Supabase project, nothing else.
  narrowConnectSrc(document, supabase?.url);
  const isDev = dev?.mode === "dev";
  // `npm run dev` serves its Auth stand-in on this origin (`/__dev/info` says so): the page
  // talks to it there, as the CSP allows; without it, the dev sign-in only.
  const devAuth = isDev && dev?.auth === "same-origin" && supabase;
  return {
    dev: isDev,
    /** @type {DevPlanOffer[]} the plans the dev sign-in offers (the dev database's) */
    devPlans: isDev && Array.isArray(dev?.plans) ? dev.plans : [],
    supabase: devAuth ? { ...supabase, url: location.origin } : isDev ? null : supabase,
  };
}
