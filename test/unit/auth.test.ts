import { randomUUID } from "node:crypto";
import { exportJWK, generateKeyPair, SignJWT } from "jose";
import { HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { LOCAL_JWT_SECRET, mintUserToken } from "../../dev/token.ts";
import { createAuth } from "../../lib/auth.ts";

const supabaseUrl = "https://abcdefghijklmnop.supabase.co";
const issuer = `${supabaseUrl}/auth/v1`;
const jwksUrl = `${issuer}/.well-known/jwks.json`;
const userId = randomUUID();
const auth = createAuth({ jwtSecret: LOCAL_JWT_SECRET, supabaseUrl });

const request = (authorization?: string) =>
  new Request(
    "http://127.0.0.1:3000/api/jobs",
    authorization ? { headers: { authorization } } : {},
  );

async function rejects401(authorization?: string, a = auth) {
  const err = await a.userFromRequest(request(authorization)).then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toMatchObject({
    status: 401,
    code: "unauthorized",
    headers: { "www-authenticate": "Bearer" },
  });
  // No detail about why: the same message whatever was wrong.
  expect((err as Error).message).toBe("A valid access token is required.");
}

describe("HS256 with SUPABASE_JWT_SECRET", () => {
  test("a valid user token gives its sub", async () => {
    const token = await mintUserToken({ issuer, secret: LOCAL_JWT_SECRET, userId });
    expect(await auth.userFromRequest(request(`Bearer ${token}`))).toEqual({ userId });
  });

  test("an expired token is refused", async () => {
    const token = await mintUserToken({
      issuer,
      secret: LOCAL_JWT_SECRET,
      userId,
      now: new Date(Date.now() - 7_200_000),
      expiresInSeconds: 3600,
    });
    await rejects401(`Bearer ${token}`);
  });

  test("a token signed with another secret is refused", async () => {
    const token = await mintUserToken({
      issuer,
      secret: "another-secret-that-is-at-least-32-characters",
      userId,
    });
    await rejects401(`Bearer ${token}`);
  });

  test('alg "none" is refused', async () => {
    const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString("base64url");
    const now = Math.floor(Date.now() / 1000);
    const token = `${b64({ alg: "none", typ: "JWT" })}.${b64({ sub: userId, aud: "authenticated", role: "authenticated", exp: now + 600 })}.`;
    await rejects401(`Bearer ${token}`);
  });

  test("the wrong audience is refused", async () => {
    await rejects401(
      `Bearer ${await mintUserToken({ issuer, secret: LOCAL_JWT_SECRET, userId, aud: "other" })}`,
    );
  });

  test("anon and service_role tokens are not a signed-in user", async () => {
    for (const role of ["anon", "service_role"]) {
      await rejects401(
        `Bearer ${await mintUserToken({ issuer, secret: LOCAL_JWT_SECRET, userId, role })}`,
      );
    }
  });

  test("missing header, another scheme, and garbage are refused", async () => {
    await rejects401(undefined);
    await rejects401("Basic dXNlcjpwYXNz");
    await rejects401("Bearer ");
    await rejects401("Bearer not.a.jwt");
    await rejects401("Bearer abc");
  });

  test("a sub that is not a UUID is refused", async () => {
    await rejects401(
      `Bearer ${await mintUserToken({ issuer, secret: LOCAL_JWT_SECRET, userId: "admin" })}`,
    );
  });

  const hs256 = (claims: Record<string, unknown>, iat = Math.floor(Date.now() / 1000)) =>
    new SignJWT({ role: "authenticated", ...claims })
      .setProtectedHeader({ alg: "HS256" })
      .setIssuer(issuer)
      .setSubject(userId)
      .setIssuedAt(iat)
      .setExpirationTime(iat + 3600)
      .sign(new TextEncoder().encode(LOCAL_JWT_SECRET));

  test("an iat more than a minute ahead is refused; one within the minute is skew", async () => {
    const now = Math.floor(Date.now() / 1000);
    await rejects401(`Bearer ${await hs256({ aud: "authenticated" }, now + 120)}`);
    await rejects401(`Bearer ${await hs256({ aud: "authenticated" }, now + 3600)}`);
    const skewed = await hs256({ aud: "authenticated" }, now + 30);
    expect(await auth.userFromRequest(request(`Bearer ${skewed}`))).toEqual({ userId });
  });

  test("aud is read as GoTrue reads it: the one audience, as a string or a one-element array", async () => {
    const one = await hs256({ aud: ["authenticated"] });
    expect(await auth.userFromRequest(request(`Bearer ${one}`))).toEqual({ userId });
    for (const aud of [["authenticated", "other"], ["other", "authenticated"], [], ["other"]])
      await rejects401(`Bearer ${await hs256({ aud })}`);
  });

  test("a token without exp is refused", async () => {
    const token = await new SignJWT({ role: "authenticated" })
      .setProtectedHeader({ alg: "HS256" })
      .setIssuer(issuer)
      .setAudience("authenticated")
      .setSubject(userId)
      .sign(new TextEncoder().encode(LOCAL_JWT_SECRET));
    await rejects401(`Bearer ${token}`);
  });
});

describe("JWKS (asymmetric signing keys)", () => {
  const kid = "key-1";
  let privateKey: CryptoKey;
  let jwks: { keys: object[] };
  const server = setupServer(
    http.get(jwksUrl, () =>
      HttpResponse.json(jwks, { headers: { "cache-control": "public, max-age=600" } }),
    ),
  );

  beforeAll(async () => {
    const pair = await generateKeyPair("ES256", { extractable: true });
    privateKey = pair.privateKey;
    jwks = {
      keys: [
        {
          ...(await exportJWK(pair.publicKey)),
          kid,
          alg: "ES256",
          use: "sig",
          key_ops: ["verify"],
        },
      ],
    };
    server.listen({ onUnhandledRequest: "error" });
  });
  afterAll(() => server.close());

  const sign = (claims: Record<string, unknown>, key = privateKey, keyId = kid) =>
    new SignJWT({ role: "authenticated", aal: "aal1", session_id: randomUUID(), ...claims })
      .setProtectedHeader({ alg: "ES256", typ: "JWT", kid: keyId })
      .setIssuer(`${supabaseUrl}/auth/v1`)
      .setAudience("authenticated")
      .setSubject(userId)
      .setIssuedAt()
      .setExpirationTime("1h")
      .sign(key);

  test("an ES256 token verifies against the project's JWKS", async () => {
    const jwksAuth = createAuth({ supabaseUrl });
    expect(await jwksAuth.userFromRequest(request(`Bearer ${await sign({})}`))).toEqual({ userId });
  });

  test("a token from another key pair is refused", async () => {
    const other = await generateKeyPair("ES256");
    await rejects401(
      `Bearer ${await sign({}, other.privateKey, "unknown-kid")}`,
      createAuth({ supabaseUrl }),
    );
  });

  test("an HS256 token is refused when only the JWKS is configured", async () => {
    const token = await mintUserToken({ issuer, secret: LOCAL_JWT_SECRET, userId });
    await rejects401(`Bearer ${token}`, createAuth({ supabaseUrl }));
  });

  test("an unreachable JWKS is a 503, not a 401 that would sign the user out", async () => {
    // Another project URL, so its key set is not already cached; its endpoint answers 503.
    const otherUrl = "https://zyxwvutsrqponmlk.supabase.co";
    server.use(
      http.get(`${otherUrl}/auth/v1/.well-known/jwks.json`, () =>
        HttpResponse.json({ message: "upstream unavailable" }, { status: 503 }),
      ),
    );
    const err = await createAuth({ supabaseUrl: otherUrl })
      .userFromRequest(request(`Bearer ${await sign({})}`))
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 503, code: "unavailable" });
  });
});
