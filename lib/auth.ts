/**
 * Supabase access token → user id, verified locally (no round trip to Supabase Auth per
 * request). The user id comes from the token's `sub`, never from the request body.
 */
// jose's subpath entries: the three pieces used load 12 files, the package's index loads 46.

import { decodeProtectedHeader } from "jose/decode/protected_header";
import * as errors from "jose/errors";
import { createRemoteJWKSet, customFetch } from "jose/jwks/remote";
import { type JWTVerifyGetKey, jwtVerify } from "jose/jwt/verify";
import { HttpError } from "./errors.ts";
import { log } from "./log.ts";

/**
 * What the rest of the app knows about a caller. `operator` is present (true) only when the
 * token's `app_metadata` names the operator role ({@link isOperatorClaim}).
 */
export type AuthUser = { userId: string; operator?: true };

/** The role in `app_metadata` that opens the operator page (docs/RUNBOOK.md#operators). */
export const OPERATOR_ROLE = "operator";

/**
 * Whether a token's `app_metadata` claim makes its user an operator: `role` is "operator", or
 * `roles` is an array that contains it. Only `app_metadata`: the service role alone sets it
 * (Auth's admin API), while `user_metadata` is the user's own to write (`PUT /auth/v1/user`),
 * so a role there means nothing.
 */
export function isOperatorClaim(appMetadata: unknown): boolean {
  if (!appMetadata || typeof appMetadata !== "object" || Array.isArray(appMetadata)) return false;
  const m = appMetadata as { role?: unknown; roles?: unknown };
  return m.role === OPERATOR_ROLE || (Array.isArray(m.roles) && m.roles.includes(OPERATOR_ROLE));
}

