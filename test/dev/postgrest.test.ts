import { randomUUID } from "node:crypto";
import { PostgrestClient } from "@supabase/postgrest-js";
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import { SignJWT } from "jose";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { type AuthStandIn, createAuthStandIn, makeProject } from "../../dev/auth/index.ts";
import {
  mintAnonKey,
  mintServiceRoleKey,
  type RunningPostgrest,
  startPostgrest,
} from "../../dev/postgrest/index.ts";
import { keyHeaders } from "../../lib/db.ts";
import { freePort } from "../support/ports.ts";

const databaseUrl = inject("databaseUrl");
const jwtSecret = "super-secret-jwt-token-with-at-least-32-characters-long";
const opts = { auth: { persistSession: false, autoRefreshToken: false } };

let rest: RunningPostgrest;
let db: pg.Client;
let serviceKey: string;
let anonKey: string;
let service: SupabaseClient;
let anon: SupabaseClient;

/** A stand-in on a free port over the test database, with this file's secret and service key. */
async function standIn(
  options: Partial<Parameters<typeof startPostgrest>[0]> = {},
): Promise<RunningPostgrest> {
  return startPostgrest({
    port: await freePort(),
    databaseUrl,
    jwtSecret,
    serviceRoleKey: serviceKey,
    ...options,
  });
}

const fixtures = `
  create table public.pgrst_test_log (id uuid primary key, note text);
  create function public.pgrst_test_echo(p_a int, p_b text default 'x') returns jsonb language sql
    as $$ select jsonb_build_object('a', p_a, 'b', p_b, 'role', current_user, 'uid', auth.uid()) $$;
  create function public.pgrst_test_doc(p_doc jsonb, p_tags text[] default null) returns jsonb language sql
    as $$ select jsonb_build_object('doc', p_doc, 'tags', to_jsonb(p_tags)) $$;
  create function public.pgrst_test_double(p_n int) returns int language sql
    as $$ select case when p_n < 0 then null else p_n * 2 end $$;
  create function public.pgrst_test_setting(p_name text) returns text language sql
    as $$ select current_setting(p_name) $$;
  create type public.pgrst_test_pair as (x int, y text);
  create function public.pgrst_test_pair(p_x int) returns public.pgrst_test_pair language sql
    as $$ select p_x, 'y'::text $$;
  create function public.pgrst_test_out(p_x int, out doubled int, out label text) language sql
    as $$ select p_x * 2, 'l'::text $$;
  create function public.pgrst_test_series(p_n int) returns setof int language sql
    as $$ select generate_series(1, p_n) $$;
  create function public.pgrst_test_rows(p_n int) returns table (i int, label text) language sql
    as $$ select g, 'row ' || g from generate_series(1, p_n) g $$;
  create function public.pgrst_test_whole(jsonb) returns jsonb language sql as $$ select $1 $$;
  create function public.pgrst_test_positional_text(text) returns text language sql as $$ select $1 $$;
  create function public.pgrst_test_positional_int(int) returns int language sql as $$ select $1 $$;
  create function public.pgrst_test_positional_two(int default 1, int default 2) returns int
    language sql as $$ select $1 + $2 $$;
  create function public.pgrst_test_mixed(p_a int, text default 'd') returns text language sql
    as $$ select p_a || $2 $$;
  create function public.pgrst_test_over(p_a int) returns text language sql as $$ select 'int' $$;
  create function public.pgrst_test_over(p_a text) returns text language sql as $$ select 'text' $$;
  create function public.pgrst_test_over(p_a int, p_b int) returns text language sql as $$ select 'two' $$;
  create function public.pgrst_test_log(p_id uuid) returns void language sql
    as $$ insert into public.pgrst_test_log (id) values (p_id) $$;
  create function public.pgrst_test_log_then_fail(p_id uuid) returns int language plpgsql as $$
    begin
      insert into public.pgrst_test_log (id) values (p_id);
      raise exception 'I refuse!' using detail = 'Pretty simple', hint = 'There is nothing you can do.';
    end $$;
  create function public.pgrst_test_raise(p_code text) returns int language plpgsql as $$
    begin
      if p_code = 'PGRST' then
        raise sqlstate 'PGRST' using
          message = '{"code":"123","message":"Payment Required","details":"Quota exceeded","hint":"Upgrade"}',
          detail = '{"status":402,"headers":{"X-Powered-By":"Nerd Rage"}}';
      end if;
      raise exception using errcode = p_code, message = 'raised ' || p_code;
    end $$;
  create function public.pgrst_test_missing_callee() returns int language plpgsql
    as $$ begin return public.pgrst_test_no_such_function(); end $$;
  create function public.pgrst_test_created() returns int language plpgsql as $$
    begin
      perform set_config('response.status', '201', true);
      perform set_config('response.headers', '[{"Location": "/things/1"}]', true);
      return 1;
    end $$;
  create function public.pgrst_test_wait(p_key bigint) returns int language sql
    as $$ select 1 from (select pg_advisory_xact_lock(p_key)) locked $$;
  create function public.pgrst_test_private() returns text language sql as $$ select 'secret' $$;
  revoke execute on function public.pgrst_test_private() from public, anon, authenticated;
  grant execute on function public.pgrst_test_private() to service_role;
  -- The migrations close new functions to anon and authenticated; these two are called as them.
  grant execute on function public.pgrst_test_echo(int, text), public.pgrst_test_setting(text)
    to anon, authenticated;
`;

