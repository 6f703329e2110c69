/**
 * Supabase access token → user id, verified locally (no round trip to Supabase Auth per
 * request). The user id comes from the token's `sub`, never from the request body.
 */
// jose's subpath entries: the three pieces used load 12 files, the package's index loads 46.
import * as errors from "jose/errors";
import { createRemoteJWKSet, customFetch } from "jose/jwks/remote";
import { type JWTVerifyGetKey, jwtVerify } from "jose/jwt/verify";
import { HttpError } from "./errors.ts";
import { log } from "./log.ts";

/** What the rest of the app knows about a caller. */
export type AuthUser = { userId: string };

/** Options of {@link createAuth}. */
export type AuthOptions = {
  /** `SUPABASE_JWT_SECRET`: when set, tokens are HS256-verified with it (and nothing else). */
  jwtSecret?: string | undefined;
  /** `SUPABASE_URL`: the JWKS is read from `${supabaseUrl}/auth/v1/.well-known/jwks.json`. */
  supabaseUrl: string;
  /** Fetch used for the JWKS (tests). @default globalThis.fetch */
  fetch?: typeof fetch;
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Supabase's asymmetric signing keys are ES256 (default) or RS256.
const ASYMMETRIC = ["ES256", "RS256"];

// One key set per URL for the life of the instance (Fluid compute shares it between
// invocations). jose caches the keys for 10 minutes, what Supabase's edge cache allows.
const jwksByUrl = new Map<string, JWTVerifyGetKey>();
const jwksByFetch = new WeakMap<typeof fetch, Map<string, JWTVerifyGetKey>>();

function remoteJwks(url: string, fetchImpl?: typeof fetch): JWTVerifyGetKey {
  const cache = fetchImpl
    ? (jwksByFetch.get(fetchImpl) ?? new Map<string, JWTVerifyGetKey>())
    : jwksByUrl;
  if (fetchImpl) jwksByFetch.set(fetchImpl, cache);
  let jwks = cache.get(url);
  if (!jwks) {
    jwks = createRemoteJWKSet(new URL(url), fetchImpl ? { [customFetch]: fetchImpl } : {});
    cache.set(url, jwks);
  }
  return jwks;
}

/** The key set could not be fetched: not the caller's fault, so not a 401. */
class JwksUnavailable extends Error {}

function unauthorized(): HttpError {
  return new HttpError(401, "unauthorized", "A valid access token is required.", {
    "www-authenticate": "Bearer",
  });
}

/**
 * Build the request authenticator.
 *
 * `userFromRequest` reads `Authorization: Bearer <jwt>` and checks signature, `exp`,
 * `aud` = "authenticated", `role` = "authenticated" and a UUID `sub`. Any failure throws
 * `HttpError` 401 `unauthorized` with `WWW-Authenticate: Bearer` and no detail; a JWKS that
 * cannot be fetched throws 503 `unavailable` instead (signing every user out because
 * Supabase's key endpoint blipped would be wrong).
 *
 * @example
 * const auth = createAuth({ jwtSecret: config.supabaseJwtSecret, supabaseUrl: config.supabaseUrl });
 * const { userId } = await auth.userFromRequest(req);
 */
export function createAuth(options: AuthOptions): {
  userFromRequest(req: Request): Promise<AuthUser>;
} {
  const { jwtSecret, supabaseUrl } = options;
  const hmacKey = jwtSecret ? new TextEncoder().encode(jwtSecret) : undefined;
  const jwksUrl = `${supabaseUrl.replace(/\/+$/, "")}/auth/v1/.well-known/jwks.json`;

  const getKey: JWTVerifyGetKey = async (header, token) => {
    try {
      return await remoteJwks(jwksUrl, options.fetch)(header, token);
    } catch (err) {
      const fetchFailed =
        err instanceof errors.JWKSTimeout ||
        err instanceof errors.JWKSInvalid ||
        !(err instanceof errors.JOSEError) ||
        err.code === "ERR_JOSE_GENERIC";
      throw fetchFailed ? new JwksUnavailable("jwks unavailable", { cause: err }) : err;
    }
  };

  async function verify(token: string) {
    const common = { audience: "authenticated", requiredClaims: ["exp", "sub"] };
    return hmacKey
      ? jwtVerify(token, hmacKey, { ...common, algorithms: ["HS256"] })
      : jwtVerify(token, getKey, { ...common, algorithms: ASYMMETRIC });
  }

  return {
    async userFromRequest(req) {
      const match = /^Bearer +([^\s]+)\s*$/i.exec(req.headers.get("authorization") ?? "");
      const token = match?.[1];
      if (!token) throw unauthorized();
      let payload: Awaited<ReturnType<typeof verify>>["payload"];
      try {
        ({ payload } = await verify(token));
      } catch (err) {
        if (err instanceof JwksUnavailable) {
          log.error("jwks_unavailable", {
            url: jwksUrl,
            error: err.cause instanceof Error ? err.cause : null,
          });
          throw new HttpError(
            503,
            "unavailable",
            "Sign-in cannot be checked right now. Please retry shortly.",
            {
              "retry-after": "5",
            },
          );
        }
        log.debug("token_rejected", {
          reason: err instanceof errors.JOSEError ? err.code : "invalid",
        });
        throw unauthorized();
      }
      // `anon` and `service_role` tokens are valid Supabase JWTs too, but not a signed-in user.
      if (
        payload.role !== "authenticated" ||
        typeof payload.sub !== "string" ||
        !UUID.test(payload.sub)
      ) {
        throw unauthorized();
      }
      return { userId: payload.sub.toLowerCase() };
    },
  };
}
