/**
 * The PostgREST stand-in reads `Accept` and `Prefer` as PostgREST does, through postgrest-js's
 * own builders: what PostgREST refuses is refused with its status, code and words (406 PGRST107,
 * 400 PGRST122, PGRST124 with the rows rolled back, PGRST128), and what PostgREST would serve but
 * the stand-in does not (CSV, stripped nulls, GeoJSON, a plan, a time zone) is a loud 501, never
 * plain JSON the client did not ask for.
 */
import { randomUUID } from "node:crypto";
import { createClient, type SupabaseClient } from "@supabase/supabase-js";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  mintServiceRoleKey,
  type RunningPostgrest,
  startPostgrest,
} from "../../dev/postgrest/index.ts";
import { freePort } from "../support/ports.ts";

const databaseUrl = inject("databaseUrl");
const jwtSecret = "negotiation-secret-with-at-least-32-characters-long!";
const opts = { auth: { persistSession: false, autoRefreshToken: false } };

let rest: RunningPostgrest;
let db: pg.Client;
let service: SupabaseClient;
let serviceKey: string;

const fixtures = `
  create table public.pgrst_neg_log (id uuid primary key, batch uuid not null);
  create function public.pgrst_neg_insert(p_batch uuid, p_n int) returns setof uuid language sql
    as $$ insert into public.pgrst_neg_log (id, batch)
          select gen_random_uuid(), p_batch from generate_series(1, p_n) returning id $$;
  create function public.pgrst_neg_scalar(p_a int) returns jsonb language sql
    as $$ select jsonb_build_object('a', p_a, 'none', null) $$;
`;

/**
 * postgrest-js offers `.maxAffected()` only on a client typed for PostgREST 13+ (a generated
 * `Database` type says so); the call on the wire is the same, so the builder is used as it is.
 */
function maxAffected(builder: unknown, rows: number) {
  return (
    builder as {
      maxAffected(n: number): PromiseLike<{ error: unknown; status: number }>;
    }
  ).maxAffected(rows);
}

async function logged(batch: string): Promise<number> {
  const { rows } = await db.query<{ n: string }>(
    "select count(*) as n from public.pgrst_neg_log where batch = $1",
    [batch],
  );
  return Number(rows[0]?.n);
}

