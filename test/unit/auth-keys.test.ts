/**
 * The Supabase API keys in lib/config.ts: the new names first, the legacy ones still accepted,
 * and a key in the wrong slot named at start-up by variable and kind, never by value.
 */
import { SignJWT } from "jose";
import { describe, expect, test } from "vitest";
import { loadConfig, supabaseKeys } from "../../lib/config.ts";
import { ConfigError } from "../../lib/errors.ts";
import { envWithout } from "../support/env.ts";

/** Everything but the Supabase keys, which each test supplies under one name or another. */
const base = envWithout("SUPABASE_SECRET_KEY");
const SECRET = "sb_secret_AbCdEfGhIjKlMnOpQrStUv_12345678";
const PUBLISHABLE = "sb_publishable_AbCdEfGhIjKlMnOpQrStUv_12345678";
const legacyKey = (role: string) =>
  new SignJWT({ iss: "supabase", ref: "abc", role })
    .setProtectedHeader({ alg: "HS256", typ: "JWT" })
    .setIssuedAt()
    .sign(new TextEncoder().encode("legacy-project-jwt-secret-with-more-than-32-chars"));

/** The keys the server and the page get when the Supabase keys are `env`. */
function keysFor(env: Record<string, string>) {
  return supabaseKeys(loadConfig({ ...base, ...env }));
}

function problems(env: Record<string, string>): string {
  try {
    loadConfig({ ...base, ...env });
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    const text = (err as ConfigError).problems.join("\n");
    // Never the value: not the key, not a prefix of its random part.
    for (const value of Object.values(env)) expect(text).not.toContain(value.slice(0, 20));
    return text;
  }
  throw new Error("expected a ConfigError");
}

describe("Supabase API keys", () => {
  test("a project created today: the secret key for the server, the publishable key for the page", () => {
    expect(keysFor({ SUPABASE_SECRET_KEY: SECRET, SUPABASE_PUBLISHABLE_KEY: PUBLISHABLE })).toEqual(
      {
        server: SECRET,
        publishable: PUBLISHABLE,
      },
    );
  });

  test("a legacy project: the service_role and anon JWT keys under their legacy names", async () => {
    const service = await legacyKey("service_role");
    const anon = await legacyKey("anon");
    expect(keysFor({ SUPABASE_SERVICE_ROLE_KEY: service, SUPABASE_ANON_KEY: anon })).toEqual({
      server: service,
      publishable: anon,
    });
  });

  test("both names set (mid-migration): the new keys win", async () => {
    const keys = keysFor({
      SUPABASE_SECRET_KEY: SECRET,
      SUPABASE_SERVICE_ROLE_KEY: await legacyKey("service_role"),
      SUPABASE_PUBLISHABLE_KEY: PUBLISHABLE,
      SUPABASE_ANON_KEY: await legacyKey("anon"),
    });
    expect(keys).toEqual({ server: SECRET, publishable: PUBLISHABLE });
  });

  test("no server key under either name is named", () => {
    expect(problems({})).toMatch(
      /^SUPABASE_SECRET_KEY is required \(or the legacy SUPABASE_SERVICE_ROLE_KEY\)$/m,
    );
  });

  test("a secret key where the page would receive it is refused at start-up", async () => {
    expect(problems({ SUPABASE_SECRET_KEY: SECRET, SUPABASE_PUBLISHABLE_KEY: SECRET })).toMatch(
      /^SUPABASE_PUBLISHABLE_KEY holds a secret key: the page would receive it/m,
    );
    expect(problems({ SUPABASE_SECRET_KEY: SECRET, SUPABASE_ANON_KEY: SECRET })).toMatch(
      /^SUPABASE_ANON_KEY holds a secret key/m,
    );
    const service = await legacyKey("service_role");
    expect(problems({ SUPABASE_SECRET_KEY: SECRET, SUPABASE_ANON_KEY: service })).toMatch(
      /^SUPABASE_ANON_KEY holds a secret key/m,
    );
  });

  test("a publishable or anon key in a secret slot is refused at start-up", async () => {
    expect(problems({ SUPABASE_SECRET_KEY: PUBLISHABLE })).toMatch(
      /^SUPABASE_SECRET_KEY holds a publishable key \(sb_publishable_…\)/m,
    );
    expect(problems({ SUPABASE_SERVICE_ROLE_KEY: PUBLISHABLE })).toMatch(
      /^SUPABASE_SERVICE_ROLE_KEY holds a publishable key/m,
    );
    expect(problems({ SUPABASE_SERVICE_ROLE_KEY: await legacyKey("anon") })).toMatch(
      /^SUPABASE_SERVICE_ROLE_KEY holds the anon key/m,
    );
  });

  test("a legacy JWT under a new name is pointed at its legacy name", async () => {
    expect(problems({ SUPABASE_SECRET_KEY: await legacyKey("service_role") })).toMatch(
      /^SUPABASE_SECRET_KEY must be a secret key \(sb_secret_…\); a legacy service_role JWT goes in SUPABASE_SERVICE_ROLE_KEY$/m,
    );
    expect(
      problems({ SUPABASE_SECRET_KEY: SECRET, SUPABASE_PUBLISHABLE_KEY: await legacyKey("anon") }),
    ).toMatch(/^SUPABASE_PUBLISHABLE_KEY must be a publishable key/m);
  });
});
