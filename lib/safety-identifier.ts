/**
 * The end user's safety identifier for OpenAI (`safety_identifier`): a stable id per user that
 * lets OpenAI attribute abuse to one user instead of the whole project, and tells OpenAI nothing
 * about who the user is.
 */
import { createHmac } from "node:crypto";

/*
 * Why an HMAC under a server-side key, and not a plain hash of the user id.
 *
 * OpenAI asks for a hash of the username or email. Ours is a Supabase user id, a random UUID
 * (122 random bits), so sha256(uuid) could not be reversed by guessing. But it is a public
 * function of an id that is not a secret: it is the `sub` of every access token the user holds,
 * it is in our job rows and our log lines (`userId`), in Supabase Auth, and in anything else
 * that ever saw the account. Anyone with one of those (a log sink, a leaked token, another
 * service that hashes the same id the same way) could compute the identifier and link the
 * user to what OpenAI holds about it, or link OpenAI-side data back to the account. An HMAC
 * under a key only the server holds breaks that link: without the key the identifier is a
 * random-looking string, unrelated to any id that circulates; with it, and only with it, the
 * operator can answer an abuse notice by recomputing the identifier of a suspected account.
 * It is not a credential, so replaying it gains nothing: it only labels requests we make.
 * The key must stay the same for the identifier to stay stable (rotating it starts every
 * user's history at OpenAI afresh, which is also the remedy if the key leaks).
 *
 * The output is hex, 64 characters: OpenAI's limit for safety_identifier is 64.
 */

/**
 * HMAC-SHA256 of the user id under `key`, hex (64 characters); undefined when no key is
 * configured (then no identifier is sent, never the raw id).
 *
 * @example
 * safetyIdentifier("7b0c2f0e-1d7e-4a55-9d2a-0c7d1f1f0a01", key); // "3f1c…" (64 hex characters)
 */
export function safetyIdentifier(userId: string, key: string | undefined): string | undefined {
  if (!key) return undefined;
  return createHmac("sha256", key).update(`quota-jobs safety identifier:${userId}`).digest("hex");
}
