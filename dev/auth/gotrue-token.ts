/**
 * POST /token (internal/api/token.go, token_refresh.go, internal/tokens/service.go
 * RefreshTokenGrant): `grant_type=password` signs a confirmed email user in;
 * `grant_type=refresh_token` rotates the refresh token. A revoked one (gotrue-store.ts `rotate`)
 * is GoTrue's: the parent of the session's active token gets that token back (the client lost
 * the answer), any other within the reuse interval gets a new one, and past it the whole
 * session's tokens are revoked and it is `refresh_token_already_used`. The PKCE, id_token and
 * web3 grants are refused as GoTrue refuses them switched off.
 */
import {
  type Context,
  disabled,
  PHONE_DISABLED,
  REFRESH_TOKEN,
  type Routes,
} from "./gotrue-context.ts";
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
    featureDisabled,
    passwordMatches,
    refusePhone,
    o,
  } = c;
  // GOTRUE_SECURITY_REFRESH_TOKEN_REUSE_INTERVAL (config.toml refresh_token_reuse_interval)
  const reuseIntervalMs = (o.refreshTokenReuseIntervalSeconds ?? 10) * 1000;
  return {
    "POST /token": async (request, url) => {
      const grant = url.searchParams.get("grant_type") ?? "";
      if (grant === "pkce") throw featureDisabled("The PKCE flow (grant_type=pkce)");
      if (grant === "id_token") throw disabled(400, "provider_disabled", "Provider is not enabled");
      if (grant === "web3")
        throw disabled(422, "web3_provider_disabled", "Web3 provider is disabled");
      if (grant !== "password" && grant !== "refresh_token")
        throw bad("invalid_credentials", "unsupported_grant_type");
      const p = await body(request);
      if (grant === "refresh_token") {
        const token = typeof p.refresh_token === "string" ? p.refresh_token : "";
        if (!REFRESH_TOKEN.test(token))
          throw bad("validation_failed", "Refresh token is not valid");
        const t = now();
        const rotated = await store.rotate(token, newRefreshToken(), t, reuseIntervalMs);
        if (!rotated)
          throw bad("refresh_token_not_found", "Invalid Refresh Token: Refresh Token Not Found");
        if (rotated === "reused")
          throw bad("refresh_token_already_used", "Invalid Refresh Token: Already Used");
        const a = (await store.byId(rotated.user_id)) as Account;
        return Response.json(
          await tokenResponse(a, rotated.session_id, rotated.issued, rotated.amr_method, t),
        );
      }
      refusePhone(p, PHONE_DISABLED.login);
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
