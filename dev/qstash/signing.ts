import { createHash, randomBytes } from "node:crypto";
import { SignJWT } from "jose";

/**
 * The Upstash-Signature JWT: HS256 over the key string's UTF-8 bytes, iss "Upstash",
 * sub = the exact destination URL, iat/nbf now, exp now+5 min, body = base64url(sha256(raw)).
 * The body hash keeps its "=" padding, as in the QStash docs; the SDK Receiver accepts both.
 */
export async function signDelivery(
  key: string,
  url: string,
  body: Uint8Array,
  nowMs = Date.now(),
): Promise<string> {
  const now = Math.floor(nowMs / 1000);
  const bodyHash = createHash("sha256")
    .update(body)
    .digest("base64")
    .replaceAll("+", "-")
    .replaceAll("/", "_");
  return await new SignJWT({ body: bodyHash })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuer("Upstash")
    .setSubject(url)
    .setIssuedAt(now)
    .setNotBefore(now)
    .setExpirationTime(now + 300)
    .setJti(`jwt_${randomBytes(16).toString("hex")}`)
    .sign(new TextEncoder().encode(key));
}
