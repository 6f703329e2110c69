/**
 * Mint a Supabase-shaped user access token for tests and local development. Never imported by
 * `api/` or `lib/`: a route that mints tokens must never ship.
 *
 * CLI: `npx tsx dev/token.ts [userId] [expiresInSeconds]` prints a token signed with
 * `SUPABASE_JWT_SECRET` (or the Supabase CLI's well-known local secret).
 */
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";
import { SignJWT } from "jose";

/** The HS256 secret `supabase start` uses by default (public, local only). */
export const LOCAL_JWT_SECRET = "super-secret-jwt-token-with-at-least-32-characters-long";
/** The issuer of the local Supabase stack. */
export const LOCAL_ISSUER = "http://127.0.0.1:54321/auth/v1";

/** Options of {@link mintUserToken}. */
export type MintOptions = {
  secret: string;
  userId: string;
  /** @default 3600 */
  expiresInSeconds?: number;
  /** @default "authenticated" */
  role?: string;
  /** @default "authenticated" */
  aud?: string;
  /** Issued-at time. @default new Date() */
  now?: Date;
};

/**
 * An HS256 access token with the claims Supabase Auth puts in one (iss, aud, role, sub, exp,
 * iat, session_id, aal, is_anonymous).
 *
 * @example const token = await mintUserToken({ secret: LOCAL_JWT_SECRET, userId: randomUUID() });
 */
export async function mintUserToken(options: MintOptions): Promise<string> {
  const iat = Math.floor((options.now ?? new Date()).getTime() / 1000);
  return new SignJWT({
    role: options.role ?? "authenticated",
    aal: "aal1",
    session_id: randomUUID(),
    is_anonymous: false,
    email: `${options.userId.slice(0, 8)}@example.test`,
    app_metadata: { provider: "email", providers: ["email"] },
    user_metadata: {},
  })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuer(LOCAL_ISSUER)
    .setAudience(options.aud ?? "authenticated")
    .setSubject(options.userId)
    .setIssuedAt(iat)
    .setExpirationTime(iat + (options.expiresInSeconds ?? 3600))
    .sign(new TextEncoder().encode(options.secret));
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [userId = randomUUID(), expires = "3600"] = process.argv.slice(2);
  // A dev CLI, not lib/: reading the environment directly is fine here.
  const secret = process.env.SUPABASE_JWT_SECRET || LOCAL_JWT_SECRET;
  const token = await mintUserToken({ secret, userId, expiresInSeconds: Number(expires) });
  process.stderr.write(`user ${userId}\n`);
  process.stdout.write(`${token}\n`);
}
