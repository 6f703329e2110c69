/**
 * A local stand-in for Supabase Auth (GoTrue) for email users: exactly what the page uses,
 * answered as supabase/auth's handlers answer (internal/api/signup.go, verify.go, token.go,
 * token_refresh.go, magic_link.go, otp.go, recover.go, user.go, logout.go, auth.go, mail.go,
 * errors.go, apierrors/errorcode.go), behind the gateway's `apikey` check.
 *
 *   POST /auth/v1/signup        confirmations on: 200 with the user and no session, a mail sent
 *   GET  /auth/v1/verify        the emailed link: 303 to redirect_to with the session in the
 *                               fragment (the implicit flow, auth-js's default `flowType`)
 *   POST /auth/v1/token?grant_type=password | refresh_token
 *   POST /auth/v1/otp           magic link (signs the address up first when it is new)
 *   POST /auth/v1/recover       password reset link (type=recovery)
 *   GET  /auth/v1/user, PUT /auth/v1/user (password, user_metadata)
 *   POST /auth/v1/logout?scope=global|local|others
 *   PUT  /auth/v1/admin/users/{id}  the service role sets app_metadata / user_metadata /
 *                               email_confirm (admin.go adminUserUpdate; gotrue-admin.ts)
 *
 * Errors carry GoTrue's two shapes: `{"code": 400, "error_code": "…", "msg": "…"}` and, when the
 * request sends `X-Supabase-Api-Version: 2024-01-01` (auth-js does), `{"code": "…", "message":
 * "…"}` with that header echoed. What GoTrue serves and this stand-in does not is refused as
 * GoTrue refuses it switched off (`feature_disabled`, `phone_provider_disabled`, ...:
 * gotrue-context.ts `disabled`); any other path chi's 404 (`404 page not found`). The gateway
 * in front refuses a secret key (`sb_secret_…`) from a browser, as the platform does.
 *
 * The access token is signed by the caller's `sign` (the project's ES256 key, or a test's) and
 * checked by its `verify`: no key lives here. Users: gotrue-store.ts. Mail: mailbox.ts. The flows:
 * gotrue-signup.ts, gotrue-token.ts, gotrue-links.ts, gotrue-user.ts, on gotrue-context.ts.
 * Shares no code with the app.
 */

import { adminUserUpdate } from "./gotrue-admin.ts";
import {
  API_VERSION,
  createContext,
  disabled,
  featureDisabled,
  GotrueError,
  type GotrueOptions,
  type Routes,
} from "./gotrue-context.ts";
import { linkRoutes } from "./gotrue-links.ts";
import { signupRoutes } from "./gotrue-signup.ts";
import { tokenRoutes } from "./gotrue-token.ts";
import { userRoutes } from "./gotrue-user.ts";

export type { GotrueClaims, GotrueOptions } from "./gotrue-context.ts";

/**
 * Paths GoTrue serves that this stand-in does not, with all below them: each
 * refused as GoTrue answers with that feature switched off (api.go's middleware, external.go,
 * mfa.go), not with chi's 404.
 */
const NOT_SERVED: Record<string, (what: string) => GotrueError> = {
  "/settings": featureDisabled,
  "/authorize": () =>
    disabled(400, "provider_disabled", "Unsupported provider: provider is not enabled"),
  "/callback": () =>
    disabled(400, "provider_disabled", "Unsupported provider: provider is not enabled"),
  "/magiclink": featureDisabled,
  "/invite": featureDisabled,
  "/resend": featureDisabled,
  "/reauthenticate": featureDisabled,
  "/sso": () => disabled(404, "saml_provider_disabled", "SAML 2.0 is disabled"),
  "/factors": () => disabled(422, "mfa_totp_enroll_not_enabled", "MFA enroll is disabled for TOTP"),
  "/admin": featureDisabled,
  "/user/identities": () => disabled(404, "manual_linking_disabled", "Manual linking is disabled"),
  "/health": featureDisabled,
  "/oauth": () => disabled(404, "feature_disabled", "OAuth server is disabled"),
};
const ROUTES: Record<string, string[]> = {
  "/signup": ["POST"],
  "/verify": ["GET"],
  "/token": ["POST"],
  "/otp": ["POST"],
  "/recover": ["POST"],
  "/user": ["GET", "PUT"],
  "/logout": ["POST"],
};

