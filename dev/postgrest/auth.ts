/**
 * Who a request runs as: the `apikey` gate Supabase's API gateway applies, then PostgREST's JWT
 * check whose `role` claim picks the database role. PostgREST verifies HS256 tokens with the
 * legacy JWT secret and ES256/RS256 tokens with the project's JWKS (the Auth stand-in's keys).
 *
 * The new API keys (Supabase's API-keys guide, "Known limitations"; migration guide: "send
 * publishable and secret keys on the `apikey` header only"): the gateway maps an
 * `sb_publishable_…` key to `anon` and an `sb_secret_…` key to `service_role` when no
 * Authorization header comes with it; a user JWT on Authorization runs as that user. An
 * `sb_` key on `Authorization: Bearer` is refused unless it equals `apikey`, and then it reaches
 * PostgREST and is rejected for not being a JWT. A secret key from a browser (its User-Agent)
 * is always 401.
 */
import type { IncomingHttpHeaders } from "node:http";
import {
  createLocalJWKSet,
  decodeProtectedHeader,
  type JWK,
  type JWTPayload,
  jwtVerify,
} from "jose";
import { legacyApiKey } from "../auth/project.ts";
import { PgrstError, pgrstError } from "./errors.ts";

export interface RequestAuth {
  role: string;
  claims: JWTPayload;
}

export interface AuthConfig {
  secret: Uint8Array;
  /** The project's asymmetric signing keys (its JWKS); none on a legacy project. */
  jwks?: { keys: JWK[] };
  /** Keys accepted as `apikey` without a signature check (the configured anon/service keys). */
  apiKeys: ReadonlySet<string>;
  /** New-format keys: `sb_secret_…` → service_role, `sb_publishable_…` → anon. */
  secretKeys?: ReadonlySet<string>;
  publishableKeys?: ReadonlySet<string>;
  anonRole: string;
}

/** A legacy-style Supabase service_role key (`{iss:"supabase", ref:"local", role, iat, exp}`). */
export function mintServiceRoleKey(jwtSecret: string): Promise<string> {
  return legacyApiKey(jwtSecret, "service_role");
}

/** A legacy-style Supabase anon key. */
export function mintAnonKey(jwtSecret: string): Promise<string> {
  return legacyApiKey(jwtSecret, "anon");
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
}

function invalidToken(code: "PGRST301" | "PGRST303", message: string): PgrstError {
  return pgrstError(401, code, message, null, null, {
    "WWW-Authenticate": `Bearer error="invalid_token", error_description=${JSON.stringify(message)}`,
  });
}

/**
 * The project's signature check: HS256 with the legacy secret, an asymmetric token with the
 * JWKS. Throws jose's errors; each server maps them to its own words (PostgREST below, Realtime
 * in dev/realtime/tokens.ts), and picks its clock skew on exp/nbf.
 */
export async function verifyProjectJwt(
  token: string,
  cfg: Pick<AuthConfig, "secret" | "jwks">,
  clockTolerance: number,
): Promise<JWTPayload> {
  const alg = decodeProtectedHeader(token).alg;
  const { payload } =
    alg === "HS256" || !cfg.jwks
      ? await jwtVerify(token, cfg.secret, { algorithms: ["HS256"], clockTolerance })
      : await jwtVerify(token, createLocalJWKSet(cfg.jwks), {
          algorithms: ["ES256", "RS256", "EdDSA"],
          clockTolerance,
        });
  return payload;
}

