/**
 * The local Supabase project's two shapes, end to end on the built app. The default is a project
 * created today (ES256 user tokens from the Auth stand-in, `sb_` API keys, no JWT secret in the
 * app's environment); the whole e2e suite runs on it. This file checks that shape on the wire,
 * and keeps a smoke group on the legacy shape (`DEV_SUPABASE_SHAPE=legacy`: HS256 tokens, the
 * JWT keys), so a project that has not migrated keeps working.
 */
import { decodeProtectedHeader } from "jose";
import { describe, expect, test } from "vitest";
import { newUser, useStack } from "../support/stack.ts";

async function smoke(fixture: ReturnType<typeof useStack>) {
  const { stack } = fixture;
  const { api, accessToken } = await newUser(stack, "pro");
  const created = await api.enqueue("Write a haiku about signing keys");
  expect(created.status).toBe(202);
  const job = await api.waitTerminal(created.body.job.id);
  expect(job).toMatchObject({ status: "succeeded", quotaRefunded: false });
  expect((await api.usage()).body).toMatchObject({ plan: "pro", used: 1, active: 0 });
  const jwks = await (await fetch(`${stack.urls.supabase}/auth/v1/.well-known/jwks.json`)).json();
  const config = await (await fetch(`${stack.urls.app}/api/public-config`)).json();
  return { header: decodeProtectedHeader(accessToken), jwks, config };
}

describe("the default: a project created today", () => {
  const fixture = useStack();
  test("ES256 user tokens verified by the JWKS, the sb_ keys, no SUPABASE_JWT_SECRET", async () => {
    const { env } = fixture.stack;
    expect(env.SUPABASE_SECRET_KEY).toMatch(/^sb_secret_/);
    expect(env.SUPABASE_PUBLISHABLE_KEY).toMatch(/^sb_publishable_/);
    expect(env.SUPABASE_JWT_SECRET).toBeUndefined();
    expect(env.SUPABASE_SERVICE_ROLE_KEY).toBeUndefined();
    const { header, jwks, config } = await smoke(fixture);
    expect(header).toMatchObject({ alg: "ES256", typ: "JWT" });
    expect(jwks.keys.map((k: { kid: string }) => k.kid)).toEqual([header.kid]);
    expect(config).toEqual({
      supabaseUrl: env.SUPABASE_URL,
      supabasePublishableKey: env.SUPABASE_PUBLISHABLE_KEY,
    });
  });
});

describe("DEV_SUPABASE_SHAPE=legacy: a project on the legacy JWT secret", () => {
  const fixture = useStack({ shape: "legacy" });
  test("HS256 user tokens verified with SUPABASE_JWT_SECRET, the JWT keys, an empty JWKS", async () => {
    const { env } = fixture.stack;
    expect(env.SUPABASE_JWT_SECRET).toBeTruthy();
    expect(env.SUPABASE_SERVICE_ROLE_KEY?.split(".")).toHaveLength(3);
    expect(env.SUPABASE_SECRET_KEY).toBeUndefined();
    const { header, jwks, config } = await smoke(fixture);
    expect(header).toEqual({ alg: "HS256", typ: "JWT" });
    expect(jwks).toEqual({ keys: [] });
    expect(config).toEqual({
      supabaseUrl: env.SUPABASE_URL,
      supabasePublishableKey: env.SUPABASE_ANON_KEY,
    });
  });
});
