/**
 * History that does not grow without bound (docs/DESIGN.md#history): job_events partitioned by
 * UTC month, the migration that made it so on a database already holding events, and
 * public.maintain_job_events (lib/history.ts): the months ahead, the default partition's rows
 * moved into the month made for them, and the drops, which never take the current month's events
 * nor an active job's. Reconcile still finds nothing once old months are gone.
 */
import { randomUUID } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import pg from "pg";
import { describe, expect, inject, test } from "vitest";
import { applyCompat, migrationsDir } from "../../dev/postgres/migrate.ts";
import { maintainHistory } from "../../lib/history.ts";
import { reconcile } from "../../ops/reconcile.ts";
import { databaseUrl, rpc } from "../support/db.ts";
import { dbFixture } from "../support/db-fixture.ts";

const db = dbFixture({ fresh: true, noDrift: "file" });
const { admin, svc } = db;

const PARTITIONS = "20261204000000_job_events_partitions.sql";
const DAY = 86_400_000;
const monthName = (d: Date) =>
  `private.job_events_${d.getUTCFullYear()}_${String(d.getUTCMonth() + 1).padStart(2, "0")}`;
const monthStart = (d: Date) => new Date(Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1));

/** Each event's partition, by id. */
async function partitionsOf(
  c: pg.Pool | pg.Client,
  ids: string[],
): Promise<Record<string, string>> {
  const { rows } = await c.query<{ id: string; part: string }>(
    "select id::text, tableoid::regclass::text as part from public.job_events where id = any($1::bigint[])",
    [ids],
  );
  return Object.fromEntries(rows.map((r) => [r.id, r.part]));
}

async function eventsOf(jobId: string): Promise<number> {
  const { rows } = await admin.query<{ n: number }>(
    "select count(*)::int as n from public.job_events where job_id = $1",
    [jobId],
  );
  return rows[0]?.n ?? -1;
}

describe("the migration on a database that already holds events", () => {
  test("keeps every event as it was, each in its month's partition (an old one in the default), and the identity goes on", async () => {
    const name = `h_${randomUUID().replaceAll("-", "")}`;
    const shared = new pg.Client({ connectionString: inject("databaseUrl") });
    await shared.connect();
    await shared.query(`create database ${name}`);
    const url = new URL(inject("databaseUrl"));
    url.pathname = `/${name}`;
    const c = new pg.Client({ connectionString: url.toString() });
    await c.connect();
    try {
      // The database as it was before this migration: the platform, every earlier migration, the plans.
      await applyCompat(c);
      const files = (await readdir(migrationsDir)).filter((f) => f.endsWith(".sql")).sort();
      for (const f of files.filter((f) => f < PARTITIONS))
        await c.query(await readFile(join(migrationsDir, f), "utf8"));
      // The pro plan as the plans table was then (today's seed names columns made later).
      await c.query(
        `insert into public.plans (id, name, period, units_per_period, max_active_jobs,
           max_output_tokens, max_refunded_running_cancels, meter)
         values ('pro', 'Pro', 'month', 100, 3, 8000, 20, 'jobs')`,
      );

      const user = randomUUID();
      await c.query("insert into auth.users (id) values ($1)", [user]);
      await c.query("insert into public.user_plans (user_id, plan_id) values ($1, 'pro')", [user]);
      const now = Date.now();
      const jobs: string[] = [];
      for (const daysAgo of [70, 40, 0]) {
        const at = new Date(now - daysAgo * DAY);
        const { rows } = await c.query(
          "select public.enqueue_job(p_user_id => $1, p_prompt => $2, p_now => $3) as r",
          [user, `before the partitions ${daysAgo}`, at],
        );
        const id = rows[0].r.job.id as string;
        jobs.push(id);
        await c.query("select public.start_job(p_job_id => $1, p_now => $2)", [id, at]);
        await c.query(
          "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'ok', p_now => $2)",
          [id, new Date(at.getTime() + 1000)],
        );
      }
      // An event far older than any month the migration makes a partition for.
      await c.query(
        `insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
         values ($1, $2, '2001-02-03T04:05:06Z', 'imported', null, 'queued', '{"from": "archive"}')`,
        [jobs[0], user],
      );
      const select = "select * from public.job_events order by id";
      const before = (await c.query(select)).rows;
      expect(before).toHaveLength(3 * 3 + 1);

      await c.query(await readFile(join(migrationsDir, PARTITIONS), "utf8"));

      expect((await c.query(select)).rows).toEqual(before);
      const { rows: kind } = await c.query(
        "select relkind from pg_class where oid = 'public.job_events'::regclass",
      );
      expect(kind).toEqual([{ relkind: "p" }]);
      const where = await partitionsOf(
        c,
        before.map((e) => String(e.id)),
      );
      for (const e of before)
        expect({ id: e.id, part: where[String(e.id)] }).toEqual({
          id: e.id,
          part: e.event === "imported" ? "private.job_events_default" : monthName(e.at),
        });

      // The next event's id follows the old ones (ids keep their commit order).
      const maxBefore = Math.max(...before.map((e) => Number(e.id)));
      await c.query("select public.enqueue_job(p_user_id => $1, p_prompt => 'after')", [user]);
      const { rows: next } = await c.query<{ id: string }>(
        "select max(id)::text as id from public.job_events",
      );
      expect(Number(next[0]?.id)).toBe(maxBefore + 1);
      // Still append-only, in a month's partition and in the default alike.
      for (const id of [String(before[1]?.id), String(before.at(-1)?.id)])
        await expect(c.query("delete from public.job_events where id = $1", [id])).rejects.toThrow(
          /append-only/,
        );
      expect((await c.query("select count(*)::int as n from public.quota_drift")).rows[0].n).toBe(
        0,
      );
    } finally {
      await c.end();
      await shared.query(`drop database ${name} with (force)`);
      await shared.end();
    }
  });
});

