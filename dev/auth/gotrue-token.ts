/**
 * POST /token (internal/api/token.go, token_refresh.go): `grant_type=password` signs a confirmed
 * email user in; `grant_type=refresh_token` rotates the refresh token (a used one is
 * `refresh_token_already_used`). PKCE, id_token and web3 grants answer 501.
 */
import { type Context, REFRESH_TOKEN, type Routes } from "./gotrue-context.ts";
import type { Account } from "./gotrue-store.ts";

export function tokenRoutes(c: Context): Routes {
  const {
    store,
    now,
    bad,
    session,
    tokenResponse,
    body,
    newRefreshToken,
    notServed,
    passwordMatches,
    refusePhone,
  } = c;
  return {
    "POST /token": async (request, url) => {
      const grant = url.searchParams.get("grant_type") ?? "";
      if (grant === "pkce" || grant === "id_token" || grant === "web3")
        throw notServed(`grant_type=${grant} is not served by the local Auth stand-in`);
      if (grant !== "password" && grant !== "refresh_token")
        throw bad("invalid_credentials", "unsupported_grant_type");
      const p = await body(request);
      if (grant === "refresh_token") {
        const token = typeof p.refresh_token === "string" ? p.refresh_token : "";
        if (!REFRESH_TOKEN.test(token))
          throw bad("validation_failed", "Refresh token is not valid");
        const next = newRefreshToken();
        const t = now();
        const rotated = await store.rotate(token, next, t);
        if (!rotated)
          throw bad("refresh_token_not_found", "Invalid Refresh Token: Refresh Token Not Found");
        if (rotated === "revoked")
          throw bad("refresh_token_already_used", "Invalid Refresh Token: Already Used");
        const a = (await store.byId(rotated.user_id)) as Account;
        return Response.json(
          await tokenResponse(a, rotated.session_id, next, rotated.amr_method, t),
        );
      }
      refusePhone(p, "Phone sign-in");
      if (typeof p.email !== "string" || !p.email)
        throw bad("validation_failed", "missing email or phone");
      const a = await store.byEmail(p.email.trim().toLowerCase());
      const password = typeof p.password === "string" ? p.password : "";
      if (!a || !(await passwordMatches(password, a.encrypted_password)))
        throw bad("invalid_credentials", "Invalid login credentials");
      if (!a.email_confirmed_at) throw bad("email_not_confirmed", "Email not confirmed");
      return Response.json(await session(a, "password"));
    },
  };
}
