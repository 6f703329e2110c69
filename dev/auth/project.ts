/**
 * The local Supabase project's auth side: its shape, the issuer its tokens carry, the keys it
 * signs user tokens with and the API keys the gateway accepts. Two shapes:
 *
 * - `new` (the default; a project created today): user tokens signed ES256 with a key made for
 *   this data folder, published in the JWKS; `sb_publishable_…` / `sb_secret_…` API keys.
 * - `legacy` (`DEV_SUPABASE_SHAPE=legacy`): HS256 user tokens and `anon` / `service_role` JWT
 *   keys, all signed with the shared JWT secret; the JWKS lists no key (GoTrue never publishes
 *   a symmetric key).
 *
 * The project is written to `<dataDir>/auth/project.json` (mode 0600, git-ignored with the
 * rest of `.data/`) at each start, so `npm run dev:token` and the dev sign-in mint tokens the
 * running stand-in vouches for. Shares no code with lib/auth.ts.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { exportJWK, generateKeyPair, importJWK, type JWK, SignJWT } from "jose";

export type ProjectShape = "new" | "legacy";

/** The HS256 secret `supabase start` uses by default (public, local only). */
export const LOCAL_JWT_SECRET = "super-secret-jwt-token-with-at-least-32-characters-long";

/** What `project.json` holds: local-only values, none a secret anywhere but on this machine. */
export interface ProjectFile {
  shape: ProjectShape;
  /** `<SUPABASE_URL>/auth/v1`, what GoTrue puts in `iss`. */
  issuer: string;
  /** The legacy shared secret (both shapes have one; only `legacy` signs user tokens with it). */
  jwtSecret: string;
  /** `new` only: the ES256 signing key as a private JWK (kid, alg, key_ops sign+verify, as GoTrue's `GOTRUE_JWT_KEYS`). */
  signingKey?: JWK;
  /** The API keys: `sb_…` in the new shape, legacy JWTs in the legacy one. */
  secretKey: string;
  publishableKey: string;
}

/** `DEV_SUPABASE_SHAPE`: `legacy` runs the legacy project; anything else but unset is refused. */
export function shapeFrom(value: string | undefined): ProjectShape {
  if (value === undefined || value === "" || value === "new") return "new";
  if (value === "legacy") return "legacy";
  throw new Error(`DEV_SUPABASE_SHAPE must be "new" or "legacy"`);
}

export function projectFilePath(dataDir: string): string {
  return join(dataDir, "auth", "project.json");
}

/** Supabase's new API key format: `sb_<kind>_` then random base64url, an underscore, a check part. */
function newApiKey(kind: "secret" | "publishable"): string {
  return `sb_${kind}_${randomBytes(16).toString("base64url")}_${randomBytes(6).toString("base64url")}`;
}

const TEN_YEARS = 10 * 365 * 24 * 3600;

/** A legacy `anon` / `service_role` key: `{iss:"supabase", ref, role, iat, exp}` signed HS256. */
export async function legacyApiKey(jwtSecret: string, role: "anon" | "service_role") {
  const iat = Math.floor(Date.now() / 1000);
  return new SignJWT({ iss: "supabase", ref: "local", role })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuedAt(iat)
    .setExpirationTime(iat + TEN_YEARS)
    .sign(new TextEncoder().encode(jwtSecret));
}

async function newSigningKey(): Promise<JWK> {
  const { privateKey } = await generateKeyPair("ES256", { extractable: true });
  return {
    ...(await exportJWK(privateKey)),
    kid: randomUUID(),
    alg: "ES256",
    key_ops: ["sign", "verify"],
  };
}

/**
 * The project for a data folder: its signing key and new-format API keys are made once and kept
 * (a restart keeps signed-in users signed in); the shape and issuer are this start's.
 */
export async function prepareProject(o: {
  dataDir: string;
  shape: ProjectShape;
  issuer: string;
  jwtSecret?: string;
}): Promise<ProjectFile> {
  const file = projectFilePath(o.dataDir);
  const kept = await readProject(file).catch(() => undefined);
  const project = await makeProject(o, kept);
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  await writeFile(file, `${JSON.stringify(project, null, 2)}\n`, { mode: 0o600 });
  await chmod(file, 0o600);
  return project;
}

/**
 * A project in memory (tests that run no stack): a fresh signing key and API keys, or those of
 * `kept` (the data folder's).
 */
export async function makeProject(
  o: { shape: ProjectShape; issuer: string; jwtSecret?: string },
  kept?: ProjectFile,
): Promise<ProjectFile> {
  const jwtSecret = o.jwtSecret ?? LOCAL_JWT_SECRET;
  const project: ProjectFile =
    o.shape === "new"
      ? {
          shape: "new",
          issuer: o.issuer,
          jwtSecret,
          signingKey: kept?.signingKey ?? (await newSigningKey()),
          secretKey: kept?.secretKey.startsWith("sb_secret_")
            ? kept.secretKey
            : newApiKey("secret"),
          publishableKey: kept?.publishableKey.startsWith("sb_publishable_")
            ? kept.publishableKey
            : newApiKey("publishable"),
        }
      : {
          shape: "legacy",
          issuer: o.issuer,
          jwtSecret,
          ...(kept?.signingKey ? { signingKey: kept.signingKey } : {}),
          secretKey: await legacyApiKey(jwtSecret, "service_role"),
          publishableKey: await legacyApiKey(jwtSecret, "anon"),
        };
  return project;
}

export async function readProject(file: string): Promise<ProjectFile> {
  return JSON.parse(await readFile(file, "utf8")) as ProjectFile;
}

/** What signs this project's user tokens now. */
export async function signerOf(
  project: Pick<ProjectFile, "shape" | "jwtSecret" | "signingKey">,
): Promise<{ alg: "ES256" | "HS256"; kid?: string; key: CryptoKey | Uint8Array }> {
  if (project.shape === "legacy" || !project.signingKey)
    return { alg: "HS256", key: new TextEncoder().encode(project.jwtSecret) };
  // GoTrue's key_ops lists sign and verify; WebCrypto gives a private EC key "sign" only.
  const { key_ops: _ops, ...jwk } = project.signingKey;
  const key = await importJWK(jwk, "ES256");
  if (!(key instanceof CryptoKey)) throw new Error("the signing key is not an ES256 key");
  return { alg: "ES256", ...(project.signingKey.kid ? { kid: project.signingKey.kid } : {}), key };
}

/** The public half of the signing key, as GoTrue publishes it (`use: "sig"`, `key_ops: ["verify"]`). */
export function publicJwkOf(signingKey: JWK): JWK {
  const { d: _d, key_ops: _ops, ...pub } = signingKey;
  return { ...pub, use: "sig", key_ops: ["verify"] };
}