function userToken(sub: string, expiresIn = 3600): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  return new SignJWT({ sub, role: "authenticated", aud: "authenticated" })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuedAt(now)
    .setExpirationTime(now + expiresIn)
    .sign(new TextEncoder().encode(jwtSecret));
}

/** A client the way the app builds one for a signed-in user: anon apikey, user Bearer token. */
function asUser(url: string, token: string): SupabaseClient {
  return createClient(url, anonKey, {
    ...opts,
    global: { headers: { Authorization: `Bearer ${token}` } },
  });
}

async function pollUntil(check: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

beforeAll(async () => {
  db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  await db.query(fixtures);
  serviceKey = await mintServiceRoleKey(jwtSecret);
  anonKey = await mintAnonKey(jwtSecret);
  rest = await standIn({ anonKey });
  service = createClient(rest.url, serviceKey, opts);
  anon = createClient(rest.url, anonKey, opts);
});

afterAll(async () => {
  await rest?.close();
  await db?.query(`
    drop function if exists public.pgrst_test_echo, public.pgrst_test_doc, public.pgrst_test_double,
      public.pgrst_test_setting, public.pgrst_test_pair, public.pgrst_test_out, public.pgrst_test_series,
      public.pgrst_test_rows, public.pgrst_test_whole, public.pgrst_test_positional_text,
      public.pgrst_test_positional_int, public.pgrst_test_positional_two, public.pgrst_test_mixed,
      public.pgrst_test_over(int), public.pgrst_test_over(text),
      public.pgrst_test_over(int, int), public.pgrst_test_log, public.pgrst_test_log_then_fail,
      public.pgrst_test_raise, public.pgrst_test_missing_callee, public.pgrst_test_created,
      public.pgrst_test_wait, public.pgrst_test_private;
    drop type if exists public.pgrst_test_pair;
    drop table if exists public.pgrst_test_log;`);
  await db?.end();
});

describe("results come back in PostgREST's shapes", () => {
  test("jsonb return with named args, a defaulted param omitted, run as service_role", async () => {
    const { error, data, status } = await service.rpc("pgrst_test_echo", { p_a: 7 });
    expect(error).toBeNull();
    expect({ data, status }).toEqual({
      data: { a: 7, b: "x", role: "service_role", uid: null },
      status: 200,
    });
  });

  test("json objects and arrays reach jsonb and text[] params typed by the signature", async () => {
    const doc = { nested: { list: [1, "two", null] } };
    const { error, data } = await service.rpc("pgrst_test_doc", { p_doc: doc, p_tags: ["a", "b"] });
    expect(error).toBeNull();
    expect(data).toEqual({ doc, tags: ["a", "b"] });
  });

  test("a scalar is the bare value and SQL NULL is null", async () => {
    expect(await service.rpc("pgrst_test_double", { p_n: 21 })).toMatchObject({
      error: null,
      data: 42,
      status: 200,
    });
    expect(await service.rpc("pgrst_test_double", { p_n: -1 })).toMatchObject({
      error: null,
      data: null,
      status: 200,
    });
    expect(await service.rpc("pgrst_test_double", { p_n: null })).toMatchObject({
      error: null,
      data: null,
      status: 200,
    });
  });

  test("a composite or OUT params give an object", async () => {
    expect((await service.rpc("pgrst_test_pair", { p_x: 3 })).data).toEqual({ x: 3, y: "y" });
    expect((await service.rpc("pgrst_test_out", { p_x: 3 })).data).toEqual({
      doubled: 6,
      label: "l",
    });
  });

  test("setof scalar and returns table give arrays; an empty set is []", async () => {
    expect(await service.rpc("pgrst_test_series", { p_n: 3 })).toMatchObject({
      error: null,
      data: [1, 2, 3],
      status: 200,
    });
    expect((await service.rpc("pgrst_test_rows", { p_n: 2 })).data).toEqual([
      { i: 1, label: "row 1" },
      { i: 2, label: "row 2" },
    ]);
    expect((await service.rpc("pgrst_test_series", { p_n: 0 })).data).toEqual([]);
  });

  test("count=exact fills count from Content-Range", async () => {
    const { error, count } = await service.rpc("pgrst_test_series", { p_n: 4 }, { count: "exact" });
    expect(error).toBeNull();
    expect(count).toBe(4);
  });

  test("count=exact on a function that returns one value, one row or void counts 1", async () => {
    expect(await service.rpc("pgrst_test_double", { p_n: 2 }, { count: "exact" })).toMatchObject({
      error: null,
      data: 4,
      count: 1,
    });
    expect(await service.rpc("pgrst_test_pair", { p_x: 1 }, { count: "exact" })).toMatchObject({
      error: null,
      count: 1,
    });
    expect(
      await service.rpc("pgrst_test_log", { p_id: randomUUID() }, { count: "exact" }),
    ).toMatchObject({ error: null, status: 204, count: 1 });
    expect((await service.rpc("pgrst_test_double", { p_n: 2 })).count).toBeNull();
  });

  test(".single() on a set: one row is the object, two rows is 406 PGRST116", async () => {
    expect((await service.rpc("pgrst_test_rows", { p_n: 1 }).single()).data).toEqual({
      i: 1,
      label: "row 1",
    });
    const { error, data, status } = await service.rpc("pgrst_test_rows", { p_n: 2 }).single();
    expect(error).toEqual({
      code: "PGRST116",
      details: "The result contains 2 rows",
      hint: null,
      message: "Cannot coerce the result to a single JSON object",
    });
    expect({ data, status }).toEqual({ data: null, status: 406 });
  });

  test("void is 204 with no body, and its write is committed", async () => {
    const id = randomUUID();
    const result = await service.rpc("pgrst_test_log", { p_id: id });
    expect(result).toMatchObject({
      error: null,
      data: null,
      status: 204,
      statusText: "No Content",
    });
    expect(
      (await db.query("select 1 from public.pgrst_test_log where id = $1", [id])).rowCount,
    ).toBe(1);
  });

  test("a single unnamed jsonb parameter receives the whole body", async () => {
    expect((await service.rpc("pgrst_test_whole", { anything: [1, 2] })).data).toEqual({
      anything: [1, 2],
    });
  });

  test("GET with query args: values typed by the signature, read-only transaction", async () => {
    expect(
      (await service.rpc("pgrst_test_echo", { p_a: 5, p_b: "q" }, { get: true })).data,
    ).toMatchObject({ a: 5, b: "q" });
    const { error, status } = await service.rpc(
      "pgrst_test_log",
      { p_id: randomUUID() },
      { get: true },
    );
    expect(error).toMatchObject({ code: "25006" });
    expect(status).toBe(405);
  });

  test("filtering, selecting or paging a result is refused (501), never answered unshaped", async () => {
    const refused = (r: { error: unknown; data: unknown; status: number }) =>
      expect({ data: r.data, status: r.status, error: r.error }).toMatchObject({
        data: null,
        status: 501,
        error: { code: "PGRSTX01" },
      });
    refused(await service.rpc("pgrst_test_series", { p_n: 5 }).limit(2));
    refused(await service.rpc("pgrst_test_rows", { p_n: 3 }).eq("i", 2));
    refused(await service.rpc("pgrst_test_rows", { p_n: 3 }).select("i"));
    refused(await service.rpc("pgrst_test_rows", { p_n: 3 }, { get: true }).order("i"));
    refused(await service.rpc("pgrst_test_rows", { p_n: 3 }, { get: true }).in("i", [1, 2]));
    // Arguments alone still pass on GET, including values that merely look like text.
    expect(
      (await service.rpc("pgrst_test_echo", { p_a: 1, p_b: "equal" }, { get: true })).data,
    ).toMatchObject({ b: "equal" });
  });

  test("a function can set response.status and response.headers", async () => {
    expect(await service.rpc("pgrst_test_created")).toMatchObject({
      error: null,
      data: 1,
      status: 201,
    });
    // supabase-js does not show response headers; read them off the wire.
    const res = await fetch(`${rest.url}/rest/v1/rpc/pgrst_test_created`, {
      method: "POST",
      headers: { apikey: serviceKey, authorization: `Bearer ${serviceKey}` },
    });
    expect([res.status, res.headers.get("location")]).toEqual([201, "/things/1"]);
  });

  test("HEAD answers the count without a body; OPTIONS (CORS) is not served", async () => {
    expect(
      await service.rpc("pgrst_test_series", { p_n: 3 }, { head: true, count: "exact" }),
    ).toMatchObject({ error: null, data: null, count: 3, status: 200 });
    const preflight = await fetch(`${rest.url}/rest/v1/rpc/pgrst_test_double`, {
      method: "OPTIONS",
    });
    expect(preflight.status).toBe(405);
    expect(await preflight.json()).toMatchObject({ code: "PGRST101" });
  });
});

describe("function lookup", () => {
  test("an unknown function is 404 PGRST202 with PostgREST's message", async () => {
    const { error, data, status } = await service.rpc("pgrst_test_nope", { b: 1, a: 2 });
    expect(error).toEqual({
      code: "PGRST202",
      details:
        "Searched for the function public.pgrst_test_nope with parameters a, b or with a single unnamed json/jsonb parameter, but no matches were found in the schema cache.",
      hint: null,
      message: "Could not find the function public.pgrst_test_nope(a, b) in the schema cache",
    });
    expect({ data, status }).toEqual({ data: null, status: 404 });
  });

  test("wrong or missing argument names are 404 PGRST202 with a hint", async () => {
    const wrong = await service.rpc("pgrst_test_echo", { a: 1 });
    expect(wrong.status).toBe(404);
    expect(wrong.error).toMatchObject({
      code: "PGRST202",
      message: "Could not find the function public.pgrst_test_echo(a) in the schema cache",
      hint: "Perhaps you meant to call the function public.pgrst_test_echo(p_a, p_b)",
    });
    const missing = await service.rpc("pgrst_test_echo", { p_b: "only" });
    expect(missing).toMatchObject({ data: null, status: 404, error: { code: "PGRST202" } });
  });

  test("an unnamed parameter is filled positionally only when it is the one parameter and of a body type", async () => {
    // The whole body goes to a function's one unnamed text/json parameter, as PostgREST does.
    expect(await service.rpc("pgrst_test_positional_text", { "": "x" })).toMatchObject({
      error: null,
      data: '{"":"x"}',
    });
    // PostgREST does not even see functions with an unnamed int, or two unnamed, parameters.
    for (const [fn, args, get] of [
      ["pgrst_test_positional_int", { "": 5 }, false],
      ["pgrst_test_positional_int", { "": 5 }, true],
      ["pgrst_test_positional_two", { "": 1 }, false],
      ["pgrst_test_positional_two", {}, false],
    ] as const) {
      const { error, data, status } = await service.rpc(fn, args, { get });
      expect({ fn, get, code: error?.code, data, status }).toEqual({
        fn,
        get,
        code: "PGRST202",
        data: null,
        status: 404,
      });
    }
    // Beside named parameters an unnamed one has no name to be passed by.
    expect((await service.rpc("pgrst_test_mixed", { p_a: 1 })).data).toBe("1d");
    expect(await service.rpc("pgrst_test_mixed", { p_a: 1, "": "t" })).toMatchObject({
      data: null,
      status: 404,
      error: { code: "PGRST202" },
    });
  });

  test("overloads: names pick one, an ambiguous call is 300 PGRST203", async () => {
    expect((await service.rpc("pgrst_test_over", { p_a: 1, p_b: 2 })).data).toBe("two");
    const { error, status } = await service.rpc("pgrst_test_over", { p_a: 1 });
    expect(status).toBe(300);
    expect(error).toMatchObject({
      code: "PGRST203",
      details: null,
      hint: "Try renaming the parameters or the function itself in the database so function overloading can be resolved",
    });
    expect(error?.message).toMatch(
      /^Could not choose the best candidate function between: public\.pgrst_test_over\(p_a => /,
    );
  });

  test("an unexposed schema is 406 PGRST106", async () => {
    const other = createClient(rest.url, serviceKey, { ...opts, db: { schema: "pgrst_hidden" } });
    const { error, status } = await other.rpc("pgrst_test_echo", { p_a: 1 });
    expect(status).toBe(406);
    expect(error).toMatchObject({ code: "PGRST106", message: "Invalid schema: pgrst_hidden" });
  });
});

describe("database errors map to PostgREST's statuses", () => {
  test.each([
    ["40001", 500],
    ["40P01", 500],
    ["57014", 500],
    ["57P01", 503],
    ["08006", 503],
    ["23505", 409],
    ["23514", 400],
    ["42501", 403],
    ["53300", 503],
    ["22P02", 400],
    ["XX000", 500],
  ])("SQLSTATE %s → %i", async (code, expected) => {
    const { error, data, status } = await service.rpc("pgrst_test_raise", { p_code: code });
    expect(error).toEqual({ code, details: null, hint: null, message: `raised ${code}` });
    expect({ data, status }).toEqual({ data: null, status: expected });
  });

  test("P0001 is 400 with detail and hint, and the transaction's writes are rolled back", async () => {
    const id = randomUUID();
    const { error, data, status } = await service.rpc("pgrst_test_log_then_fail", { p_id: id });
    expect(error).toEqual({
      code: "P0001",
      details: "Pretty simple",
      hint: "There is nothing you can do.",
      message: "I refuse!",
    });
    expect({ data, status }).toEqual({ data: null, status: 400 });
    expect(
      (await db.query("select 1 from public.pgrst_test_log where id = $1", [id])).rowCount,
    ).toBe(0);
  });

  test("PT402 is HTTP 402 with the message as reason phrase", async () => {
    const { error, status, statusText } = await service.rpc("pgrst_test_raise", {
      p_code: "PT402",
    });
    expect(error).toMatchObject({ code: "PT402", message: "raised PT402" });
    expect({ status, statusText }).toEqual({ status: 402, statusText: "raised PT402" });
  });

  test("SQLSTATE PGRST gives the function full control of status and body", async () => {
    const { error, status } = await service.rpc("pgrst_test_raise", { p_code: "PGRST" });
    expect(status).toBe(402);
    expect(error).toEqual({
      code: "123",
      details: "Quota exceeded",
      hint: "Upgrade",
      message: "Payment Required",
    });
  });

  test("a unique violation from a void function is 409 23505", async () => {
    const id = randomUUID();
    expect((await service.rpc("pgrst_test_log", { p_id: id })).status).toBe(204);
    const { error, status } = await service.rpc("pgrst_test_log", { p_id: id });
    expect(status).toBe(409);
    expect(error).toMatchObject({ code: "23505", details: `Key (id)=(${id}) already exists.` });
  });

  test("a missing function called inside a function is 404 42883", async () => {
    const { error, status } = await service.rpc("pgrst_test_missing_callee");
    expect(status).toBe(404);
    expect(error).toMatchObject({ code: "42883" });
  });
});

describe("keys, tokens and roles", () => {
  test("a user token runs as authenticated and sees auth.uid() = its sub", async () => {
    const sub = randomUUID();
    const { error, data } = await asUser(rest.url, await userToken(sub)).rpc("pgrst_test_echo", {
      p_a: 1,
    });
    expect(error).toBeNull();
    expect(data).toEqual({ a: 1, b: "x", role: "authenticated", uid: sub });
  });

  test("the anon key runs as anon, with anon's statement_timeout applied", async () => {
    expect((await anon.rpc("pgrst_test_echo", { p_a: 1 })).data).toMatchObject({
      role: "anon",
      uid: null,
    });
    expect((await anon.rpc("pgrst_test_setting", { p_name: "statement_timeout" })).data).toBe("3s");
    expect((await service.rpc("pgrst_test_setting", { p_name: "statement_timeout" })).data).toBe(
      "0",
    );
  });

  test("a function revoked from anon and authenticated: anon 401, user 403, service_role 200", async () => {
    const denied = await anon.rpc("pgrst_test_private");
    expect(denied).toMatchObject({ data: null, status: 401, error: { code: "42501" } });
    expect(denied.error?.message).toBe("permission denied for function pgrst_test_private");
    const user = await asUser(rest.url, await userToken(randomUUID())).rpc("pgrst_test_private");
    expect(user).toMatchObject({ data: null, status: 403, error: { code: "42501" } });
    expect(await service.rpc("pgrst_test_private")).toMatchObject({
      error: null,
      data: "secret",
      status: 200,
    });
  });

  test("an expired user token is 401 PGRST303", async () => {
    const { error, data, status } = await asUser(rest.url, await userToken(randomUUID(), -120)).rpc(
      "pgrst_test_echo",
      {
        p_a: 1,
      },
    );
    expect(error).toEqual({ code: "PGRST303", details: null, hint: null, message: "JWT expired" });
    expect({ data, status }).toEqual({ data: null, status: 401 });
  });

  test("a token signed with another secret or not a JWT is 401 PGRST301", async () => {
    const forged = await new SignJWT({ sub: randomUUID(), role: "service_role" })
      .setProtectedHeader({ alg: "HS256" })
      .setExpirationTime("1h")
      .sign(new TextEncoder().encode("a-different-secret-that-is-at-least-32-chars"));
    const bad = await asUser(rest.url, forged).rpc("pgrst_test_echo", { p_a: 1 });
    expect(bad).toMatchObject({ data: null, status: 401, error: { code: "PGRST301" } });
    const garbage = await asUser(rest.url, "not-a-jwt").rpc("pgrst_test_echo", { p_a: 1 });
    expect(garbage).toMatchObject({
      data: null,
      status: 401,
      error: { code: "PGRST301", message: "Expected 3 parts in JWT; got 1" },
    });
  });

  test("an apikey that is not one of the project's keys is refused", async () => {
    const { error, data, status } = await createClient(rest.url, "sb-not-a-key", opts).rpc(
      "pgrst_test_echo",
      { p_a: 1 },
    );
    expect(error).toMatchObject({ message: "Invalid API key" });
    expect({ data, status }).toEqual({ data: null, status: 401 });
  });

  test("concurrent callers on pooled connections each see only their own claims", async () => {
    const subs = Array.from({ length: 24 }, () => randomUUID());
    const clients = await Promise.all(
      subs.map(async (sub) => asUser(rest.url, await userToken(sub))),
    );
    const results = await Promise.all([
      ...clients.map((c) => c.rpc("pgrst_test_echo", { p_a: 1 })),
      ...subs.map(() => service.rpc("pgrst_test_echo", { p_a: 2 })),
    ]);
    for (const [i, r] of results.entries()) {
      expect(r.error).toBeNull();
      if (i < subs.length) expect(r.data).toMatchObject({ role: "authenticated", uid: subs[i] });
      else expect(r.data).toMatchObject({ role: "service_role", uid: null });
    }
  });
});

describe("transport", () => {
  test("stats() counts RPC round trips", async () => {
    const before = rest.stats().rpcCalls;
    await service.rpc("pgrst_test_double", { p_n: 1 });
    await service.rpc("pgrst_test_nope");
    await anon.rpc("pgrst_test_private");
    expect(rest.stats().rpcCalls).toBe(before + 3);
  });

  test("a closed stand-in is a network failure: status 0, an error, never data", async () => {
    const gone = await standIn();
    await gone.close();
    const { error, data, status } = await createClient(gone.url, serviceKey, opts).rpc(
      "pgrst_test_echo",
      { p_a: 1 },
    );
    expect(error).toMatchObject({ code: "" });
    expect(error?.message).toMatch(/^TypeError: fetch failed/);
    expect({ data, status }).toEqual({ data: null, status: 0 });
  });

  test("a database that cannot be reached is 503 PGRST000", async () => {
    const deadDb = `postgres://postgres:postgres@127.0.0.1:${await freePort()}/postgres`;
    const orphan = await standIn({ databaseUrl: deadDb });
    try {
      const { error, data, status } = await createClient(orphan.url, serviceKey, opts).rpc(
        "pgrst_test_echo",
        { p_a: 1 },
      );
      expect(error).toMatchObject({
        code: "PGRST000",
        message: "Database connection error. Retrying the connection.",
      });
      expect({ data, status }).toEqual({ data: null, status: 503 });
    } finally {
      await orphan.close();
    }
  });

  test("an exhausted pool is 504 PGRST003 once the acquisition timeout passes", async () => {
    const small = await standIn({
      poolMax: 1,
      poolAcquireTimeoutMs: 200,
      schemaCacheTtlMs: 60_000,
    });
    const client = createClient(small.url, serviceKey, opts);
    const key = Math.floor(Math.random() * 1e9);
    await db.query("select pg_advisory_lock($1)", [key]);
    try {
      await client.rpc("pgrst_test_double", { p_n: 1 }); // warm the caches while the pool is free
      // rpc() is a lazy thenable: start the request now, await it later.
      const holder = Promise.resolve(client.rpc("pgrst_test_wait", { p_key: key }));
      await pollUntil(async () => {
        const { rowCount } = await db.query(
          "select 1 from pg_locks where locktype = 'advisory' and objid = $1 and not granted",
          [key],
        );
        return rowCount === 1;
      });
      const { error, data, status } = await client.rpc("pgrst_test_double", { p_n: 1 });
      expect(error).toEqual({
        code: "PGRST003",
        details: null,
        hint: null,
        message: "Timed out acquiring connection from connection pool.",
      });
      expect({ data, status }).toEqual({ data: null, status: 504 });
      await db.query("select pg_advisory_unlock($1)", [key]);
      expect(await holder).toMatchObject({ error: null, data: 1, status: 200 });
    } finally {
      await db.query("select pg_advisory_unlock_all()");
      await small.close();
    }
  });
});

describe("a project created today: sb_ keys at the gateway, ES256 user tokens, the JWKS", () => {
  let fresh: RunningPostgrest;
  let auth: AuthStandIn;
  let secretKey: string;
  let publishableKey: string;

  beforeAll(async () => {
    const port = await freePort();
    const project = await makeProject({
      shape: "new",
      issuer: `http://127.0.0.1:${port}/auth/v1`,
      jwtSecret,
    });
    ({ secretKey, publishableKey } = project);
    auth = createAuthStandIn(project);
    fresh = await startPostgrest({
      port,
      databaseUrl,
      jwtSecret,
      serviceRoleKey: secretKey,
      anonKey: publishableKey,
      auth,
    });
  });
  afterAll(() => fresh.close());

  const raw = (headers: Record<string, string>) =>
    fetch(`${fresh.url}/rest/v1/rpc/pgrst_test_echo`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ p_a: 1 }),
    });

  test("the app's headers for a secret key (apikey alone) run as service_role", async () => {
    expect(keyHeaders(secretKey)).toEqual({ apikey: secretKey });
    const client = new PostgrestClient(`${fresh.url}/rest/v1`, { headers: keyHeaders(secretKey) });
    const { data, error } = await client.rpc("pgrst_test_echo", { p_a: 1 });
    expect(error).toBeNull();
    expect(data).toMatchObject({ role: "service_role", uid: null });
  });

  test("the secret key also as Bearer (equal to apikey) reaches PostgREST and is refused as not a JWT", async () => {
    const res = await raw({ apikey: secretKey, authorization: `Bearer ${secretKey}` });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({
      code: "PGRST301",
      message: "Expected 3 parts in JWT; got 1",
    });
  });

  test("another sb_ key as Bearer than the apikey is refused by the gateway", async () => {
    const res = await raw({ apikey: secretKey, authorization: `Bearer ${publishableKey}` });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ message: "Invalid API key" });
  });

  test("a secret key from a browser is 401; an unknown sb_secret_ key is 401 Invalid API key", async () => {
    const browser = await raw({
      apikey: secretKey,
      "user-agent": "Mozilla/5.0 (X11; Linux x86_64) Chrome/147.0",
    });
    expect(browser.status).toBe(401);
    expect(await browser.json()).toEqual({ message: "Forbidden use of secret API key in browser" });
    const unknown = await raw({ apikey: "sb_secret_not-this-projects-key_00000000" });
    expect(unknown.status).toBe(401);
    expect(await unknown.json()).toMatchObject({ message: "Invalid API key" });
  });

  test("the publishable key runs as anon; with an ES256 user token from the Auth stand-in, as that user", async () => {
    const anonRes = await raw({ apikey: publishableKey });
    expect(await anonRes.json()).toMatchObject({ role: "anon", uid: null });
    const sub = randomUUID();
    const token = await auth.mint({ userId: sub });
    const userRes = await raw({ apikey: publishableKey, authorization: `Bearer ${token}` });
    expect(userRes.status).toBe(200);
    expect(await userRes.json()).toMatchObject({ role: "authenticated", uid: sub });
    // A token signed by a key the JWKS does not list.
    const other = await createAuthStandIn(
      await makeProject({ shape: "new", issuer: "http://127.0.0.1:1/auth/v1" }),
    ).mint({ userId: sub });
    const forged = await raw({ apikey: publishableKey, authorization: `Bearer ${other}` });
    expect(forged.status).toBe(401);
    expect(await forged.json()).toMatchObject({ code: "PGRST301" });
  });

  test("GET /auth/v1/.well-known/jwks.json answers as GoTrue: public key only, 10-minute cache", async () => {
    const res = await fetch(`${fresh.url}/auth/v1/.well-known/jwks.json`);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json");
    expect(res.headers.get("cache-control")).toBe("public, max-age=600");
    const body = (await res.json()) as { keys: Record<string, unknown>[] };
    expect(body.keys).toHaveLength(1);
    expect(body.keys[0]).toMatchObject({
      kty: "EC",
      crv: "P-256",
      alg: "ES256",
      use: "sig",
      key_ops: ["verify"],
    });
    expect(body.keys[0]).not.toHaveProperty("d");
    const token = await auth.mint({ userId: randomUUID() });
    expect(JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString())).toEqual({
      alg: "ES256",
      typ: "JWT",
      kid: body.keys[0]?.kid,
    });
  });

  test("a legacy project's JWKS lists no key (GoTrue never publishes the HMAC secret)", async () => {
    const legacy = createAuthStandIn(
      await makeProject({ shape: "legacy", issuer: "http://127.0.0.1:1/auth/v1", jwtSecret }),
    );
    const res = await legacy.handle(
      new Request("http://127.0.0.1:1/auth/v1/.well-known/jwks.json"),
    );
    expect(await res.json()).toEqual({ keys: [] });
  });

  test("Auth endpoints the stand-in does not serve are refused in GoTrue's error shape", async () => {
    const res = await fetch(`${fresh.url}/auth/v1/signup`, { method: "POST", body: "{}" });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ code: 404, error_code: "not_found" });
  });
});
