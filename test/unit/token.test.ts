import { randomUUID } from "node:crypto";
import { decodeJwt, decodeProtectedHeader, jwtVerify } from "jose";
import { describe, expect, test } from "vitest";
import { LOCAL_ISSUER, LOCAL_JWT_SECRET, mintUserToken } from "../../dev/token.ts";

describe("mintUserToken", () => {
  test("has the claims Supabase Auth puts in a user's access token", async () => {
    const userId = randomUUID();
    const now = new Date("2026-03-01T12:00:00Z");
    const token = await mintUserToken({
      secret: LOCAL_JWT_SECRET,
      userId,
      now,
      expiresInSeconds: 600,
    });
    expect(decodeProtectedHeader(token)).toEqual({ alg: "HS256", typ: "JWT" });
    const claims = decodeJwt(token);
    expect(claims).toMatchObject({
      iss: LOCAL_ISSUER,
      aud: "authenticated",
      role: "authenticated",
      sub: userId,
      aal: "aal1",
      is_anonymous: false,
      iat: now.getTime() / 1000,
      exp: now.getTime() / 1000 + 600,
    });
    expect(claims.session_id).toMatch(/^[0-9a-f-]{36}$/);
  });

  test("is signed with the given secret; role and aud can be overridden", async () => {
    const token = await mintUserToken({
      secret: LOCAL_JWT_SECRET,
      userId: randomUUID(),
      role: "anon",
      aud: "other",
    });
    const { payload } = await jwtVerify(token, new TextEncoder().encode(LOCAL_JWT_SECRET), {
      algorithms: ["HS256"],
    });
    expect(payload).toMatchObject({ role: "anon", aud: "other" });
  });
});
