/**
 * Where the Auth stand-in (gotrue.ts) keeps its users: the user itself in the real
 * `auth.users` of the stack's database (so the app's foreign keys and RLS see a real user), and
 * what only GoTrue knows (password hash, confirmation and recovery tokens, sessions, refresh
 * tokens) in a dev-only schema `dev_auth`, created here idempotently. `dev_auth` is closed to
 * anon and authenticated (no grant, usage revoked from PUBLIC) as Supabase's own `auth` tables
 * are, so no API role can read a hash; it is never part of a deployment's migrations.
 */
import type pg from "pg";

/** The narrow database port: a pool that can query and hand out a client for a transaction. */
export type Db = Pick<pg.Pool, "query" | "connect">;

export interface Account {
  id: string;
  email: string;
  encrypted_password: string;
  email_confirmed_at: Date | null;
  confirmation_token: string | null;
  confirmation_sent_at: Date | null;
  recovery_token: string | null;
  recovery_sent_at: Date | null;
  last_sign_in_at: Date | null;
  user_metadata: Record<string, unknown>;
  /** What the service role set through the admin API (merged over provider/providers). */
  app_metadata: Record<string, unknown>;
  created_at: Date;
  updated_at: Date;
}

const SCHEMA = `
select pg_advisory_xact_lock(hashtext('dev_auth schema'));
create schema if not exists dev_auth;
comment on schema dev_auth is
  'Local Auth stand-in only (dev/auth/gotrue.ts): what GoTrue keeps beside auth.users. Never in a deployment.';
revoke all on schema dev_auth from public;
create table if not exists dev_auth.accounts (
  id uuid primary key references auth.users (id) on delete cascade,
  email text not null unique,
  encrypted_password text not null,
  email_confirmed_at timestamptz,
  confirmation_token text unique,
  confirmation_sent_at timestamptz,
  recovery_token text unique,
  recovery_sent_at timestamptz,
  last_sign_in_at timestamptz,
  user_metadata jsonb not null default '{}',
  created_at timestamptz not null,
  updated_at timestamptz not null
);
comment on table dev_auth.accounts is 'An email user: scrypt password hash, pending email tokens (hashes, as GoTrue stores them).';
alter table dev_auth.accounts add column if not exists app_metadata jsonb not null
  default '{"provider": "email", "providers": ["email"]}';
comment on column dev_auth.accounts.app_metadata is 'raw_app_meta_data: set by the service role only (PUT /admin/users/{id}); a claim of every access token.';
create table if not exists dev_auth.sessions (
  id uuid primary key,
  user_id uuid not null references auth.users (id) on delete cascade,
  amr_method text not null,
  created_at timestamptz not null
);
comment on table dev_auth.sessions is 'A signed-in session: the session_id claim of its access tokens.';
create table if not exists dev_auth.refresh_tokens (
  token text primary key,
  session_id uuid not null references dev_auth.sessions (id) on delete cascade,
  revoked boolean not null default false,
  created_at timestamptz not null
);
comment on table dev_auth.refresh_tokens is 'Refresh tokens, rotated on use; a used one is revoked.';
alter table dev_auth.refresh_tokens
  add column if not exists id bigint generated always as identity,
  add column if not exists parent text,
  add column if not exists updated_at timestamptz;
comment on column dev_auth.refresh_tokens.parent is 'The token this one was rotated from (GoTrue''s refresh_tokens.parent).';
comment on column dev_auth.refresh_tokens.updated_at is 'When it was last changed (revoked): the start of its reuse interval.';
`;

/** `fn` in one transaction on a client of its own. */
async function tx<T>(db: Db, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await db.connect();
  try {
    await client.query("begin");
    const out = await fn(client);
    await client.query("commit");
    return out;
  } catch (e) {
    await client.query("rollback").catch(() => undefined);
    throw e;
  } finally {
    client.release();
  }
}

/** The first row as an account, or undefined. */
const one = async (q: Pick<pg.PoolClient, "query">, text: string, values: unknown[]) =>
  ((await q.query(text, values)).rows[0] as Account | undefined) ?? undefined;

