/**
 * The catalogue watch, `GET /api/cron/models`, through the OpenAI SDK against the fake model's
 * own catalogue (GET /v1/models/{id} with `shutdown_date`), the real database and Redis, and the
 * alert webhook at its boundary: a date 20 days away is recorded and pages once, a model past
 * its date refuses new jobs with 503 `model_retired` and nothing held, and a model the provider
 * does not list pages as the operator's fault (docs/DESIGN.md#models-and-prices).
 */
import { describe, expect, test } from "vitest";
import { createHandler } from "../../api/cron/models.ts";
import { CRON_SECRET, useApi } from "../support/api.ts";

const app = useApi();

const day = (offset: number) =>
  new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);

type Report = { models: Array<{ model: string } & Record<string, unknown>> };

async function watch(deps = app.deps): Promise<{ status: number; body: Report }> {
  const res = await createHandler(() => deps)(
    new Request("https://app.test/api/cron/models", {
      headers: { authorization: `Bearer ${CRON_SECRET}` },
    }),
  );
  return { status: res.status, body: (await res.json()) as Report };
}

const recorded = async (model: string) =>
  (
    await app.admin.query(
      "select shutdown_date::text as d, catalogue_checked_at is not null as checked from public.models where id = $1",
      [model],
    )
  ).rows[0];

describe("GET /api/cron/models", () => {
  test("without the cron secret: 401, nothing read", async () => {
    // The fake counts model calls, not catalogue reads: count the reads at the port itself.
    let reads = 0;
    const catalogue = {
      retrieve: async () => {
        reads += 1;
        return { listed: true as const, shutdownDate: null };
      },
    };
    const res = await createHandler(
      () => app.deps,
      async () => catalogue,
    )(new Request("https://app.test/api/cron/models"));
    expect(res.status).toBe(401);
    expect((await res.json()).error.code).toBe("unauthorized");
    expect(reads).toBe(0);
    // The same handler with the secret reads every watched model: the count has teeth.
    await createHandler(
      () => app.deps,
      async () => catalogue,
    )(
      new Request("https://app.test/api/cron/models", {
        headers: { authorization: `Bearer ${CRON_SECRET}` },
      }),
    );
    expect(reads).toBeGreaterThan(0);
  });

  test("a shutdown date 20 days away is recorded and pages once, naming the plans; jobs still run", async () => {
    const date = day(20);
    app.model.setShutdownDate("gpt-5.4-mini", date);
    try {
      const first = await watch();
      expect(first.status).toBe(200);
      const mini = first.body.models.find((m: { model: string }) => m.model === "gpt-5.4-mini");
      expect(mini).toMatchObject({
        listed: true,
        shutdownDate: date,
        daysLeft: 20,
        paged: "model_shutdown",
        plans: expect.arrayContaining(["economy", "free", "pro", "team"]),
      });
      expect(await recorded("gpt-5.4-mini")).toEqual({ d: date, checked: true });
      expect(app.webhook.ofKind("model_shutdown")).toHaveLength(1);
      expect(app.webhook.ofKind("model_shutdown")[0]?.text).toContain(date);
      // The next day's run: the same date pages no more.
      await watch();
      expect(app.webhook.ofKind("model_shutdown")).toHaveLength(1);
      const user = await app.newUser("pro");
      expect((await app.enqueue(user, "still served")).status).toBe(202);
    } finally {
      app.model.setShutdownDate("gpt-5.4-mini", null);
      await watch();
    }
    expect(await recorded("gpt-5.4-mini")).toEqual({ d: null, checked: true });
  });

  test("a model past its date refuses new jobs: 503 model_retired, nothing held", async () => {
    const user = await app.newUser("pro");
    const used = async () =>
      (
        await app.admin.query(
          "select coalesce(sum(units_used), 0)::int as n from public.quota_usage where user_id = $1",
          [user.id],
        )
      ).rows[0].n as number;
    expect((await app.enqueue(user, "before the shutdown")).status).toBe(202);
    const before = await used();
    // What the watch recorded the day before the shutdown, read on the day itself.
    await app.admin.query(
      "update public.models set shutdown_date = current_date where id = 'gpt-5.4-mini'",
    );
    try {
      const res = await app.enqueue(user, "after the shutdown");
      expect(res.status).toBe(503);
      expect(res.headers.get("retry-after")).toBeNull();
      const body = await res.json();
      expect(body.error).toMatchObject({ code: "model_retired" });
      expect(body.error.message).toContain("Nothing was charged");
      // Nothing held: the one job from before is all the counter has, and nothing was published.
      expect(before).toBe(1);
      expect(await used()).toBe(before);
      expect(app.qstash.messages).toHaveLength(1);
    } finally {
      await app.admin.query(
        "update public.models set shutdown_date = null where id = 'gpt-5.4-mini'",
      );
    }
  });

  test("a provider that still lists a model past its date: recorded, model_retired paged once", async () => {
    // The fake serves a model up to the day before its date (then 404), as the provider's policy
    // says; a catalogue that still lists it afterwards is this port's other answer.
    const yesterday = day(-1);
    const catalogue = {
      retrieve: async (model: string) =>
        model === "gpt-5.4-mini"
          ? { listed: true as const, shutdownDate: yesterday }
          : { listed: true as const, shutdownDate: null },
    };
    const handler = createHandler(
      () => app.deps,
      async () => catalogue,
    );
    const run = () =>
      handler(
        new Request("https://app.test/api/cron/models", {
          headers: { authorization: `Bearer ${CRON_SECRET}` },
        }),
      );
    try {
      const body = await (await run()).json();
      expect(body.models.find((m: { model: string }) => m.model === "gpt-5.4-mini")).toMatchObject({
        paged: "model_retired",
        daysLeft: -1,
      });
      await run();
      expect(app.webhook.ofKind("model_retired")).toHaveLength(1);
      expect(await recorded("gpt-5.4-mini")).toEqual({ d: yesterday, checked: true });
      const user = await app.newUser("free");
      expect((await app.enqueue(user, "on a retired model")).status).toBe(503);
    } finally {
      await app.admin.query(
        "update public.models set shutdown_date = null where id = 'gpt-5.4-mini'",
      );
    }
  });

  test("a model the provider does not list pages provider_misconfigured, once", async () => {
    const { deps } = app.makeDeps({ OPENAI_MODEL: "gpt-unlisted-9" });
    const r = await watch(deps);
    expect(
      r.body.models.find((m: { model: string }) => m.model === "gpt-unlisted-9"),
    ).toMatchObject({
      listed: false,
      paged: "provider_misconfigured",
    });
    await watch(deps);
    const pages = app.webhook.ofKind("provider_misconfigured");
    expect(pages).toHaveLength(1);
    expect(pages[0]?.text).toContain("gpt-unlisted-9");
  });
});
