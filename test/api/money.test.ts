/**
 * A money plan through the real worker, the fake model and the real database: the hold is the
 * call's worst case in micro-dollars, and the capture is the provider's usage priced at the tier
 * the response says served it (docs/DESIGN.md#metering-hold-and-capture), cached input at the
 * cached price. gpt-5.4-mini per million tokens: flex 0.375 in, 0.0375 cached, 2.25 out;
 * standard 0.75, 0.075, 4.5.
 */
import { describe, expect, test } from "vitest";
import { useApi } from "../support/api.ts";

const app = useApi();

const PRICES = {
  flex: { input: 375_000, cached: 37_500, output: 2_250_000 },
  default: { input: 750_000, cached: 75_000, output: 4_500_000 },
} as const;

async function moneyPlan(id: string): Promise<void> {
  await app.admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
       max_output_tokens, meter, service_tier, model, reasoning_effort)
     values ($1, 'Wallet', 'month', 1000000, 3, 512, 'money', 'flex', 'gpt-5.4-mini', 'none')
     on conflict (id) do nothing`,
    [id],
  );
}

async function run(prompt: string) {
  await moneyPlan("wallet_flex");
  const user = await app.newUser("wallet_flex");
  const res = await app.enqueue(user, prompt);
  expect(res.status).toBe(202);
  const { job } = await res.json();
  expect(job).toMatchObject({ meter: "money", model: "gpt-5.4-mini" });
  const delivered = await app.deliver(app.qstash.latestFor(job.id));
  expect(delivered.status).toBe(200);
  const { rows } = await app.admin.query(
    `select j.hold, j.captured, e.detail -> 'usage' as usage from public.generation_jobs j
     join public.job_events e on e.job_id = j.id and e.event = 'completed' where j.id = $1`,
    [job.id],
  );
  const [bill] = app.model.stats().requests;
  return { row: rows[0], bill, hold: job.hold as number };
}

const price = (
  p: (typeof PRICES)[keyof typeof PRICES],
  u: { prompt_tokens: number; completion_tokens: number; cached_tokens?: number },
) =>
  Math.ceil(
    ((u.prompt_tokens - (u.cached_tokens ?? 0)) * p.input +
      (u.cached_tokens ?? 0) * p.cached +
      u.completion_tokens * p.output) /
      1_000_000,
  );

describe("a money plan through the worker", () => {
  test("served at flex: captured at flex prices, cached input at the cached price; the rest released", async () => {
    const { row, bill, hold } = await run("Write a haiku about queues [fake:cached:8]");
    expect(bill).toMatchObject({ serviceTier: "flex", servedTier: "flex", cachedTokens: 8 });
    expect(row.usage).toMatchObject({ source: "provider", service_tier: "flex", cached_tokens: 8 });
    expect(row.captured).toBe(price(PRICES.flex, row.usage));
    expect(row.captured).toBeLessThan(hold);
  });

  test("asked for flex, served at standard: captured at the standard price, within the hold", async () => {
    const { row, bill, hold } = await run("Write a haiku about queues [fake:served_tier:default]");
    expect(bill).toMatchObject({ serviceTier: "flex", servedTier: "default" });
    expect(row.usage).toMatchObject({ service_tier: "default" });
    expect(row.captured).toBe(price(PRICES.default, row.usage));
    expect(row.captured).toBeGreaterThan(price(PRICES.flex, row.usage));
    expect(row.captured).toBeLessThanOrEqual(hold);
  });
});