/** Options of {@link createAuth}. */
export type AuthOptions = {
  /**
   * `SUPABASE_JWT_SECRET`, the project's legacy shared secret: HS256 tokens are verified with
   * it when it is set, and refused when it is not. Asymmetric tokens never use it.
   */
  jwtSecret?: string | undefined;
  /**
   * `SUPABASE_URL`: tokens must be issued by `${supabaseUrl}/auth/v1`, and ES256/RS256/EdDSA
   * keys are read from `${supabaseUrl}/auth/v1/.well-known/jwks.json`.
   */
  supabaseUrl: string;
  /** Fetch used for the JWKS (tests). @default globalThis.fetch */
  fetch?: typeof fetch;
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// Supabase's asymmetric signing keys: ES256 (the default for new projects), RS256, and EdDSA
// (Ed25519; listed as coming). jose names Ed25519 both "EdDSA" and "Ed25519".
const ASYMMETRIC = ["ES256", "RS256", "EdDSA", "Ed25519"];
// A token issued more than this far ahead of our clock is refused: clock skew between Supabase
// and the function is seconds, so an `iat` a minute ahead was not minted by the project now.
const MAX_IAT_AHEAD_SECONDS = 60;

/**
 * The audience as GoTrue reads and writes it: golang-jwt's `ClaimStrings` takes a string as a
 * one-element list, and GoTrue issues exactly one audience (the user's, "authenticated") as a
 * plain string. So `"authenticated"` and `["authenticated"]` are the same token; an array that
 * names other audiences too (which jose's `audience` option alone would accept) was not minted
 * by Supabase Auth for a signed-in user of this project, and is refused.
 */
function isUserAudience(aud: unknown): boolean {
  const list = typeof aud === "string" ? [aud] : aud;
  return Array.isArray(list) && list.length === 1 && list[0] === "authenticated";
}

// The key cache: jose's remote key set, one per URL for the life of the instance (Fluid compute
// shares it between invocations). Supabase serves the JWKS with a 10-minute edge cache and asks
// clients not to cache it longer, so keys are kept 10 minutes; a kid the cache does not know
// makes jose fetch again at once, at most once per 30 s (its cooldown), so a key published as
// "standby" and then made current is found, and tokens with made-up kids cannot flood Supabase.
const JWKS_CACHE = { cacheMaxAge: 10 * 60_000, cooldownDuration: 30_000 };
const jwksByUrl = new Map<string, JWTVerifyGetKey>();
const jwksByFetch = new WeakMap<typeof fetch, Map<string, JWTVerifyGetKey>>();

function remoteJwks(url: string, fetchImpl?: typeof fetch): JWTVerifyGetKey {
  const cache = fetchImpl
    ? (jwksByFetch.get(fetchImpl) ?? new Map<string, JWTVerifyGetKey>())
    : jwksByUrl;
  if (fetchImpl) jwksByFetch.set(fetchImpl, cache);
  let jwks = cache.get(url);
  if (!jwks) {
    jwks = createRemoteJWKSet(new URL(url), {
      ...JWKS_CACHE,
      ...(fetchImpl ? { [customFetch]: fetchImpl } : {}),
    });
    cache.set(url, jwks);
  }
  return jwks;
}

/** The key set could not be fetched: not the caller's fault, so not a 401. */
class JwksUnavailable extends Error {}
/** The token's algorithm has no key configured here (e.g. HS256 after the secret was removed). */
class NoKeyForAlgorithm extends Error {}

function unauthorized(): HttpError {
  return new HttpError(401, "unauthorized", "A valid access token is required.", {
    "www-authenticate": "Bearer",
  });
}

/**
 * Build the request authenticator.
 *
 * `userFromRequest` reads `Authorization: Bearer <jwt>` and checks the signature by the token's
 * algorithm (HS256 with `jwtSecret` when set; ES256, RS256 and EdDSA with the project's JWKS by
 * `kid`), `iss` = `${supabaseUrl}/auth/v1`, `exp`, `aud` = "authenticated" (the one audience,
 * as a string or a one-element array), an `iat` at most a minute ahead of this clock,
 * `role` = "authenticated" and a UUID `sub`. An algorithm with no key configured is a 401. Any failure throws
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
  const { jwtSecret } = options;
  const hmacKey = jwtSecret ? new TextEncoder().encode(jwtSecret) : undefined;
  const issuer = `${options.supabaseUrl.replace(/\/+$/, "")}/auth/v1`;
  const jwksUrl = `${issuer}/.well-known/jwks.json`;

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

  // The token's own header picks the key: during a rotation the project issues both kinds, and
  // the legacy secret keeps verifying old HS256 tokens until it is revoked. Each branch allows
  // only its own algorithms, so a token cannot pick a key of the other kind (alg confusion).
  async function verify(token: string) {
    const common = { issuer, audience: "authenticated", requiredClaims: ["exp", "sub"] };
    const { alg } = decodeProtectedHeader(token);
    if (alg === "HS256") {
      if (!hmacKey) throw new NoKeyForAlgorithm("HS256 without SUPABASE_JWT_SECRET");
      return jwtVerify(token, hmacKey, { ...common, algorithms: ["HS256"] });
    }
    if (typeof alg === "string" && ASYMMETRIC.includes(alg))
      return jwtVerify(token, getKey, { ...common, algorithms: ASYMMETRIC });
    throw new NoKeyForAlgorithm("an algorithm Supabase does not sign with");
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
          reason:
            err instanceof errors.JOSEError
              ? err.code
              : err instanceof NoKeyForAlgorithm
                ? "no_key_for_alg"
                : "invalid",
        });
        throw unauthorized();
      }
      const issuedAhead = (payload.iat ?? 0) - Math.floor(Date.now() / 1000);
      if (issuedAhead > MAX_IAT_AHEAD_SECONDS || !isUserAudience(payload.aud)) {
        log.debug("token_rejected", {
          reason: issuedAhead > MAX_IAT_AHEAD_SECONDS ? "iat_in_future" : "audience",
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
      const userId = payload.sub.toLowerCase();
      return isOperatorClaim(payload.app_metadata) ? { userId, operator: true } : { userId };
    },
  };
}
