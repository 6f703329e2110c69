/**
 * What a change to the schema is worth to a job's life, side by side: `npx tsx bench/schema-ab.ts
 * variants.json`, where the file is `[[name, sql], ...]` (the first is the reference; an empty sql
 * is the schema as the migrations leave it). One cluster; one copy of the migrated database per
 * variant, the variant's change applied to it; one connection each, as PostgREST calls the
 * functions (prepared, the service role). The lives (enqueue_job → start_job → complete_job)
 * alternate between the variants in rounds of PER, ROUNDS times, so a drift of this shared
 * machine lands on every variant alike (fresh clusters, one after the other, moved a life by
 * ±20 % here). Prints each variant's wall time and its backend's CPU time per life, and both as a
 * ratio to the reference. `interleaved` is the same for other benches (section 2c's suspects).
 *
 * To measure a migration not yet in supabase/migrations' past, move it out, and give its text as
 * a variant. Measurements only: nothing here ships.
 */
import { readFileSync } from "node:fs";
import pg from "pg";
import { createUsers, startBenchDb } from "./support/pg.ts";

/** A change to a copy of the migrated database: SQL, or code given a superuser client on it. */
export type Change = string | ((admin: pg.Client) => Promise<void>);

export interface Side {
  name: string;
  /** µs a life, wall and the backend's CPU (user + system). */
  wallUs: number;
  cpuUs: number;
  /** Each round's wall µs a life, in order. */
  rounds: number[];
}

/** The backend's user + system CPU time so far, in µs (clock ticks of 10 ms). */
const backendCpu = (pid: number) => {
  const fields = (readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1] ?? "").split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
};

export async function interleaved(
  variants: [string, Change][],
  o: { rounds: number; per: number; path?: "success" | "failure" },
): Promise<Side[]> {
  const db = await startBenchDb();
  const users = await createUsers(db.admin, 1000, "bench");
  await db.admin.query("checkpoint");
  const url = (database: string) => {
    const u = new URL(db.url);
    u.pathname = `/${database}`;
    return u.toString();
  };
  const admin = new pg.Client({ connectionString: url("template1") });
  await admin.connect();
  // CREATE DATABASE … TEMPLATE needs the template to have no other connection.
  await db.admin.end();
  const sides: (Side & { client: pg.Client; pid: number; wallMs: number; cpu: number })[] = [];
  try {
    for (const [k, [name, change]] of variants.entries()) {
      await admin.query(`create database ab_${k} template postgres`);
      const setup = new pg.Client({ connectionString: url(`ab_${k}`) });
      await setup.connect();
      if (typeof change === "string") {
        if (change) await setup.query(change);
      } else await change(setup);
      await setup.end();
      const client = new pg.Client({
        connectionString: url(`ab_${k}`),
        options: "-c role=service_role -c TimeZone=UTC",
      });
      await client.connect();
      const pid = (await client.query("select pg_backend_pid() as p")).rows[0].p as number;
      sides.push({ name, client, pid, wallMs: 0, cpu: 0, wallUs: 0, cpuUs: 0, rounds: [] });
    }
    let i = 0;
    const ending =
      o.path === "failure"
        ? `select public.fail_job(p_job_id => $1, p_reason => 'model_refused',
             p_error => 'bench: refused', p_attempt => 1) as r`
        : "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'bench output') as r";
    const life = async (client: pg.Client) => {
      i++;
      const e = await client.query({
        name: "enqueue",
        text: "select public.enqueue_job(p_user_id => $1, p_prompt => $2) as r",
        values: [users[i % users.length], `Write a short note about queues and quotas. #${i}`],
      });
      const id = e.rows[0].r.job.id as string;
      const s = await client.query({
        name: "start",
        text: "select public.start_job(p_job_id => $1) as r",
        values: [id],
      });
      const c = await client.query({ name: "ending", text: ending, values: [id] });
      if (
        s.rows[0].r.outcome !== "started" ||
        !["completed", "failed"].includes(c.rows[0].r.outcome)
      )
        throw new Error(`schema-ab: a life did not end as asked: ${JSON.stringify(c.rows[0].r)}`);
    };
    // Warm each side's plans and caches; not counted.
    for (const side of sides) for (let k = 0; k < 200; k++) await life(side.client);
    for (let r = 0; r < o.rounds; r++)
      for (const side of sides) {
        const cpu0 = backendCpu(side.pid);
        const t0 = performance.now();
        for (let k = 0; k < o.per; k++) await life(side.client);
        const ms = performance.now() - t0;
        side.wallMs += ms;
        side.cpu += backendCpu(side.pid) - cpu0;
        side.rounds.push(Math.round((ms * 1000) / o.per));
      }
    const lives = o.rounds * o.per;
    return sides.map((s) => ({
      name: s.name,
      wallUs: Math.round((s.wallMs * 1000) / lives),
      cpuUs: Math.round(s.cpu / lives),
      rounds: s.rounds,
    }));
  } finally {
    for (const s of sides) await s.client.end().catch(() => {});
    await admin.end();
    await db.stop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const file = process.argv[2];
  if (!file) {
    console.error("usage: npx tsx bench/schema-ab.ts variants.json  (ROUNDS=10 PER=300)");
    process.exit(2);
  }
  const sides = await interleaved(JSON.parse(readFileSync(file, "utf8")) as [string, string][], {
    rounds: Number(process.env.ROUNDS ?? 10),
    per: Number(process.env.PER ?? 300),
  });
  const ref = sides[0] as Side;
  const width = Math.max(...sides.map((s) => s.name.length));
  for (const s of sides)
    console.log(
      `${s.name.padEnd(width)}  wall ${s.wallUs} µs a life (${(s.wallUs / ref.wallUs).toFixed(3)}), ` +
        `backend CPU ${s.cpuUs} µs a life (${(s.cpuUs / ref.cpuUs).toFixed(3)})`,
    );
}
