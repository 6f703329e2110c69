/**
 * An invitation goes out as Supabase Auth's own email: a magic link (`signInWithOtp`, which signs
 * a new address up first) whose redirect is the page with the invitation's token. Whoever follows
 * it arrives signed in as that address, and the page accepts the invitation for them. The app
 * sends no mail of its own, so it holds no mail credentials; Auth's mail limits (per address
 * and per hour) apply, and the project's redirect allow list must hold `APP_URL/**`.
 */
import { type Config, supabaseKeys } from "./config.ts";
import { HttpError } from "./errors.ts";

/** The page's address that accepts `token` (the redirect of the mailed link). */
export function acceptUrl(config: Config, token: string): string {
  const url = new URL("/", config.appUrl);
  url.searchParams.set("invitation", token);
  return url.href;
}

/**
 * Mails the invitation to `email`: Auth's `POST /auth/v1/otp` as auth-js's `signInWithOtp`
 * sends it (`{email, create_user}`, the redirect as `redirect_to`, the key on `apikey`), one
 * request with no session to keep. auth-js itself is not used here: its CommonJS build pulls
 * in its whole client for this one call. A refusal is an HttpError the route answers (429 with
 * Retry-After when Auth's mail limit is reached, 502 otherwise); the caller then revokes the
 * invitation, since nobody received its token.
 */
export async function mailInvitation(
  config: Config,
  email: string,
  token: string,
  fetcher: typeof fetch = fetch,
): Promise<void> {
  const keys = supabaseKeys(config);
  const base = config.supabaseUrl.endsWith("/") ? config.supabaseUrl : `${config.supabaseUrl}/`;
  const url = new URL("auth/v1/otp", base);
  url.searchParams.set("redirect_to", acceptUrl(config, token));
  const res = await fetcher(url, {
    method: "POST",
    headers: { apikey: keys.publishable ?? keys.server, "content-type": "application/json" },
    body: JSON.stringify({ email, create_user: true, data: {} }),
    signal: AbortSignal.timeout(10_000),
  }).catch(() => null);
  if (res?.ok) return;
  await res?.body?.cancel().catch(() => undefined);
  if (res?.status === 429)
    throw new HttpError(
      429,
      "mail_rate_limited",
      "Too many emails were sent to this address or from this project just now. Try again later.",
      { "retry-after": "60" },
    );
  throw new HttpError(502, "mail_failed", "The invitation email could not be sent.");
}
