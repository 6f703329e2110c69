/**
 * The GoTrue stand-in (gotrue.ts) as `npm run dev` and the stack's tests run it: mounted on the
 * project's origin beside the JWKS (index.ts), as the Supabase gateway serves all of Auth from
 * the project URL; on the stack's database; signing user tokens with the project's current key
 * (ES256 for a project created today, HS256 for a legacy one: project.ts), `iss`
 * `${SUPABASE_URL}/auth/v1`; the gateway's keys the project's publishable and secret keys.
 *
 * The page reaches Auth through the app server's dev-only `/auth/v1/*` pass-through (its CSP
 * allows its own origin and `https://*.supabase.co`, not a loopback http port), so the mailed
 * links point at the app's origin. The mailbox has a port of its own (54324, where the
 * Supabase CLI puts its mail catcher): `/__mail`.
 */
import { importJWK, jwtVerify, SignJWT } from "jose";
import pg from "pg";
import { serve } from "../http/serve.ts";
import { createGotrue } from "./gotrue.ts";
import { createMailbox, type Mailbox } from "./mailbox.ts";
import { type ProjectFile, publicJwkOf, signerOf } from "./project.ts";

export interface StackAuth {
  /** Answers `/auth/v1/*`: the JWKS from `standIn`, everything else GoTrue. */
  handle(request: Request): Promise<Response>;
  mailbox: Mailbox;
  /** Where a person reads the caught mail. */
  mailUrl: string;
  stop(): Promise<void>;
}

/** The project's key as GoTrue uses it: sign with the private half, verify with the public. */
export async function projectKeys(project: ProjectFile) {
  const signer = await signerOf(project);
  const verifyKey =
    signer.alg === "ES256" && project.signingKey
      ? await importJWK({ ...publicJwkOf(project.signingKey), key_ops: ["verify"] }, "ES256")
      : new TextEncoder().encode(project.jwtSecret);
  return {
    sign: (claims: object) =>
      new SignJWT({ ...claims })
        .setProtectedHeader({
          alg: signer.alg,
          typ: "JWT",
          ...(signer.kid ? { kid: signer.kid } : {}),
        })
        .sign(signer.key),
    verify: async (token: string) =>
      (await jwtVerify(token, verifyKey, { algorithms: [signer.alg] })).payload,
  };
}

export async function startStackAuth(o: {
  project: ProjectFile;
  /** The JWKS room (index.ts): it keeps `/.well-known/jwks.json`. */
  standIn: { handle(request: Request): Promise<Response> };
  mailPort: number;
  databaseUrl: string;
  /** The app's origin: where the page is, the links land, and the page reaches Auth. */
  appUrl: string;
}): Promise<StackAuth> {
  const pool = new pg.Pool({ connectionString: o.databaseUrl, max: 4 });
  pool.on("error", () => {});
  const mailbox = createMailbox();
  const keys = new Set([o.project.publishableKey, o.project.secretKey]);
  let mailPort = o.mailPort;
  const mail = await serve(
    async (request) =>
      mailbox.handle(request, mailPort) ??
      new Response("404 page not found\n", {
        status: 404,
        headers: { "content-type": "text/plain" },
      }),
    { port: o.mailPort, name: "the local mailbox" },
  ).catch(async (e: unknown) => {
    await pool.end();
    throw e;
  });
  mailPort = mail.port;
  const gotrue = createGotrue({
    db: pool,
    mailbox,
    publicUrl: o.appUrl,
    issuer: o.project.issuer,
    siteUrl: o.appUrl,
    apiKeys: () => keys,
    adminKeys: () => new Set([o.project.secretKey]),
    ...(await projectKeys(o.project)),
  });
  return {
    handle: (request) =>
      new URL(request.url).pathname.startsWith("/auth/v1/.well-known/")
        ? o.standIn.handle(request)
        : gotrue.handle(request),
    mailbox,
    mailUrl: `${mail.url}/__mail`,
    async stop() {
      await mail.close();
      await pool.end();
    },
  };
}
