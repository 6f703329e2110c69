/**
 * A deployment's environment that `loadConfig` accepts: every required variable set, with the
 * new Supabase secret key. Tests spread it and override the variables they are about.
 */
export const VALID_ENV: Readonly<Record<string, string>> = {
  SUPABASE_URL: "https://abc.supabase.co",
  SUPABASE_SECRET_KEY: "sb_secret_test-secret-key-value",
  QSTASH_TOKEN: "qstash-token-value",
  QSTASH_CURRENT_SIGNING_KEY: "sig_current_value",
  QSTASH_NEXT_SIGNING_KEY: "sig_next_value",
  UPSTASH_REDIS_REST_URL: "https://eu1-redis.upstash.io",
  UPSTASH_REDIS_REST_TOKEN: "redis-token-value",
  OPENAI_API_KEY: "sk-test-openai-key-value",
  APP_URL: "https://jobs.example.com",
  CRON_SECRET: "cron-secret-at-least-16",
};

/** {@link VALID_ENV} without the named variables (e.g. to supply the keys another way). */
export function envWithout(...names: string[]): Record<string, string> {
  return Object.fromEntries(Object.entries(VALID_ENV).filter(([name]) => !names.includes(name)));
}
