/**
 * Private channels, authorized as Realtime authorizes them (Realtime.Tenants.Authorization):
 * against the project's own RLS policies on `realtime.messages`, in a transaction that is always
 * rolled back.
 *
 * - read (at join, and again at each new access token): probe rows, one per extension checked,
 *   are inserted first as the connection's user (the owner: no RLS), then the role, the claims
 *   and `realtime.topic` are set and the rows are selected back: a row the policies let the
 *   role see is a read permission.
 * - write (at a client's first broadcast, and for a REST broadcast to a private topic): the
 *   settings first, then an insert as the role, under a savepoint; insufficient_privilege is
 *   "no".
 */
import { randomUUID } from "node:crypto";
import type pg from "pg";
import type { Claims } from "./tokens.ts";

export type Extension = "broadcast" | "presence";

export interface AuthorizationContext {
  topic: string;
  claims: Claims;
  headers: Record<string, string>;
}

/** Why a check could not answer: Realtime's error for it (a join's reason). */
export class AuthorizationError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
  get reason(): string {
    return `${this.code}: ${this.message}`;
  }
}

/** `Authorization.set_conn_config`. */
async function setConfig(client: pg.PoolClient, ctx: AuthorizationContext): Promise<void> {
  const sub = typeof ctx.claims.sub === "string" ? ctx.claims.sub : null;
  await client.query(
    `select set_config('role', $1, true), set_config('realtime.topic', $2, true),
            set_config('request.jwt.claims', $3, true), set_config('request.jwt.claim.sub', $4, true),
            set_config('request.jwt.claim.role', $1, true), set_config('request.headers', $5, true)`,
    [ctx.claims.role, ctx.topic, JSON.stringify(ctx.claims), sub, JSON.stringify(ctx.headers)],
  );
}

/** A missing partition is a check_violation on realtime.messages; any other error is the policy's. */
function failure(err: unknown): never {
  const e = err as { code?: string; table?: string; message?: string };
  if (e.code === "23514")
    throw new AuthorizationError(
      "MissingPartition",
      "Realtime was unable to find the expected messages partition",
    );
  throw new AuthorizationError("RlsPolicyError", e.message ?? String(err));
}

export async function readPermissions(
  pool: pg.Pool,
  ctx: AuthorizationContext,
  extensions: Extension[],
): Promise<Record<Extension, boolean | undefined>> {
  const client = await pool.connect();
  const probes = extensions.map((extension) => ({ extension, id: randomUUID() }));
  try {
    await client.query("begin");
    await client.query(
      `insert into realtime.messages (id, topic, extension)
       select id, $1, extension from unnest($2::uuid[], $3::text[]) as p(id, extension)`,
      [ctx.topic, probes.map((p) => p.id), probes.map((p) => p.extension)],
    );
    await setConfig(client, ctx);
    const { rows } = await client.query<{ id: string }>(
      "select id from realtime.messages where id = any($1::uuid[])",
      [probes.map((p) => p.id)],
    );
    const seen = new Set(rows.map((r) => r.id));
    const result: Record<Extension, boolean | undefined> = {
      broadcast: undefined,
      presence: undefined,
    };
    for (const p of probes) result[p.extension] = seen.has(p.id);
    return result;
  } catch (err) {
    failure(err);
  } finally {
    await client.query("rollback").catch(() => undefined);
    client.release();
  }
}

export async function canWrite(
  pool: pg.Pool,
  ctx: AuthorizationContext,
  extension: Extension = "broadcast",
): Promise<boolean> {
  const client = await pool.connect();
  try {
    await client.query("begin");
    await setConfig(client, ctx);
    await client.query("savepoint write_check");
    try {
      await client.query("insert into realtime.messages (topic, extension) values ($1, $2)", [
        ctx.topic,
        extension,
      ]);
      return true;
    } catch (err) {
      if ((err as { code?: string }).code === "42501") return false;
      throw err;
    }
  } catch (err) {
    failure(err);
  } finally {
    await client.query("rollback").catch(() => undefined);
    client.release();
  }
}