/** The raw answer to a call with these headers, as the wire carries it. */
async function call(fn: string, body: unknown, headers: Record<string, string>) {
  const res = await fetch(`${rest.url}/rest/v1/rpc/${fn}`, {
    method: "POST",
    headers: {
      apikey: serviceKey,
      authorization: `Bearer ${serviceKey}`,
      "content-type": "application/json",
      ...headers,
    },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

/** PostgREST's refusal: `status`, and a body of exactly `refusal` with no hint. */
function expectRefused(
  answer: { status: number; body: unknown },
  status: number,
  refusal: { code: string; message: string; details: string | null },
) {
  expect(answer.status).toBe(status);
  expect(answer.body).toEqual({ ...refusal, hint: null });
}

/** pgrst_neg_scalar(1) with these headers: the raw answer. */
const scalar = (headers: Record<string, string>) => call("pgrst_neg_scalar", { p_a: 1 }, headers);

/** pgrst_neg_insert of `n` rows in a new batch, with this Prefer: the batch and the raw answer. */
async function insertBatch(n: number, prefer: string) {
  const batch = randomUUID();
  return { batch, r: await call("pgrst_neg_insert", { p_batch: batch, p_n: n }, { prefer }) };
}

beforeAll(async () => {
  db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  await db.query(fixtures);
  serviceKey = await mintServiceRoleKey(jwtSecret);
  rest = await startPostgrest({
    port: await freePort(),
    databaseUrl,
    jwtSecret,
    serviceRoleKey: serviceKey,
  });
  service = createClient(rest.url, serviceKey, opts);
});

afterAll(async () => {
  await rest?.close();
  await db?.query(`
    drop function if exists public.pgrst_neg_insert, public.pgrst_neg_scalar;
    drop table if exists public.pgrst_neg_log;`);
  await db?.end();
});

describe("Prefer", () => {
  test(".maxAffected(1) on a set-returning rpc that changes 3 rows: 400 PGRST124 and nothing is kept", async () => {
    const batch = randomUUID();
    const { error, status } = await maxAffected(
      service.rpc("pgrst_neg_insert", { p_batch: batch, p_n: 3 }),
      1,
    );
    expect(status).toBe(400);
    expect(error).toMatchObject({
      code: "PGRST124",
      message: "Query result exceeds max-affected preference constraint",
      details: "The query affects 3 rows",
    });
    expect(await logged(batch)).toBe(0);
  });

  test(".maxAffected(3) on the same call: served, the rows kept, the preference applied", async () => {
    const { batch, r } = await insertBatch(3, "handling=strict, max-affected=3");
    expect(r.status).toBe(200);
    expect(r.body).toHaveLength(3);
    expect(r.headers.get("preference-applied")).toBe("handling=strict, max-affected=3");
    expect(await logged(batch)).toBe(3);
  });

  test("max-affected without handling=strict is ignored, as PostgREST ignores it", async () => {
    const { batch, r } = await insertBatch(2, "max-affected=1");
    expect(r.status).toBe(200);
    expect(await logged(batch)).toBe(2);
  });

  test(".maxAffected() on an rpc that returns one value: 400 PGRST128", async () => {
    const { error, status } = await maxAffected(service.rpc("pgrst_neg_scalar", { p_a: 1 }), 1);
    expect(status).toBe(400);
    expect(error).toMatchObject({
      code: "PGRST128",
      message:
        "Function must return SETOF or TABLE when max-affected preference is used with handling=strict",
    });
  });

  test("handling=strict with an unknown preference: 400 PGRST122 naming it; lenient: served", async () => {
    const strict = await scalar({ prefer: "handling=strict, count=exact, frobnicate=yes" });
    expectRefused(strict, 400, {
      code: "PGRST122",
      message: "Invalid preferences given with handling=strict",
      details: "Invalid preferences: frobnicate=yes",
    });
    const lenient = await scalar({ prefer: "frobnicate=yes" });
    expect(lenient.status).toBe(200);
    expect(lenient.body).toEqual({ a: 1, none: null });
  });

  test("a time zone preference is refused with 501, not answered in the server's zone", async () => {
    const r = await scalar({ prefer: "timezone=America/Los_Angeles" });
    expect(r.status).toBe(501);
    expect(r.body.code).toBe("PGRSTX01");
  });
});

describe("Accept", () => {
  test("an unknown media type: 406 PGRST107 naming it", async () => {
    const r = await scalar({ accept: "text/foo" });
    expectRefused(r, 406, {
      code: "PGRST107",
      message: "None of these media types are available: text/foo",
      details: null,
    });
  });

  test.each([
    ["csv()", (b: ReturnType<SupabaseClient["rpc"]>) => b.csv()],
    ["stripNulls()", (b: ReturnType<SupabaseClient["rpc"]>) => b.stripNulls()],
    ["geojson()", (b: ReturnType<SupabaseClient["rpc"]>) => b.geojson()],
    ["explain()", (b: ReturnType<SupabaseClient["rpc"]>) => b.explain()],
  ])("%s is refused with 501, never answered as plain JSON", async (_name, shape) => {
    const { error, status, data } = await shape(service.rpc("pgrst_neg_scalar", { p_a: 1 }));
    expect(status).toBe(501);
    expect(data).toBeNull();
    expect(JSON.stringify(error)).toContain("not supported by this local stand-in");
  });

  test("the default, application/json, */* and .single() are served", async () => {
    for (const accept of ["application/json", "*/*", "text/foo, application/json"]) {
      const r = await call("pgrst_neg_scalar", { p_a: 2 }, { accept });
      expect({ accept, status: r.status, body: r.body }).toEqual({
        accept,
        status: 200,
        body: { a: 2, none: null },
      });
    }
    const batch = randomUUID();
    const { data, error } = await service
      .rpc("pgrst_neg_insert", { p_batch: batch, p_n: 1 })
      .single();
    expect(error).toBeNull();
    expect(typeof data).toBe("string");
  });
});
