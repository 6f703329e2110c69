/**
 * `npm run dev`'s environment for the app (dev/stack/services.ts appEnv): a stand-in brings its
 * own URL and keys, and only those; the app's own variables (the safety identifier key, the
 * cron secret, the model, the app URL) are the same whichever services are real.
 */
import { describe, expect, test } from "vitest";
import { appEnv, LOCAL_VALUES, type Services } from "../../dev/stack/services.ts";

/** What appEnv reads of the services: every stand-in running, or none of the optional ones. */
function services(running: boolean): Services {
  const at = (url: string) => ({ url });
  return {
    postgrest: at("http://127.0.0.1:54321"),
    project: { shape: "new", secretKey: "sb_secret_x", publishableKey: "sb_publishable_x" },
    qstash: { current: () => (running ? at("http://127.0.0.1:8080") : undefined) },
    redisRest: running ? at("http://127.0.0.1:8079") : undefined,
    openai: running ? at("http://127.0.0.1:8090/v1") : undefined,
    alerts: running ? at("http://127.0.0.1:8091") : undefined,
    traces: running ? at("http://127.0.0.1:4318") : undefined,
  } as unknown as Services;
}

/** The variables that name how to reach a service: the ones a real service's own replace. */
const SERVICE_VARIABLES = [
  "OPENAI_API_KEY",
  "OPENAI_BASE_URL",
  "QSTASH_URL",
  "QSTASH_TOKEN",
  "QSTASH_CURRENT_SIGNING_KEY",
  "QSTASH_NEXT_SIGNING_KEY",
  "UPSTASH_REDIS_REST_URL",
  "UPSTASH_REDIS_REST_TOKEN",
  "ALERT_WEBHOOK_URL",
  "OTEL_EXPORTER_OTLP_ENDPOINT",
];

describe("the dev stack's app environment", () => {
  const appUrl = "http://127.0.0.1:3000";

  test("with every service real, the app's own variables are those it has with the stand-ins", () => {
    const standIns = appEnv(services(true), { appUrl, userEnv: {} });
    const real = appEnv(services(false), { appUrl, userEnv: {} });
    const own = (env: Record<string, string>) =>
      Object.fromEntries(Object.entries(env).filter(([k]) => !SERVICE_VARIABLES.includes(k)));
    expect(own(real)).toEqual(own(standIns));
    expect(
      Object.keys(standIns)
        .filter((k) => !(k in real))
        .sort(),
    ).toEqual([...SERVICE_VARIABLES].sort());
  });

  test("a real OpenAI endpoint tried locally still gets a safety identifier key; the developer's own wins", () => {
    const userEnv = { OPENAI_API_KEY: "sk-real", OPENAI_BASE_URL: "https://api.example.test/v1" };
    const env = appEnv(services(false), { appUrl, userEnv });
    expect(env).toMatchObject({
      ...userEnv,
      OPENAI_SAFETY_IDENTIFIER_KEY: LOCAL_VALUES.safetyIdentifierKey,
    });
    const mine = "a-developer-chosen-safety-identifier-key";
    expect(
      appEnv(services(false), {
        appUrl,
        userEnv: { ...userEnv, OPENAI_SAFETY_IDENTIFIER_KEY: mine },
      }).OPENAI_SAFETY_IDENTIFIER_KEY,
    ).toBe(mine);
  });
});
