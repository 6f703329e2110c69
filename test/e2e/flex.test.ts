/**
 * The economy plan on OpenAI's flex tier, through the whole local stack: the app as Vercel
 * builds it, QStash's deliveries, the real port and the fake model answering a flex request
 * with OpenAI's 429 "Resource Unavailable" while its flex capacity is off. In a stack of its own:
 * the point is that a flex wait does NOT close the shared provider gate, so no other test's
 * 429 may close it here either.
 */
import { createHmac } from "node:crypto";
import { describe, expect, test } from "vitest";
import { events, newUser, refundEvents, until, useStack } from "../support/stack.ts";

const fixture = useStack({ env: { PROVIDER_BACKOFF_SECONDS: "1" } });

async function setFlexCapacity(available: boolean): Promise<void> {
  const res = await fetch(`${new URL(fixture.stack.urls.openai).origin}/__fake/flex`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ available }),
  });
  expect(res.status).toBe(200);
}

async function userOn(plan: string) {
  const user = await newUser(fixture.stack, "pro");
  await fixture.stack.sql.query("update public.user_plans set plan_id = $2 where user_id = $1", [
    user.userId,
    plan,
  ]);
  return user;
}

/** The requests the fake served (a flex 429 is not among them). */
const served = () =>
  fixture.stack.model.stats().requests as unknown as {
    serviceTier: string | null;
    safetyIdentifier: string | null;
  }[];

/** The tier each attempt of a job ran on, from its `started` events. */
async function attemptTiers(jobId: string): Promise<string[]> {
  const { rows } = await fixture.stack.sql.query<{ tier: string }>(
    "select detail->>'service_tier' as tier from public.job_events where job_id = $1 and event = 'started' order by id",
    [jobId],
  );
  return rows.map((r) => r.tier);
}

describe("economy on flex, end to end", () => {
  test("a flex 429 does not hold back the standard plan: racing jobs, the standard one runs at once; the flex one waits without a quota hit and succeeds when capacity returns", async () => {
    const { stack } = fixture;
    await setFlexCapacity(false);
    try {
      const economy = await userOn("economy");
      const pro = await newUser(stack, "pro");
      const [flexCreated, proCreated] = await Promise.all([
        economy.api.enqueue("Summarise the week's orders"),
        pro.api.enqueue("Summarise the week's tickets"),
      ]);
      expect([flexCreated.status, proCreated.status]).toEqual([202, 202]);
      const flexId = flexCreated.body.job.id;
      const proId = proCreated.body.job.id;

      const waiting = await economy.api.waitFor(
        flexId,
        (j) => j.phase === "waiting_for_capacity",
        "waiting for cheaper capacity",
      );
      expect(waiting).toMatchObject({ status: "queued", providerQuotaHits: 0 });
      const proJob = await pro.api.waitTerminal(proId);
      expect(proJob).toMatchObject({ status: "succeeded", attempts: 1, providerQuotaHits: 0 });
      expect(await events(stack, proId)).toEqual(["enqueued", "started", "completed"]);

      // While the flex job keeps meeting no capacity, a later standard job still runs at once.
      await until(
        async () => (await events(stack, flexId)).filter((e) => e === "requeued").length,
        (n) => n >= 2,
        { what: "the flex job to have waited at least twice" },
      );
      const later = await pro.api.enqueue("Summarise the week's returns");
      const laterJob = await pro.api.waitTerminal(later.body.job.id);
      expect(laterJob).toMatchObject({ status: "succeeded", attempts: 1, providerQuotaHits: 0 });
      expect((await economy.api.job(flexId)).body.job).toMatchObject({
        status: "queued",
        providerQuotaHits: 0,
      });

      await setFlexCapacity(true);
      const done = await economy.api.waitTerminal(flexId);
      expect(done).toMatchObject({ status: "succeeded", providerQuotaHits: 0 });
      expect(done.attempts).toBeGreaterThanOrEqual(3);
      expect(served().map((r) => r.serviceTier)).toContain("flex");
      expect((await economy.api.usage()).body).toMatchObject({ plan: "economy", used: 1 });
      // On the wire: each user's HMAC under the deployment's key, never the id.
      const key = stack.env.OPENAI_SAFETY_IDENTIFIER_KEY ?? "";
      expect(key.length).toBeGreaterThanOrEqual(32);
      const ids = new Set(served().map((r) => r.safetyIdentifier));
      for (const user of [economy, pro])
        expect(ids).toContain(
          createHmac("sha256", key)
            .update(`quota-jobs safety identifier:${user.userId}`)
            .digest("hex"),
        );
      expect([...ids].some((id) => id?.includes(economy.userId) || id?.includes(pro.userId))).toBe(
        false,
      );
    } finally {
      await setFlexCapacity(true);
    }
  }, 60_000);

  test("a flex job still waiting at its max age fails capacity_unavailable, refunded exactly once", async () => {
    const { stack } = fixture;
    await setFlexCapacity(false);
    try {
      const economy = await userOn("economy");
      const created = await economy.api.enqueue("Summarise the month's invoices");
      const id = created.body.job.id;
      await economy.api.waitFor(id, (j) => j.phase === "waiting_for_capacity", "waiting");
      // Almost as old as a job may be (no sleeping for three hours): the next wait passes it.
      await stack.sql.query(
        "update public.generation_jobs set created_at = now() - make_interval(secs => $2) where id = $1",
        [id, Number(stack.env.JOB_MAX_AGE_SECONDS ?? 10_800) - 1],
      );
      const job = await economy.api.waitTerminal(id);
      expect(job).toMatchObject({
        status: "failed",
        failureReason: "capacity_unavailable",
        providerQuotaHits: 0,
        quotaRefunded: true,
      });
      expect(await refundEvents(stack, id)).toBe(1);
      expect((await economy.api.usage()).body.used).toBe(0);
    } finally {
      await setFlexCapacity(true);
    }
  }, 60_000);

  test("a plan that falls back: after its fallback time the job runs on the standard tier and succeeds", async () => {
    const { stack } = fixture;
    await stack.sql.query(
      `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
         max_output_tokens, meter, service_tier, flex_fallback_after_seconds, model)
       values ('flex-fallback-e2e', 'Flex, falls back', 'month', 10, 2, 256, 'jobs', 'flex', 3,
         'gpt-5.4-mini')
       on conflict (id) do nothing`,
    );
    await setFlexCapacity(false);
    try {
      const user = await userOn("flex-fallback-e2e");
      const before = served().length;
      const created = await user.api.enqueue("Summarise the release notes");
      const id = created.body.job.id;
      const job = await user.api.waitTerminal(id);
      expect(job).toMatchObject({ status: "succeeded", providerQuotaHits: 0 });
      // Flex until the fallback was due (each one a 429), then the standard tier, which served it.
      const tiers = await attemptTiers(id);
      expect(tiers[0]).toBe("flex");
      expect(tiers.at(-1)).toBe("default");
      expect(tiers.filter((t) => t === "default")).toHaveLength(1);
      expect(
        served()
          .slice(before)
          .map((r) => r.serviceTier),
      ).toEqual(["default"]);
    } finally {
      await setFlexCapacity(true);
    }
  }, 60_000);
});
