/**
 * User access tokens as Supabase Auth (GoTrue) issues them: its claims (`iss`, `sub`, `aud`,
 * `exp`, `iat`, `email`, `phone`, `app_metadata`, `user_metadata`, `role`, `aal`, `amr`,
 * `session_id`, `is_anonymous`) and its header (`alg`, `typ: "JWT"`, and `kid` for an
 * asymmetric key).
 */
import { randomUUID } from "node:crypto";
import { SignJWT } from "jose";
import { type ProjectFile, signerOf } from "./project.ts";

export interface AccessTokenInput {
  userId: string;
  /** @default `<first 8 of the id>@example.test` */
  email?: string;
  /** @default 3600 (GoTrue's `jwt_expiry`) */
  expiresInSeconds?: number;
  /** @default "authenticated" */
  role?: string;
  /** @default "authenticated" */
  aud?: string;
  /** @default false */
  isAnonymous?: boolean;
  /** Issued-at time. @default new Date() */
  now?: Date;
  /** Merged into `app_metadata` over GoTrue's `provider` / `providers` (what the admin API set). */
  appMetadata?: Record<string, unknown>;
  /** @default {} */
  userMetadata?: Record<string, unknown>;
}

/** Signs a user token with the project's current signing key (ES256 new, HS256 legacy). */
export async function signAccessToken(
  project: Pick<ProjectFile, "shape" | "issuer" | "jwtSecret" | "signingKey">,
  input: AccessTokenInput,
): Promise<string> {
  const signer = await signerOf(project);
  const iat = Math.floor((input.now ?? new Date()).getTime() / 1000);
  return new SignJWT({
    email: input.email ?? `${input.userId.slice(0, 8)}@example.test`,
    phone: "",
    app_metadata: { provider: "email", providers: ["email"], ...input.appMetadata },
    user_metadata: input.userMetadata ?? {},
    role: input.role ?? "authenticated",
    aal: "aal1",
    amr: [{ method: "password", timestamp: iat }],
    session_id: randomUUID(),
    is_anonymous: input.isAnonymous ?? false,
  })
    .setProtectedHeader({ alg: signer.alg, typ: "JWT", ...(signer.kid ? { kid: signer.kid } : {}) })
    .setIssuer(project.issuer)
    .setAudience(input.aud ?? "authenticated")
    .setSubject(input.userId)
    .setIssuedAt(iat)
    .setExpirationTime(iat + (input.expiresInSeconds ?? 3600))
    .sign(signer.key);
}
