import { describe, expect, test } from "vitest";
import { createHandler } from "../../api/public-config.ts";
import type { Config } from "../../lib/config.ts";

const config = (over: Partial<Config>) =>
  ({
    supabaseUrl: "https://abcdefghijklmnop.supabase.co",
    supabasePublishableKey: "sb_publishable_public-key",
    supabaseSecretKey: "sb_secret_server-only",
    supabaseServiceRoleKey: "service-role-secret",
    supabaseJwtSecret: "jwt-secret-jwt-secret-jwt-secret-0000",
    openaiApiKey: "sk-secret",
    qstashToken: "qstash-secret",
    cronSecret: "cron-secret-0123456789",
    ...over,
  }) as Config;

const get = (c: Config, method = "GET") =>
  createHandler(() => ({ config: c }))(
    new Request("http://127.0.0.1:3000/api/public-config", { method }),
  );

describe("GET /api/public-config", () => {
  test("answers the Supabase URL and publishable key, and nothing else", async () => {
    const res = await get(config({}));
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(JSON.parse(text)).toEqual({
      supabaseUrl: "https://abcdefghijklmnop.supabase.co",
      supabasePublishableKey: "sb_publishable_public-key",
    });
    for (const secret of [
      "sb_secret_",
      "service-role-secret",
      "jwt-secret",
      "sk-secret",
      "qstash",
      "cron",
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  test("a legacy project: the anon key is served as the publishable key", async () => {
    const res = await get(
      config({ supabasePublishableKey: undefined, supabaseAnonKey: "eyJ.anon.jwt" }),
    );
    expect(await res.json()).toMatchObject({ supabasePublishableKey: "eyJ.anon.jwt" });
  });

  test("no publishable key: null, and the page offers no password sign-in", async () => {
    const res = await get(config({ supabasePublishableKey: undefined }));
    expect(await res.json()).toMatchObject({ supabasePublishableKey: null });
  });

  test("other methods: 405", async () => {
    const res = await get(config({}), "POST");
    expect(res.status).toBe(405);
  });
});
