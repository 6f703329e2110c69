/**
 * The emailed links besides sign-up (internal/api/magic_link.go, otp.go, recover.go): POST /otp
 * mails a magic link (signing a new address up first), POST /recover a password reset link.
 */
import { randomBytes } from "node:crypto";
import { type Context, GotrueError, PHONE_DISABLED, type Routes } from "./gotrue-context.ts";
import { newSignup } from "./gotrue-signup.ts";

export function linkRoutes(c: Context): Routes {
  const { store, bad, validateEmail, redirectTo, mail, body, metadataOf, refusePhone } = c;
  const signup = newSignup(c);
  return {
    "POST /otp": async (request, url) => {
      const p = await body(request);
      refusePhone(p, PHONE_DISABLED.otp);
      if (typeof p.email !== "string" || !p.email)
        throw bad("validation_failed", "One of email or phone must be set");
      const email = validateEmail(p.email);
      const redirect = redirectTo(url);
      const a = await store.byEmail(email);
      if (!a?.email_confirmed_at) {
        if (!a && p.create_user === false)
          throw new GotrueError(422, "otp_disabled", "Signups not allowed for otp");
        // magic_link.go: a new address signs up with a random password (the mail confirms it)
        await signup(email, randomBytes(24).toString("base64url"), metadataOf(p.data), redirect);
        return Response.json({});
      }
      await mail(a, "magiclink", redirect);
      return Response.json({});
    },

    "POST /recover": async (request, url) => {
      const p = await body(request);
      if (typeof p.email !== "string" || !p.email)
        throw bad("validation_failed", "Password recovery requires an email");
      const a = await store.byEmail(validateEmail(p.email));
      if (a) await mail(a, "recovery", redirectTo(url));
      return Response.json({});
    },
  };
}