describe("inserts and the default partition", () => {
  test("an event lands in its month's partition; one far in the future lands in the default, and the maintenance that makes its month moves it there unchanged", async () => {
    const user = await db.user("pro");
    const job = await db.enqueued(user);
    const { rows: mine } = await admin.query<{ id: string }>(
      "select id::text from public.job_events where job_id = $1",
      [job.id],
    );
    const ids = mine.map((r) => r.id);
    expect(Object.values(await partitionsOf(admin, ids))).toEqual([monthName(new Date())]);

    const { rows: far } = await admin.query<{ id: string }>(
      `insert into public.job_events (job_id, user_id, at, event, to_status)
       values ($1, $2, '2099-06-15T12:00:00Z', 'from_the_future', 'queued') returning id::text`,
      [job.id, user],
    );
    const farId = far[0]?.id as string;
    expect(await partitionsOf(admin, [farId])).toEqual({ [farId]: "private.job_events_default" });
    const row = async () =>
      (await admin.query("select * from public.job_events where id = $1", [farId])).rows;
    const before = await row();

    const r = await rpc(svc, "maintain_job_events", {
      p_before: new Date("2000-01-01T00:00:00Z"),
      p_now: new Date("2099-05-20T00:00:00Z"),
      p_months_ahead: 1,
    });
    expect(r).toMatchObject({
      outcome: "maintained",
      created: ["job_events_2099_05", "job_events_2099_06"],
      dropped: [],
    });
    expect(await partitionsOf(admin, [farId])).toEqual({
      [farId]: "private.job_events_2099_06",
    });
    expect(await row()).toEqual(before);
    // The default went back in place with its append-only trigger.
    const { rows: past } = await admin.query<{ id: string }>(
      `insert into public.job_events (job_id, user_id, at, event, to_status)
       values ($1, $2, '1999-01-01T00:00:00Z', 'from_the_past', 'queued') returning id::text`,
      [job.id, user],
    );
    const pastId = past[0]?.id as string;
    expect(await partitionsOf(admin, [pastId])).toEqual({
      [pastId]: "private.job_events_default",
    });
    await expect(
      svc.query("delete from public.job_events where id = $1", [pastId]),
    ).rejects.toThrow(/append-only/);
    // A second run has nothing to make.
    expect(
      await rpc(svc, "maintain_job_events", {
        p_before: new Date("2000-01-01T00:00:00Z"),
        p_now: new Date("2099-05-20T00:00:00Z"),
        p_months_ahead: 1,
      }),
    ).toMatchObject({ outcome: "maintained", created: [], dropped: [] });
  });

  test("nobody reaches a partition directly: not the service role, not a signed-in user", async () => {
    const part = monthName(new Date());
    for (const role of ["service_role", "authenticated", "anon"]) {
      const { rows } = await admin.query(
        `select has_table_privilege($1, $2, 'select') as s, has_table_privilege($1, $2, 'delete') as d,
                has_table_privilege($1, 'private.job_events_default', 'select') as ds`,
        [role, part],
      );
      expect({ role, ...rows[0] }).toEqual({ role, s: false, d: false, ds: false });
    }
  });

  test("bad arguments are an outcome, not an error", async () => {
    expect(
      await rpc(svc, "maintain_job_events", { p_before: new Date(), p_months_ahead: -1 }),
    ).toEqual({ outcome: "invalid_arguments" });
  });
});