/** PostgREST's JWT decode/claims errors, from jose's error codes. */
async function verify(token: string, cfg: AuthConfig): Promise<JWTPayload> {
  if (token === "") throw invalidToken("PGRST301", "Empty JWT is sent in Authorization header");
  const parts = token.split(".").length;
  if (parts !== 3) throw invalidToken("PGRST301", `Expected 3 parts in JWT; got ${parts}`);
  try {
    // PostgREST allows 30 seconds of clock skew on exp/nbf/iat.
    return await verifyProjectJwt(token, cfg, 30);
  } catch (err) {
    const code = (err as { code?: string }).code;
    const claim = (err as { claim?: string }).claim;
    if (code === "ERR_JWT_EXPIRED") throw invalidToken("PGRST303", "JWT expired");
    if (code === "ERR_JWT_CLAIM_VALIDATION_FAILED" && claim === "nbf")
      throw invalidToken("PGRST303", "JWT not yet valid");
    if (code === "ERR_JWT_CLAIM_VALIDATION_FAILED")
      throw invalidToken("PGRST303", "Parsing claims failed");
    if (code === "ERR_JOSE_ALG_NOT_ALLOWED" || code === "ERR_JOSE_NOT_SUPPORTED")
      throw invalidToken("PGRST301", "Wrong or unsupported encoding algorithm");
    if (code === "ERR_JWS_SIGNATURE_VERIFICATION_FAILED")
      throw invalidToken("PGRST301", "JWT cryptographic operation failed");
    if (code === "ERR_JWKS_NO_MATCHING_KEY" || code === "ERR_JWKS_MULTIPLE_MATCHING_KEYS")
      throw invalidToken("PGRST301", "No suitable key or wrong key type");
    throw invalidToken("PGRST301", "JWT couldn't be decoded");
  }
}

const BROWSER = /^Mozilla\//;

/** The gateway's answer for an `sb_` key: its role, or its refusal. */
export function gatewayKey(
  headers: IncomingHttpHeaders,
  apikey: string,
  cfg: AuthConfig,
): "service_role" | "anon" {
  const role = cfg.secretKeys?.has(apikey)
    ? "service_role"
    : cfg.publishableKeys?.has(apikey)
      ? "anon"
      : undefined;
  if (!role)
    throw new PgrstError(401, {
      message: "Invalid API key",
      hint: "Double check your Supabase `anon` or `service_role` API key.",
    });
  if (role === "service_role" && BROWSER.test(header(headers, "user-agent") ?? ""))
    throw new PgrstError(401, { message: "Forbidden use of secret API key in browser" });
  return role;
}

/**
 * The gateway's check of a legacy (JWT) `apikey`: one of the configured keys, or an anon or
 * service_role token signed by this project; anything else is its Invalid-API-key refusal.
 */
export async function legacyGatewayKey(apikey: string, cfg: AuthConfig): Promise<void> {
  if (cfg.apiKeys.has(apikey)) return;
  const claims = await verify(apikey, cfg).catch(() => undefined);
  if (claims?.role !== "anon" && claims?.role !== "service_role")
    throw new PgrstError(401, {
      message: "Invalid API key",
      hint: "Double check your Supabase `anon` or `service_role` API key.",
    });
}

/**
 * The gateway accepts any `apikey` that is one of this project's keys (anon or service_role,
 * signed with its secret, or an `sb_` key); PostgREST then takes the Bearer token, or the
 * legacy apikey when there is no Authorization header, or the `sb_` key's role. No token at all
 * is refused: a Supabase gateway never lets a keyless request through, and PostgREST's answer
 * when it has no anonymous role is PGRST302.
 */
export async function authenticate(
  headers: IncomingHttpHeaders,
  cfg: AuthConfig,
): Promise<RequestAuth> {
  const apikey = header(headers, "apikey");
  const authorization = header(headers, "authorization");
  const bearer =
    authorization === undefined ? undefined : /^Bearer\s*(.*)$/i.exec(authorization)?.[1]?.trim();
  if (apikey?.startsWith("sb_")) {
    const keyRole = gatewayKey(headers, apikey, cfg);
    if (bearer === undefined) return { role: keyRole, claims: { role: keyRole } };
    // An sb_ key on Authorization: refused unless it equals apikey; then it reaches PostgREST,
    // which refuses it as not a JWT (verify below). The gateway's exact body for the refusal is
    // not documented; this is its Invalid-API-key shape.
    if (bearer.startsWith("sb_") && bearer !== apikey)
      throw new PgrstError(401, {
        message: "Invalid API key",
        hint: "A publishable or secret key may only be sent on the apikey header.",
      });
  } else if (apikey !== undefined) {
    await legacyGatewayKey(apikey, cfg);
  }
  const token = bearer ?? apikey;
  if (token === undefined)
    throw pgrstError(401, "PGRST302", "Anonymous access is disabled", null, null, {
      "WWW-Authenticate": "Bearer",
    });
  const claims = await verify(token, cfg);
  const role = typeof claims.role === "string" ? claims.role : cfg.anonRole;
  return { role, claims: { ...claims, role } };
}
