/**
 * The admin API's user update, as supabase/auth has it (internal/api/admin.go adminUserUpdate,
 * auth.go requireAuthentication + requireAdmin, models/user.go UpdateAppMetaData): `PUT
 * /admin/users/{id}` with a token whose `role` is an admin role (`service_role`,
 * `supabase_admin`), or the secret key the gateway turns into one. What the operator page
 * needs: `app_metadata` (merged; a null value removes the key), `user_metadata` (merged the same
 * way) and `email_confirm`. The other fields (email, phone, password, role, ban_duration) are
 * refused (404 `feature_disabled`, gotrue-context.ts) rather than ignored.
 */
import { type Context, GotrueError } from "./gotrue-context.ts";
import type { Account } from "./gotrue-store.ts";

const ADMIN_ROLES = ["service_role", "supabase_admin"];
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NOT_SERVED = ["email", "phone", "password", "role", "ban_duration", "phone_confirm"];

/** UpdateAppMetaData / UpdateUserMetaData: merge, a null value removes the key. */
function merge(into: Record<string, unknown>, updates: Record<string, unknown>) {
  const out = { ...into };
  for (const [k, v] of Object.entries(updates)) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

async function requireAdmin(c: Context, request: Request): Promise<void> {
  const token = /^Bearer (\S+)$/i.exec(request.headers.get("authorization") ?? "")?.[1];
  if (!token)
    throw new GotrueError(401, "no_authorization", "This endpoint requires a valid Bearer token");
  if (c.o.adminKeys?.().has(token)) return;
  let claims: Record<string, unknown>;
  try {
    claims = await c.o.verify(token);
  } catch {
    throw new GotrueError(
      403,
      "bad_jwt",
      "invalid JWT: unable to parse or verify signature, signature is invalid",
    );
  }
  if (!ADMIN_ROLES.includes(String(claims.role)))
    throw new GotrueError(403, "not_admin", "User not allowed");
}

export async function adminUserUpdate(c: Context, request: Request, userId: string) {
  await requireAdmin(c, request);
  if (!UUID.test(userId)) throw c.bad("validation_failed", "user_id must be an UUID");
  const account = await c.store.byId(userId.toLowerCase());
  if (!account) throw new GotrueError(404, "user_not_found", "User not found");
  const p = await c.body(request);
  for (const field of NOT_SERVED)
    if (p[field] !== undefined && p[field] !== "" && p[field] !== false)
      throw c.featureDisabled(`Updating ${field} through the admin API`);
  const object = (v: unknown) =>
    v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  const app = object(p.app_metadata);
  const user = object(p.user_metadata);
  const updated = (await c.store.update(
    account.id,
    {
      ...(app ? { appMetadata: merge(account.app_metadata, app) } : {}),
      ...(user ? { metadata: merge(account.user_metadata, user) } : {}),
      confirm: p.email_confirm === true,
    },
    c.now(),
  )) as Account;
  return Response.json(c.userJson(updated));
}