describe("pruning", () => {
  test("drops whole months before the cutoff only: never an active job's events, never the current month's, at most p_max_drops a run; reconcile still finds nothing", async () => {
    const now = new Date();
    const ago = (days: number) => new Date(now.getTime() - days * DAY);
    // The months the cron would have made as they came.
    await admin.query(
      `select private.job_events_month_partition(m)
       from generate_series(date_trunc('month', $1::timestamptz), $2::timestamptz, interval '1 month') m`,
      [ago(230), now],
    );
    const user = await db.user("pro");
    // Old and finished: canceled while queued (a refund-bearing event reconcile reads), 170 days ago.
    const old = await db.enqueued(user, { now: ago(170) });
    expect(
      await rpc(svc, "cancel_job", { p_job_id: old.id, p_user_id: user, p_now: ago(170) }),
    ).toMatchObject({ outcome: "canceled" });
    // Older still and finished, two months before, in the oldest month: the first to go.
    const older = await db.enqueued(user, { now: ago(230) });
    expect(
      await rpc(svc, "cancel_job", { p_job_id: older.id, p_user_id: user, p_now: ago(230) }),
    ).toMatchObject({ outcome: "canceled" });
    // Still active (queued) 100 days on: its events, and everything after its creation, stay.
    const active = await db.enqueued(user, { now: ago(100) });
    const recent = await db.enqueued(user, { now: ago(40) });
    expect(
      await rpc(svc, "cancel_job", { p_job_id: recent.id, p_user_id: user, p_now: ago(40) }),
    ).toMatchObject({ outcome: "canceled" });
    const current = await db.enqueued(user);

    // At most one drop a run: the oldest month goes first.
    const first = await rpc(svc, "maintain_job_events", {
      p_before: ago(30),
      p_now: now,
      p_max_drops: 1,
    });
    expect(first).toMatchObject({ outcome: "maintained", dropped: [monthName(ago(230)).slice(8)] });
    expect(await eventsOf(older.id)).toBe(0);
    expect(await eventsOf(old.id)).toBe(2);

    const second = await rpc(svc, "maintain_job_events", {
      p_before: ago(30),
      p_now: now,
      p_max_drops: 10,
    });
    // The cutoff is the active job's creation, not now minus 30 days.
    expect(new Date(second.cutoff).getTime()).toBe(ago(100).getTime());
    expect(second.dropped).toContain(monthName(ago(170)).slice(8));
    expect(second.dropped).not.toContain(monthName(ago(100)).slice(8));
    expect(await eventsOf(old.id)).toBe(0);
    expect(await eventsOf(active.id)).toBe(1);
    expect(await eventsOf(recent.id)).toBe(2);
    expect(await eventsOf(current.id)).toBe(1);
    const since = new Date(second.events_complete_since).getTime();
    expect(since).toBeLessThanOrEqual(ago(100).getTime());
    expect(since).toBeGreaterThan(ago(170).getTime());

    // With every job ended, a retention asking for everything, even with a clock a year ahead,
    // still keeps this month (the database's own clock bounds the cutoff too).
    for (const j of [active, current])
      expect(
        await rpc(svc, "cancel_job", { p_job_id: j.id, p_user_id: user, p_now: now }),
      ).toMatchObject({ outcome: "canceled" });
    const third = await rpc(svc, "maintain_job_events", {
      p_before: new Date(now.getTime() + 365 * DAY),
      p_now: new Date(now.getTime() + 365 * DAY),
      p_max_drops: 20,
    });
    expect(new Date(third.cutoff).getTime()).toBe(monthStart(now).getTime());
    expect(third.dropped).toContain(monthName(ago(40)).slice(8));
    expect(third.dropped).not.toContain(monthName(now).slice(8));
    expect(await eventsOf(current.id)).toBe(2);
    const { rows: left } = await admin.query<{ part: string }>(
      `select distinct c.relname::text as part from pg_inherits i join pg_class c on c.oid = i.inhrelid
       where i.inhparent = 'public.job_events'::regclass order by 1`,
    );
    expect(left.map((r) => r.part)).toContain(monthName(now).slice(8));
    expect(left.map((r) => r.part)).toContain("job_events_default");

    // The checks that read events judge only what is kept: the jobs whose refund events were
    // dropped are not reported as refunds without an event.
    const report = await reconcile({ dbUrl: databaseUrl() });
    expect(report.findings).toEqual([]);
  });

  test("lib/history.ts runs it with the retention as now minus its days, and reports the outcome", async () => {
    const calls: Array<Record<string, unknown>> = [];
    const now = new Date("2026-12-02T06:00:00Z");
    const r = await maintainHistory(
      {
        config: {} as never,
        now: () => now,
        rpc: async (fn, args) => {
          calls.push(args);
          return rpc(svc, fn, args);
        },
      },
      { retentionDays: 30 },
    );
    expect(r).toMatchObject({ outcome: "maintained" });
    expect(calls).toEqual([
      {
        p_before: "2026-11-02T06:00:00.000Z",
        p_now: "2026-12-02T06:00:00.000Z",
        p_months_ahead: 2,
        p_max_drops: 2,
      },
    ]);
    const failed = await maintainHistory({
      config: {} as never,
      now: () => now,
      rpc: async () => {
        throw new Error("the database is away");
      },
    });
    expect(failed).toEqual({ outcome: "failed" });
  });
});
