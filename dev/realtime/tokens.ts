/**
 * Who a socket or a channel is: Realtime's token check (RealtimeWeb.ChannelsAuthorization and
 * JwtVerification) over the same signature check as the PostgREST stand-in
 * (`verifyProjectJwt`: HS256 with the legacy secret, ES256/RS256/EdDSA with the JWKS). Realtime
 * allows no clock skew, and needs `role` and `exp` in the claims.
 */
import { decodeJwt, decodeProtectedHeader, type JWTPayload } from "jose";
import { type AuthConfig, verifyProjectJwt } from "../postgrest/auth.ts";

export type Claims = JWTPayload & { role: string; exp: number };

/** A refused token: Realtime's log code and message (a join's reason is `<code>: <message>`). */
export class TokenError extends Error {
  constructor(
    readonly code: string,
    message: string,
    /** What the websocket handshake answers (`UserSocket.error_response`). */
    readonly handshake: string,
  ) {
    super(message);
  }
  get reason(): string {
    return `${this.code}: ${this.message}`;
  }
}

const malformed = () =>
  new TokenError(
    "MalformedJWT",
    "The token provided is not a valid JWT",
    "The token provided is not a valid JWT",
  );
const missingClaims = () =>
  new TokenError(
    "InvalidJWTToken",
    "Fields `role` and `exp` are required in JWT",
    "Fields `role` and `exp` are required in JWT",
  );

export async function verifyRealtimeToken(
  token: string,
  cfg: Pick<AuthConfig, "secret" | "jwks">,
  now: () => number = () => Math.floor(Date.now() / 1000),
): Promise<Claims> {
  // ChannelsAuthorization.clean_token: URI-decoded, whitespace removed.
  const clean = safeDecode(token).replace(/\s/g, "");
  let header: ReturnType<typeof decodeProtectedHeader>;
  try {
    header = decodeProtectedHeader(clean);
    decodeJwt(clean);
  } catch {
    throw malformed();
  }
  let claims: JWTPayload;
  try {
    claims = await verifyProjectJwt(clean, cfg, 0);
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === "ERR_JWT_EXPIRED") {
      const exp = Number(decodeJwt(clean).exp);
      throw new TokenError(
        "InvalidJWTToken",
        `Token has expired ${now() - exp} seconds ago`,
        "Token has expired",
      );
    }
    if (code === "ERR_JWKS_NO_MATCHING_KEY" && typeof header.kid === "string")
      throw new TokenError(
        "JwtSignerError",
        `Failed to generate JWT signer for key ID (kid) ${JSON.stringify(header.kid)}, check your JWT secret or JWKS configuration`,
        `Failed to generate JWT signer for key ID (kid) ${JSON.stringify(header.kid)}, check your JWT secret or JWKS configuration`,
      );
    if (code === "ERR_JWS_INVALID" || code === "ERR_JWT_INVALID") throw malformed();
    if (code === "ERR_JWT_CLAIM_VALIDATION_FAILED")
      throw new TokenError(
        "UnknownErrorOnChannel",
        "Unknown Error on Channel",
        "Error connecting to Realtime",
      );
    throw new TokenError(
      "JwtSignatureError",
      "Failed to validate JWT signature",
      "Failed to validate JWT signature",
    );
  }
  if (claims.role === undefined || claims.exp === undefined) throw missingClaims();
  if (typeof claims.exp !== "number" || claims.exp - now() <= 0)
    throw new TokenError(
      "InvalidJWTToken",
      "Token expiration time is invalid",
      "Token expiration time is invalid",
    );
  return claims as Claims;
}

function safeDecode(token: string): string {
  try {
    return decodeURIComponent(token);
  } catch {
    return token;
  }
}
