/**
 * Who a request runs as: the `apikey` gate Supabase's API gateway applies, then PostgREST's JWT
 * check (HS256 with the project's JWT secret) whose `role` claim picks the database role.
 */
import type { IncomingHttpHeaders } from "node:http";
import { type JWTPayload, jwtVerify, SignJWT } from "jose";
import { PgrstError, pgrstError } from "./errors.ts";

export interface RequestAuth {
  role: string;
  claims: JWTPayload;
}

export interface AuthConfig {
  secret: Uint8Array;
  /** Keys accepted as `apikey` without a signature check (the configured anon/service keys). */
  apiKeys: ReadonlySet<string>;
  anonRole: string;
}

const TEN_YEARS = 10 * 365 * 24 * 3600;

async function mintKey(jwtSecret: string, role: "anon" | "service_role"): Promise<string> {
  const iat = Math.floor(Date.now() / 1000);
  return new SignJWT({ iss: "supabase", ref: "local", role })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuedAt(iat)
    .setExpirationTime(iat + TEN_YEARS)
    .sign(new TextEncoder().encode(jwtSecret));
}

/** A legacy-style Supabase service_role key (`{iss:"supabase", ref:"local", role, iat, exp}`). */
export function mintServiceRoleKey(jwtSecret: string): Promise<string> {
  return mintKey(jwtSecret, "service_role");
}

/** A legacy-style Supabase anon key. */
export function mintAnonKey(jwtSecret: string): Promise<string> {
  return mintKey(jwtSecret, "anon");
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

/** PostgREST's JWT decode/claims errors, from jose's error codes. */
async function verify(token: string, secret: Uint8Array): Promise<JWTPayload> {
  if (token === "") throw invalidToken("PGRST301", "Empty JWT is sent in Authorization header");
  const parts = token.split(".").length;
  if (parts !== 3) throw invalidToken("PGRST301", `Expected 3 parts in JWT; got ${parts}`);
  try {
    // PostgREST allows 30 seconds of clock skew on exp/nbf/iat.
    const { payload } = await jwtVerify(token, secret, {
      algorithms: ["HS256"],
      clockTolerance: 30,
    });
    return payload;
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
    throw invalidToken("PGRST301", "JWT couldn't be decoded");
  }
}

/**
 * The gateway accepts any `apikey` that is one of this project's keys (anon or service_role,
 * signed with its secret); PostgREST then takes the Bearer token, or the apikey when there is no
 * Authorization header. No token at all is refused: a Supabase gateway never lets a keyless
 * request through, and PostgREST's answer when it has no anonymous role is PGRST302.
 */
export async function authenticate(
  headers: IncomingHttpHeaders,
  cfg: AuthConfig,
): Promise<RequestAuth> {
  const apikey = header(headers, "apikey");
  if (apikey !== undefined && !cfg.apiKeys.has(apikey)) {
    const claims = await verify(apikey, cfg.secret).catch(() => undefined);
    if (claims?.role !== "anon" && claims?.role !== "service_role")
      throw new PgrstError(401, {
        message: "Invalid API key",
        hint: "Double check your Supabase `anon` or `service_role` API key.",
      });
  }
  const authorization = header(headers, "authorization");
  const bearer =
    authorization === undefined ? undefined : /^Bearer\s*(.*)$/i.exec(authorization)?.[1]?.trim();
  const token = bearer ?? apikey;
  if (token === undefined)
    throw pgrstError(401, "PGRST302", "Anonymous access is disabled", null, null, {
      "WWW-Authenticate": "Bearer",
    });
  const claims = await verify(token, cfg.secret);
  const role = typeof claims.role === "string" ? claims.role : cfg.anonRole;
  return { role, claims: { ...claims, role } };
}