export function createStore(db: Db) {
  let ready: Promise<void> | undefined;

  return {
    /** Creates `dev_auth` once per process (idempotent across processes: an advisory lock). */
    ready(): Promise<void> {
      ready ??= tx(db, async (c) => {
        await c.query(SCHEMA);
      }).catch((e: unknown) => {
        ready = undefined;
        throw e;
      });
      return ready;
    },
    byEmail: (email: string) =>
      one(db, "select * from dev_auth.accounts where email = $1", [email]),
    byId: (id: string) => one(db, "select * from dev_auth.accounts where id = $1", [id]),
    byToken: (column: "confirmation_token" | "recovery_token", hash: string) =>
      one(db, `select * from dev_auth.accounts where ${column} = $1`, [hash]),
    /** A new unconfirmed user: a row in auth.users and its account, in one transaction. */
    create: (a: {
      id: string;
      email: string;
      hash: string;
      metadata: Record<string, unknown>;
      now: Date;
    }) =>
      tx(db, async (c) => {
        await c.query("insert into auth.users (id, email, created_at) values ($1, $2, $3)", [
          a.id,
          a.email,
          a.now,
        ]);
        return (await one(
          c,
          `insert into dev_auth.accounts
             (id, email, encrypted_password, user_metadata, created_at, updated_at)
           values ($1, $2, $3, $4, $5, $5) returning *`,
          [a.id, a.email, a.hash, JSON.stringify(a.metadata), a.now],
        )) as Account;
      }),
    /** Stores a token hash and when it was sent (the rate limit's clock). */
    setToken: (id: string, kind: "confirmation" | "recovery", hash: string, now: Date) =>
      db.query(
        `update dev_auth.accounts set ${kind}_token = $2, ${kind}_sent_at = $3, updated_at = $3 where id = $1`,
        [id, hash, now],
      ),
    /** A link was followed: the token is spent; the email is confirmed either way (GoTrue's Confirm). */
    spendToken: (id: string, kind: "confirmation" | "recovery", now: Date) =>
      one(
        db,
        `update dev_auth.accounts set ${kind}_token = null,
           email_confirmed_at = coalesce(email_confirmed_at, $2), updated_at = $2
         where id = $1 returning *`,
        [id, now],
      ),
    update: (
      id: string,
      set: {
        hash?: string;
        metadata?: Record<string, unknown>;
        appMetadata?: Record<string, unknown>;
        confirm?: boolean;
      },
      now: Date,
    ) =>
      one(
        db,
        `update dev_auth.accounts set
           encrypted_password = coalesce($2, encrypted_password),
           user_metadata = coalesce($3::jsonb, user_metadata),
           app_metadata = coalesce($5::jsonb, app_metadata),
           email_confirmed_at = case when $6 then coalesce(email_confirmed_at, $4) else email_confirmed_at end,
           updated_at = $4
         where id = $1 returning *`,
        [
          id,
          set.hash ?? null,
          set.metadata ? JSON.stringify(set.metadata) : null,
          now,
          set.appMetadata ? JSON.stringify(set.appMetadata) : null,
          set.confirm ?? false,
        ],
      ),
    /** A new session and its first refresh token; the user's last sign-in moves. */
    startSession: (userId: string, sessionId: string, method: string, token: string, now: Date) =>
      tx(db, async (c) => {
        await c.query(
          "insert into dev_auth.sessions (id, user_id, amr_method, created_at) values ($1, $2, $3, $4)",
          [sessionId, userId, method, now],
        );
        await c.query(
          "insert into dev_auth.refresh_tokens (token, session_id, created_at) values ($1, $2, $3)",
          [token, sessionId, now],
        );
        return (await one(
          c,
          "update dev_auth.accounts set last_sign_in_at = $2 where id = $1 returning *",
          [userId, now],
        )) as Account;
      }),
    /**
     * Rotates a refresh token as GoTrue's RefreshTokenGrant does (internal/tokens/service.go):
     * a live one is revoked and `next` issued in its session, as its child. A revoked one that
     * is the parent of the session's active token gets the active token back; another revoked
     * within `reuseMs` of its revocation gets `next`; past that, every live token of the session
     * is revoked (models.RevokeTokenFamily) and the answer is "reused". Undefined: no such token.
     */
    rotate: (token: string, next: string, now: Date, reuseMs: number) =>
      tx(db, async (c) => {
        const { rows } = await c.query<{
          session_id: string;
          revoked: boolean;
          updated_at: Date | null;
          created_at: Date;
          user_id: string;
          amr_method: string;
        }>(
          `select r.session_id, r.revoked, r.updated_at, r.created_at, s.user_id, s.amr_method
             from dev_auth.refresh_tokens r join dev_auth.sessions s on s.id = r.session_id
            where r.token = $1 for update of r, s`,
          [token],
        );
        const found = rows[0];
        if (!found) return undefined;
        if (found.revoked) {
          const active = (
            await c.query<{ token: string; parent: string | null }>(
              `select token, parent from dev_auth.refresh_tokens
                where session_id = $1 and not revoked order by id desc limit 1`,
              [found.session_id],
            )
          ).rows[0];
          if (active && active.parent === token) return { ...found, issued: active.token };
          const since = (found.updated_at ?? found.created_at).getTime();
          if (now.getTime() > since + reuseMs) {
            await c.query(
              `update dev_auth.refresh_tokens set revoked = true, updated_at = $2
                where session_id = $1 and not revoked`,
              [found.session_id, now],
            );
            return "reused" as const;
          }
        } else {
          await c.query(
            "update dev_auth.refresh_tokens set revoked = true, updated_at = $2 where token = $1",
            [token, now],
          );
        }
        await c.query(
          `insert into dev_auth.refresh_tokens (token, session_id, parent, created_at, updated_at)
           values ($1, $2, $3, $4, $4)`,
          [next, found.session_id, token, now],
        );
        return { ...found, issued: next };
      }),
    sessionExists: async (id: string) =>
      (await db.query("select 1 from dev_auth.sessions where id = $1", [id])).rowCount === 1,
    sessionMethod: async (id: string) =>
      (
        await db.query<{ amr_method: string; created_at: Date }>(
          "select amr_method, created_at from dev_auth.sessions where id = $1",
          [id],
        )
      ).rows[0],
    /** Ends sessions: this one (local), all the user's (global), all but this one (others). */
    endSessions: (userId: string, sessionId: string, scope: "global" | "local" | "others") =>
      db.query(
        `delete from dev_auth.sessions where user_id = $1 and (
           $3 = 'global' or ($3 = 'local' and id = $2) or ($3 = 'others' and id <> $2))`,
        [userId, sessionId, scope],
      ),
  };
}

export type Store = ReturnType<typeof createStore>;
