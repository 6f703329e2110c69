/**
 * The signed-in user (internal/api/user.go, logout.go): GET and PUT /user (a new password ends
 * the other sessions; `user_metadata` merges), POST /logout with its scopes.
 */
import { type Context, GotrueError, PHONE_DISABLED, type Routes } from "./gotrue-context.ts";
import type { Account } from "./gotrue-store.ts";

export function userRoutes(c: Context): Routes {
  const {
    store,
    now,
    bad,
    checkPassword,
    authenticated,
    body,
    hashPassword,
    featureDisabled,
    passwordMatches,
    userJson,
  } = c;
  return {
    "GET /user": async (request) => {
      const { account } = await authenticated(request);
      return Response.json(userJson(account));
    },

    "PUT /user": async (request) => {
      const { account, sessionId } = await authenticated(request);
      const p = await body(request);
      if (typeof p.email === "string" && p.email && p.email.toLowerCase() !== account.email)
        throw featureDisabled("Changing the email");
      if (typeof p.phone === "string" && p.phone) throw PHONE_DISABLED.login();
      let hash: string | undefined;
      if (typeof p.password === "string") {
        checkPassword(p.password);
        if (await passwordMatches(p.password, account.encrypted_password))
          throw new GotrueError(
            422,
            "same_password",
            "New password should be different from the old password.",
          );
        hash = await hashPassword(p.password);
      }
      let metadata: Record<string, unknown> | undefined;
      if (p.data && typeof p.data === "object") {
        // UpdateUserMetaData: merge, a null value removes the key
        metadata = { ...account.user_metadata };
        for (const [k, v] of Object.entries(p.data)) {
          if (v === null) delete metadata[k];
          else metadata[k] = v;
        }
      }
      const updated = (await store.update(
        account.id,
        { ...(hash ? { hash } : {}), ...(metadata ? { metadata } : {}) },
        now(),
      )) as Account;
      // a new password ends the user's other sessions (models.User.UpdatePassword)
      if (hash) await store.endSessions(account.id, sessionId, "others");
      return Response.json(userJson(updated));
    },

    "POST /logout": async (request, url) => {
      const scope = url.searchParams.get("scope") ?? "global";
      if (scope !== "global" && scope !== "local" && scope !== "others")
        throw bad("validation_failed", `Unsupported logout scope "${scope}"`);
      const { account, sessionId } = await authenticated(request);
      await store.endSessions(account.id, sessionId, scope);
      return new Response(null, { status: 204 });
    },
  };
}