export function createGotrue(o: GotrueOptions) {
  const c = createContext(o);
  const { store } = c;
  const routes: Routes = {
    ...signupRoutes(c),
    ...tokenRoutes(c),
    ...linkRoutes(c),
    ...userRoutes(c),
  };

  /** The gateway in front: the key check (verify is an open route there, as mail links carry no key). */
  function gateway(request: Request, path: string): Response | undefined {
    if (path === "/verify") return undefined;
    const key = request.headers.get("apikey") ?? new URL(request.url).searchParams.get("apikey");
    if (!key)
      return Response.json(
        {
          message: "No API key found in request",
          hint: "No `apikey` request header or url param was found.",
        },
        { status: 401 },
      );
    if (!o.apiKeys().has(key))
      return Response.json(
        {
          message: "Invalid API key",
          hint: "Double check your Supabase `anon` or `service_role` API key.",
        },
        { status: 401 },
      );
    // The platform's gateway keeps secret keys to servers, on every API (a browser is told by
    // its User-Agent): Auth's as well as the REST API's.
    if (key.startsWith("sb_secret_") && /^Mozilla\//.test(request.headers.get("user-agent") ?? ""))
      return Response.json(
        { message: "Forbidden use of secret API key in browser" },
        { status: 401 },
      );
    return undefined;
  }

  function errorResponse(e: GotrueError, request: Request): Response {
    const asked = request.headers.get(API_VERSION) ?? "";
    const versioned = /^\d{4}-\d{2}-\d{2}$/.test(asked) && asked >= "2024-01-01";
    const extra = e.reasons ? { weak_password: { reasons: e.reasons } } : {};
    const headers: Record<string, string> = versioned ? { [API_VERSION]: "2024-01-01" } : {};
    if (!versioned || !e.reasons) headers["x-sb-error-code"] = e.code;
    const payload = versioned
      ? { code: e.code, message: e.message, ...extra }
      : { code: e.status, error_code: e.code, msg: e.message, ...extra };
    return Response.json(payload, { status: e.status, headers });
  }

  async function route(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const path = url.pathname.replace(/^\/auth\/v1/, "").replace(/\/+$/, "") || "/";
    const refused = gateway(request, path);
    if (refused) return refused;
    const adminUser = /^\/admin\/users\/([^/]+)$/.exec(path);
    if (adminUser && request.method === "PUT") {
      await store.ready();
      try {
        return await adminUserUpdate(c, request, decodeURIComponent(adminUser[1] ?? ""));
      } catch (e) {
        if (e instanceof GotrueError) return errorResponse(e, request);
        throw e;
      }
    }
    const methods = ROUTES[path];
    if (!methods) {
      const served = Object.keys(NOT_SERVED).find((p) => path === p || path.startsWith(`${p}/`));
      const refuse = served ? NOT_SERVED[served] : undefined;
      if (refuse) return errorResponse(refuse(`${request.method} /auth/v1${path}`), request);
      return new Response("404 page not found\n", {
        status: 404,
        headers: { "content-type": "text/plain; charset=utf-8" },
      });
    }
    const handler = routes[`${request.method} ${path}`];
    if (!handler) {
      if (path === "/verify" && request.method === "POST")
        return errorResponse(featureDisabled("POST /auth/v1/verify (a typed code)"), request);
      return new Response(null, { status: 405 });
    }
    await store.ready();
    try {
      return await handler(request, url);
    } catch (e) {
      if (e instanceof GotrueError) return errorResponse(e, request);
      throw e;
    }
  }

  return {
    /** Answers one request under `/auth/v1`, CORS included (rs/cors in api.go: any origin, credentials). */
    async handle(request: Request): Promise<Response> {
      const origin = request.headers.get("origin");
      const cors: Record<string, string> = origin
        ? {
            "access-control-allow-origin": origin,
            "access-control-allow-credentials": "true",
            vary: "Origin",
            "access-control-expose-headers": `X-Total-Count, Link, ${API_VERSION}`,
          }
        : {};
      if (
        request.method === "OPTIONS" &&
        origin &&
        request.headers.get("access-control-request-method")
      ) {
        return new Response(null, {
          status: 204,
          headers: {
            ...cors,
            "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE",
            "access-control-allow-headers":
              request.headers.get("access-control-request-headers") ?? "",
          },
        });
      }
      const response = await route(request);
      const headers = new Headers(response.headers);
      for (const [k, v] of Object.entries(cors)) headers.set(k, v);
      headers.set("cache-control", "no-store");
      return new Response(response.body, { status: response.status, headers });
    },
    /** Creates the stand-in's schema now (else on the first request). */
    ready: () => store.ready(),
  };
}

export type Gotrue = ReturnType<typeof createGotrue>;
