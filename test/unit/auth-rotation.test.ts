/**
 * Token verification by algorithm through a whole signing-key rotation, as Supabase runs one
 * (legacy HS256 secret → standby asymmetric key → rotated → legacy revoked). Real jose keys; the
 * project's JWKS is served by a real local HTTP server answering as Supabase Auth (GoTrue's
 * `WellKnownJwks`: `{"keys": [...]}`, public keys only with `use: "sig"` and
 * `key_ops: ["verify"]`, never the HMAC secret, `Cache-Control: public, max-age=600`).
 */
import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { exportJWK, generateKeyPair, type JWK, SignJWT } from "jose";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { createAuth } from "../../lib/auth.ts";

const LEGACY_SECRET = "legacy-project-jwt-secret-with-more-than-32-chars";
const userId = randomUUID();

let server: Server;
let supabaseUrl: string;
let published: JWK[] = [];
let jwksStatus = 200;
let jwksRequests = 0;

let es256: { privateKey: CryptoKey; kid: string; jwk: JWK };
let rs256: { privateKey: CryptoKey; kid: string; jwk: JWK };
let eddsa: { privateKey: CryptoKey; kid: string; jwk: JWK };

async function keyPair(alg: "ES256" | "RS256" | "EdDSA") {
  const pair = await generateKeyPair(alg, { extractable: true });
  const kid = randomUUID();
  const jwk = {
    ...(await exportJWK(pair.publicKey)),
    kid,
    alg,
    use: "sig",
    key_ops: ["verify"],
  };
  return { privateKey: pair.privateKey, kid, jwk };
}

