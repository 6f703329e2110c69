// @ts-check
/**
 * Who the page is signed in as, and the access token the API needs.
 *
 * - In a deployment: Supabase Auth (GoTrue) by email and password over its REST API,
 *   `POST {supabaseUrl}/auth/v1/token?grant_type=password` with the public anon key as
 *   `apikey`; refreshed with `grant_type=refresh_token` a minute before it expires. The anon
 *   key is the only key the browser ever holds.
 * - Under `npm run dev`: the dev server's `POST /__dev/sign-in` mints a local token (that route
 *   does not exist in a deployment); "refresh" signs in again as the same user.
 *
 * The session lives in memory and in sessionStorage (this tab only, gone when it closes).
 */

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
/** Refresh this long before the token expires. */
export const REFRESH_MARGIN_MS = 60_000;

export class AuthError extends Error {
  /** @param {"invalid_credentials" | "email_not_confirmed" | "rate_limited" | "network" | "unavailable"} code */
  constructor(code) {
    super(code);
    this.name = "AuthError";
    this.code = code;
  }
}

/** @param {AuthError["code"]} code */
export function authErrorSentence(code) {
  switch (code) {
    case "invalid_credentials":
      return "That email and password do not match an account.";
    case "email_not_confirmed":
      return "Confirm your email address first: open the link we sent you.";
    case "rate_limited":
      return "Too many sign-in attempts. Wait a few minutes and try again.";
    case "network":
      return "Could not reach the sign-in service. Check your connection and try again.";
    default:
      return "Sign-in is unavailable right now. Please try again in a moment.";
  }
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
  let session = load();
  /** @type {Promise<string | null> | null} */
  let refreshing = null;

  function load() {
    try {
      const raw = storage?.getItem(STORAGE_KEY);
      const s = raw ? JSON.parse(raw) : null;
      return s && typeof s.accessToken === "string" && typeof s.userId === "string" ? s : null;
    } catch {
      return null;
    }
  }

  /** @param {Session | null} next */
  function set(next) {
    session = next;
    try {
      if (next) storage?.setItem(STORAGE_KEY, JSON.stringify(next));
      else storage?.removeItem(STORAGE_KEY);
    } catch {
      // storage full or disabled: the session still lives in memory
    }
    for (const fn of listeners) fn(next);
  }

  /**
   * @param {string} url
   * @param {RequestInit} init
   * @returns {Promise<{ status: number, body: any }>}
   */
  async function post(url, init) {
    let res;
    try {
      res = await fetchImpl(url, { method: "POST", cache: "no-store", ...init });
    } catch {
      throw new AuthError("network");
    }
    /** @type {any} */
    let body = null;
    try {
      body = await res.json();
    } catch {
      body = null;
    }
    return { status: res.status, body };
  }

  /**
   * The GoTrue token endpoint, for both grants.
   * @param {"password" | "refresh_token"} grant
   * @param {Record<string, string>} fields
   */
  async function gotrue(grant, fields) {
    const cfg = options.supabase;
    if (!cfg) throw new AuthError("unavailable");
    const { status, body } = await post(`${cfg.url}/auth/v1/token?grant_type=${grant}`, {
      headers: { apikey: cfg.anonKey, "content-type": "application/json" },
      body: JSON.stringify(fields),
    });
    if (status === 200 && typeof body?.access_token === "string") {
      /** @type {Session} */
      const next = {
        kind: "supabase",
        userId: String(body.user?.id ?? ""),
        accessToken: body.access_token,
        refreshToken: typeof body.refresh_token === "string" ? body.refresh_token : null,
        expiresAt: toEpochMs(body.expires_at, now() + Number(body.expires_in ?? 3600) * 1000),
        email: typeof body.user?.email === "string" ? body.user.email : null,
        plan: null,
      };
      return next;
    }
    const code = String(body?.error_code ?? body?.error ?? "");
    if (status === 429) throw new AuthError("rate_limited");
    if (code === "email_not_confirmed") throw new AuthError("email_not_confirmed");
    if (status === 400 || status === 401 || status === 403)
      throw new AuthError("invalid_credentials");
    throw new AuthError("unavailable");
  }

  /**
   * @param {DevPlan} plan
   * @param {string} [userId]
   */
  async function devSignInRaw(plan, userId) {
    const { status, body } = await post("/__dev/sign-in", {
      headers: { "content-type": "application/json" },
      body: JSON.stringify(userId ? { plan, userId } : { plan }),
    });
    if (status !== 200 || typeof body?.accessToken !== "string") throw new AuthError("unavailable");
    /** @type {Session} */
    const next = {
      kind: "dev",
      userId: String(body.userId),
      accessToken: body.accessToken,
      refreshToken: null,
      expiresAt: toEpochMs(body.expiresAt, now() + 3_600_000),
      email: null,
      plan: typeof body.plan === "string" ? body.plan : plan,
    };
    return next;
  }

  /** A new token now (after a 401 or near expiry); null (signed out) when that fails. */
  function refresh() {
    refreshing ??= (async () => {
      const s = session;
      if (!s) return null;
      try {
        const next =
          s.kind === "dev"
            ? await devSignInRaw(devPlan(s.plan), s.userId)
            : s.refreshToken
              ? await gotrue("refresh_token", { refresh_token: s.refreshToken })
              : null;
        if (!next) {
          set(null);
          return null;
        }
        set({ ...next, email: next.email ?? s.email });
        return next.accessToken;
      } catch (e) {
        // A network failure keeps the session (the token may still be good); anything else
        // means the refresh token is no longer accepted.
        if (!(e instanceof AuthError && e.code === "network")) set(null);
        return null;
      } finally {
        refreshing = null;
      }
    })();
    return refreshing;
  }

  return {
    /** @returns {Session | null} */
    session: () => session,
    /** @param {(s: Session | null) => void} fn */
    onChange(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    /** The access token to send, refreshed first when it is about to expire. */
    async accessToken() {
      if (!session) return null;
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
      set(await gotrue("password", { email, password }));
    },
    /** @param {DevPlan} plan */
    async devSignIn(plan) {
      set(await devSignInRaw(plan));
    },
    async signOut() {
      const s = session;
      set(null);
      const cfg = options.supabase;
      if (s?.kind === "supabase" && cfg) {
        // best effort: revokes the refresh token server side
        await fetchImpl(`${cfg.url}/auth/v1/logout`, {
          method: "POST",
          headers: { apikey: cfg.anonKey, authorization: `Bearer ${s.accessToken}` },
        }).catch(() => undefined);
      }
    },
  };
}

/** @typedef {ReturnType<typeof createAuth>} Auth */

/** @typedef {"free" | "pro" | "team"} DevPlan */

/**
 * A plan name the dev sign-in knows, from anything stored or submitted (free otherwise).
 * @param {unknown} plan
 * @returns {DevPlan}
 */
export function devPlan(plan) {
  return plan === "pro" || plan === "team" ? plan : "free";
}
