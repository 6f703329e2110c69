/**
 * Mint a Supabase-shaped user access token for tests and local development. Never imported by
 * `api/` or `lib/`: a route that mints tokens must never ship. The signing is the Auth
 * stand-in's (dev/auth/tokens.ts); this file keeps the legacy HS256 form tests use directly.
 *
 * CLI: `npx tsx dev/token.ts [userId] [expiresInSeconds]` prints an HS256 token signed with
 * `SUPABASE_JWT_SECRET` (or the Supabase CLI's well-known local secret). For the running local
 * project (ES256 by default) use `npm run dev:token`.
 */
import { randomUUID } from "node:crypto";
import { pathToFileURL } from "node:url";
import { LOCAL_JWT_SECRET, signAccessToken } from "./auth/index.ts";

export { LOCAL_JWT_SECRET };
/** The issuer of the local Supabase stack on its default port. */
export const LOCAL_ISSUER = "http://127.0.0.1:54321/auth/v1";

/** Options of {@link mintUserToken}. */
export type MintOptions = {
  secret: string;
  userId: string;
  /** `iss`: `<SUPABASE_URL>/auth/v1` of the project the app is configured with. @default LOCAL_ISSUER */
  issuer?: string;
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
 * An HS256 access token (a legacy-secret project's) with the claims Supabase Auth puts in one.
 *
 * @example const token = await mintUserToken({ secret: LOCAL_JWT_SECRET, userId: randomUUID() });
 */
export function mintUserToken(options: MintOptions): Promise<string> {
  return signAccessToken(
    { shape: "legacy", issuer: options.issuer ?? LOCAL_ISSUER, jwtSecret: options.secret },
    {
      userId: options.userId,
      ...(options.expiresInSeconds !== undefined
        ? { expiresInSeconds: options.expiresInSeconds }
        : {}),
      ...(options.role ? { role: options.role } : {}),
      ...(options.aud ? { aud: options.aud } : {}),
      ...(options.now ? { now: options.now } : {}),
    },
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const [userId = randomUUID(), expires = "3600"] = process.argv.slice(2);
  // A dev CLI, not lib/: reading the environment directly is fine here.
  const secret = process.env.SUPABASE_JWT_SECRET || LOCAL_JWT_SECRET;
  const token = await mintUserToken({ secret, userId, expiresInSeconds: Number(expires) });
  process.stderr.write(`user ${userId}\n`);
  process.stdout.write(`${token}\n`);
}