beforeAll(async () => {
  [es256, rs256, eddsa] = await Promise.all([keyPair("ES256"), keyPair("RS256"), keyPair("EdDSA")]);
  server = createServer((req, res) => {
    if (req.url !== "/auth/v1/.well-known/jwks.json" || req.method !== "GET") {
      res.writeHead(404, { "content-type": "application/json" }).end('{"message":"no route"}');
      return;
    }
    jwksRequests++;
    if (jwksStatus !== 200) {
      res
        .writeHead(jwksStatus, { "content-type": "application/json" })
        .end('{"message":"An invalid response was received from the upstream server"}');
      return;
    }
    res
      .writeHead(200, {
        "content-type": "application/json",
        "cache-control": "public, max-age=600",
      })
      .end(JSON.stringify({ keys: published }));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  supabaseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

type Claims = Record<string, unknown>;
const userClaims = (): Claims => ({
  role: "authenticated",
  aal: "aal1",
  session_id: randomUUID(),
  is_anonymous: false,
});

function builder(claims: Claims, iss: string) {
  return new SignJWT({ ...userClaims(), ...claims })
    .setIssuer(iss)
    .setAudience("authenticated")
    .setSubject(userId)
    .setIssuedAt()
    .setExpirationTime("1h");
}

const hs256 = (claims: Claims = {}, iss = `${supabaseUrl}/auth/v1`, secret = LEGACY_SECRET) =>
  builder(claims, iss)
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .sign(new TextEncoder().encode(secret));

const asym = (
  key: { privateKey: CryptoKey; kid: string; jwk: JWK },
  claims: Claims = {},
  iss = `${supabaseUrl}/auth/v1`,
) =>
  builder(claims, iss)
    .setProtectedHeader({ alg: key.jwk.alg as string, typ: "JWT", kid: key.kid })
    .sign(key.privateKey);

/** A fresh function instance (its own key cache), as a new deployment or a cold start has. */
function instance(jwtSecret?: string) {
  const fetchImpl: typeof fetch = (input, init) => fetch(input, init);
  return createAuth({ jwtSecret, supabaseUrl, fetch: fetchImpl });
}

async function outcome(auth: ReturnType<typeof createAuth>, token: string) {
  return auth
    .userFromRequest(
      new Request("http://127.0.0.1:3000/api/usage", {
        headers: { authorization: `Bearer ${token}` },
      }),
    )
    .then(
      (user) => user.userId,
      (err: { status?: number }) => err.status ?? "threw",
    );
}

describe("a project created today, with the Marketplace-synced SUPABASE_JWT_SECRET still set", () => {
  test("an ES256 user token is accepted (it was refused with 401 when the secret meant HS256 only)", async () => {
    published = [es256.jwk];
    expect(await outcome(instance(LEGACY_SECRET), await asym(es256))).toBe(userId);
  });
});

describe("a rotation from the legacy secret to an asymmetric key, every phase", () => {
  test("1. legacy only: HS256 accepted; an ES256 token (its key not published) refused", async () => {
    published = [];
    const auth = instance(LEGACY_SECRET);
    expect(await outcome(auth, await hs256())).toBe(userId);
    expect(await outcome(auth, await asym(es256))).toBe(401);
  });

  test("2. standby asymmetric key published, still signing HS256: both accepted", async () => {
    published = [es256.jwk];
    const auth = instance(LEGACY_SECRET);
    expect(await outcome(auth, await hs256())).toBe(userId);
    expect(await outcome(auth, await asym(es256))).toBe(userId);
  });

  test("3. rotated (ES256 signs, legacy previously used): old HS256 and new ES256 both accepted", async () => {
    published = [es256.jwk];
    const auth = instance(LEGACY_SECRET);
    expect(await outcome(auth, await asym(es256))).toBe(userId);
    expect(await outcome(auth, await hs256())).toBe(userId);
  });

  test("4. legacy revoked, SUPABASE_JWT_SECRET removed: HS256 refused with 401 (never 500), ES256 accepted", async () => {
    published = [es256.jwk];
    const auth = instance(undefined);
    expect(await outcome(auth, await asym(es256))).toBe(userId);
    expect(await outcome(auth, await hs256())).toBe(401);
  });

  test("a secret still set after Supabase revoked it: a token forged with another secret is refused", async () => {
    published = [es256.jwk];
    const forged = await hs256({}, `${supabaseUrl}/auth/v1`, "x".repeat(40));
    expect(await outcome(instance(LEGACY_SECRET), forged)).toBe(401);
  });
});

describe("each algorithm goes to its own key", () => {
  test("RS256 and EdDSA tokens verify against the JWKS by kid", async () => {
    published = [es256.jwk, rs256.jwk, eddsa.jwk];
    const auth = instance(undefined);
    expect(await outcome(auth, await asym(rs256))).toBe(userId);
    expect(await outcome(auth, await asym(eddsa))).toBe(userId);
    expect(await outcome(auth, await asym(es256))).toBe(userId);
  });

  test("an HS256 token whose signature is the JWKS's public key is refused (no alg confusion)", async () => {
    published = [es256.jwk];
    const pem = JSON.stringify(es256.jwk);
    const token = await hs256({}, `${supabaseUrl}/auth/v1`, pem);
    expect(await outcome(instance(undefined), token)).toBe(401);
    expect(await outcome(instance(LEGACY_SECRET), token)).toBe(401);
  });

  test("a kid the JWKS does not list, and an algorithm Supabase does not use, are 401", async () => {
    published = [es256.jwk];
    const other = await keyPair("ES256");
    expect(await outcome(instance(LEGACY_SECRET), await asym(other))).toBe(401);
    const ps256 = await generateKeyPair("PS256");
    const token = await builder({}, `${supabaseUrl}/auth/v1`)
      .setProtectedHeader({ alg: "PS256", kid: rs256.kid })
      .sign(ps256.privateKey);
    expect(await outcome(instance(LEGACY_SECRET), token)).toBe(401);
  });

  test("iss must be this project's Auth: another issuer is refused for HS256 and ES256", async () => {
    published = [es256.jwk];
    const auth = instance(LEGACY_SECRET);
    const elsewhere = "https://otherproject.supabase.co/auth/v1";
    expect(await outcome(auth, await hs256({}, elsewhere))).toBe(401);
    expect(await outcome(auth, await asym(es256, {}, elsewhere))).toBe(401);
    expect(await outcome(auth, await asym(es256, {}, `${supabaseUrl}/auth/v1/`))).toBe(401);
  });

  test("a JWKS that cannot be fetched is 503 for an ES256 token; HS256 still verifies", async () => {
    published = [es256.jwk];
    jwksStatus = 502;
    try {
      const auth = instance(LEGACY_SECRET);
      expect(await outcome(auth, await asym(es256))).toBe(503);
      expect(await outcome(auth, await hs256())).toBe(userId);
    } finally {
      jwksStatus = 200;
    }
  });

  test("the key set is fetched once per instance, not per request", async () => {
    published = [es256.jwk];
    const auth = instance(undefined);
    const before = jwksRequests;
    for (let i = 0; i < 5; i++) expect(await outcome(auth, await asym(es256))).toBe(userId);
    expect(jwksRequests - before).toBe(1);
  });
});
