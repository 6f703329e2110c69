/**
 * Retention and erasure at size: `tsx bench/retention.ts [--quick]`.
 *
 * The table is bulk-loaded as section 5 (growth) loads it: 10,000 users, statuses from a hash of
 * the row number, 89 % finished over the past year (so about 92 % of those past a 30-day
 * retention), 10 % stale, 1 % recently active. At 100 k and at 1 M jobs it times:
 * - `retention_batch(now() - 30 days, 1000)`, five batches in a row (each erases 1,000 jobs);
 * - ten batches of 10,000 (the rate a backlog drains at);
 * - a batch with nothing before its cutoff (what a steady cron tick pays);
 * - `erase_user` of a user with ~10 (100 k) or ~100 (1 M) jobs, five users;
 * - `export_user`, one first page of 200, five users;
 * and shows the batch's plan (it must walk generation_jobs_finished_unerased).
 */
import { createUsers, driftRows, growingTable, startBenchDb } from "./support/pg.ts";
import { log, median, round, table } from "./support/util.ts";

async function ms(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

async function main() {
  const quick = process.argv.includes("--quick");
  const sizes = quick ? [100_000] : [100_000, 1_000_000];
  const db = await startBenchDb();
  try {
    const users = await createUsers(db.admin, 10_000, "bench");
    const svc = db.service(2);
    const rows: (string | number)[][] = [];
    let erasedUsers = 0;
    for await (const { size, loadSeconds } of growingTable(db.admin, users, sizes)) {
      log(`  retention: ${size} jobs loaded in ${round(loadSeconds, 1)} s`);
      const { rows: due } = await db.admin.query<{ n: number }>(
        `select count(*)::int n from public.generation_jobs
         where erased_at is null and finished_at < now() - interval '30 days'`,
      );

      const batch = "select public.retention_batch(now() - interval '30 days', 1000) n";
      const batches: number[] = [];
      for (let i = 0; i < 5; i++) batches.push(await ms(() => svc.query(batch)));
      const { rows: plan } = await db.admin.query(
        `explain select j.id from public.generation_jobs j
         where j.erased_at is null and j.finished_at is not null
           and j.finished_at < now() - interval '30 days'
         order by j.finished_at limit 1000 for update skip locked`,
      );
      const planText = plan.map((r) => r["QUERY PLAN"]).join(" / ");

      // A backlog's drain rate: ten batches of 10,000 (a year's backlog is drained at this rate
      // by the first ticks). Then a cutoff with nothing before it: what a steady tick pays.
      const t1 = performance.now();
      let total = 0;
      for (let i = 0; i < 10; i++) {
        const { rows: r } = await svc.query(
          "select public.retention_batch(now() - interval '30 days', 10000) n",
        );
        total += r[0].n;
      }
      const drainRate = Math.round(total / ((performance.now() - t1) / 1000));
      const nothing = "select public.retention_batch(now() - interval '400 days', 1000) n";
      const empty: number[] = [];
      for (let i = 0; i < 5; i++) empty.push(await ms(() => svc.query(nothing)));

      const erase: number[] = [];
      const exportMs: number[] = [];
      for (let i = 0; i < 5; i++) {
        const user = users[erasedUsers++] as string;
        exportMs.push(
          await ms(() =>
            svc.query("select public.export_user(p_user_id => $1, p_limit => 200)", [user]),
          ),
        );
        erase.push(await ms(() => svc.query("select public.erase_user(p_user_id => $1)", [user])));
      }
      const drift = await driftRows(db.admin);
      rows.push([
        size,
        due[0]?.n ?? 0,
        round(median(batches), 1),
        round(Math.max(...batches), 1),
        `${drainRate} jobs/s`,
        round(median(empty), 2),
        round(median(erase), 1),
        round(median(exportMs), 1),
        drift,
      ]);
      log(`  retention: plan at ${size}: ${planText}`);
    }
    log(
      table(
        [
          "jobs",
          "due (finished > 30 d ago)",
          "batch of 1000 (median ms)",
          "batch max ms",
          "drain (batches of 10k)",
          "nothing left (ms)",
          "erase_user (median ms)",
          "export page 200 (ms)",
          "drift rows",
        ],
        rows,
      ),
    );
  } finally {
    await db.stop();
  }
}

await main();
