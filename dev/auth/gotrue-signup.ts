/**
 * Sign-up and the mailed link (internal/api/signup.go, verify.go): POST /signup makes the user
 * and mails the confirmation; GET /verify spends a link's token and redirects with the session
 * in the fragment (the implicit flow). `newSignup` is shared with the magic link, which signs a
 * new address up first.
 */
import { randomUUID } from "node:crypto";
import { type Context, GotrueError, PHONE_DISABLED, type Routes } from "./gotrue-context.ts";
import type { Account } from "./gotrue-store.ts";

export function signupRoutes(c: Context): Routes {
  const {
    store,
    now,
    otpExpiryMs,
    bad,
    checkPassword,
    validateEmail,
    redirectTo,
    session,
    body,
    metadataOf,
    featureDisabled,
    refusePhone,
  } = c;
  const signup = newSignup(c);
  return {
    "POST /signup": async (request, url) => {
      const p = await body(request);
      refusePhone(p, PHONE_DISABLED.signup);
      const password = typeof p.password === "string" ? p.password : "";
      if (!password) throw bad("validation_failed", "Signup requires a valid password");
      checkPassword(password);
      const email = validateEmail(p.email);
      return Response.json(await signup(email, password, metadataOf(p.data), redirectTo(url)));
    },

    "GET /verify": async (_request, url) => {
      const type = url.searchParams.get("type") ?? "";
      const token = url.searchParams.get("token") ?? "";
      if (!type) throw bad("validation_failed", "Verify requires a verification type");
      if (!token) throw bad("validation_failed", "Verify requires a token or a token hash");
      if (type === "invite" || type === "email_change" || type === "email")
        throw featureDisabled(`Verification type ${type}`);
      if (type !== "signup" && type !== "recovery" && type !== "magiclink")
        throw bad("validation_failed", "Invalid email verification type");
      const redirect = redirectTo(url);
      const kind = type === "signup" ? "confirmation" : "recovery";
      const found = await store.byToken(
        kind === "confirmation" ? "confirmation_token" : "recovery_token",
        token,
      );
      const sentAt =
        found && (kind === "confirmation" ? found.confirmation_sent_at : found.recovery_sent_at);
      if (!found || !sentAt || sentAt.getTime() + otpExpiryMs < now().getTime()) {
        // prepErrorRedirectURL: the error in the fragment (implicit flow), 403 → access_denied
        const to = new URL(redirect);
        to.hash = new URLSearchParams({
          error: "access_denied",
          error_code: "otp_expired",
          error_description: "Email link is invalid or has expired",
          sb: "",
        }).toString();
        return new Response(null, { status: 303, headers: { location: to.toString() } });
      }
      const spent = (await store.spendToken(found.id, kind, now())) as Account;
      const t = await session(spent, "otp");
      // AccessTokenResponse.AsRedirectURL: url.Values.Encode, keys sorted
      const q = new URLSearchParams(
        Object.entries({
          access_token: t.access_token,
          expires_at: String(t.expires_at),
          expires_in: String(t.expires_in),
          refresh_token: t.refresh_token,
          sb: "",
          token_type: t.token_type,
          type,
        }),
      );
      return new Response(null, { status: 303, headers: { location: `${redirect}#${q}` } });
    },
  };
}

/** The signup function of one GoTrue instance. */
export function newSignup(c: Context) {
  const { o, store, now, mail, session, hashPassword, userJson } = c;
  /** signup.go: a new user, or the existing one again; confirmation mail unless autoconfirm. */
  async function signup(
    email: string,
    password: string,
    data: Record<string, unknown>,
    redirect: string,
  ) {
    let a = await store.byEmail(email);
    if (a?.email_confirmed_at) {
      if (o.autoconfirm)
        throw new GotrueError(422, "user_already_exists", "User already registered");
      // sanitizeUser: a made-up user with no identities, so the answer does not tell who is registered
      const t = now().toISOString();
      return {
        ...userJson(a),
        id: randomUUID(),
        role: "",
        email_confirmed_at: undefined,
        confirmed_at: undefined,
        last_sign_in_at: undefined,
        recovery_sent_at: undefined,
        confirmation_sent_at: t,
        created_at: t,
        updated_at: t,
        user_metadata: data,
        identities: [],
      };
    }
    a ??= await store.create({
      id: randomUUID(),
      email,
      hash: await hashPassword(password),
      metadata: data,
      now: now(),
    });
    if (o.autoconfirm) {
      const confirmed = (await store.spendToken(a.id, "confirmation", now())) as Account;
      return session(confirmed, "password");
    }
    await mail(a, "signup", redirect);
    return userJson((await store.byId(a.id)) as Account);
  }
  return signup;
}
