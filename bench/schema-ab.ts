/**
 * What a change to the schema is worth to a job's life, side by side: `npx tsx bench/schema-ab.ts
 * variants.json`, where the file is `[[name, sql], ...]` (the first is the reference; an empty sql
 * is the schema as the migrations leave it). One cluster; one copy of the migrated database per
 * variant, the variant's sql applied to it; one connection each, as PostgREST calls the functions
 * (prepared, the service role). The lives (enqueue_job → start_job → complete_job) alternate
 * between the variants in rounds of PER, ROUNDS times, so a drift of this shared machine lands on
 * every variant alike. Prints each variant's wall time and its backend's CPU time per life, and
 * both as a ratio to the reference.
 *
 * To measure a migration not yet in supabase/migrations' past, move it out, and give its text as
 * a variant. Measurements only: nothing here ships.
 */
import { readFileSync } from "node:fs";
import pg from "pg";
import { createUsers, startBenchDb } from "./support/pg.ts";

/** The backend's user + system CPU time so far, in µs (clock ticks of 10 ms). */
const backendCpu = (pid: number) => {
  const fields = (readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1] ?? "").split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
};

const file = process.argv[2];
if (!file) {
  console.error("usage: npx tsx bench/schema-ab.ts variants.json  (ROUNDS=10 PER=300)");
  process.exit(2);
}
const variants = JSON.parse(readFileSync(file, "utf8")) as [string, string][];
const rounds = Number(process.env.ROUNDS ?? 10);
const per = Number(process.env.PER ?? 300);

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

interface Side {
  name: string;
  client: pg.Client;
  pid: number;
  wallMs: number;
  cpuUs: number;
  lives: number;
}
const sides: Side[] = [];
for (const [k, [name, sql]] of variants.entries()) {
  await admin.query(`create database ab_${k} template postgres`);
  const setup = new pg.Client({ connectionString: url(`ab_${k}`) });
  await setup.connect();
  if (sql) await setup.query(sql);
  await setup.end();
  const client = new pg.Client({
    connectionString: url(`ab_${k}`),
    options: "-c role=service_role -c TimeZone=UTC",
  });
  await client.connect();
  const pid = (await client.query("select pg_backend_pid() as p")).rows[0].p as number;
  sides.push({ name, client, pid, wallMs: 0, cpuUs: 0, lives: 0 });
}

let i = 0;
async function life(client: pg.Client) {
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
  const c = await client.query({
    name: "complete",
    text: "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'bench output') as r",
    values: [id],
  });
  if (s.rows[0].r.outcome !== "started" || c.rows[0].r.outcome !== "completed")
    throw new Error(`schema-ab: a life did not succeed: ${JSON.stringify(c.rows[0].r)}`);
}

// Warm each side's plans and caches; not counted.
for (const side of sides) for (let k = 0; k < 200; k++) await life(side.client);
for (let r = 0; r < rounds; r++)
  for (const side of sides) {
    const cpu0 = backendCpu(side.pid);
    const t0 = performance.now();
    for (let k = 0; k < per; k++) await life(side.client);
    side.wallMs += performance.now() - t0;
    side.cpuUs += backendCpu(side.pid) - cpu0;
    side.lives += per;
  }

const ref = sides[0] as Side;
const width = Math.max(...sides.map((s) => s.name.length));
for (const s of sides)
  console.log(
    `${s.name.padEnd(width)}  wall ${((s.wallMs * 1000) / s.lives).toFixed(0)} µs a life (${(s.wallMs / ref.wallMs).toFixed(3)}), ` +
      `backend CPU ${(s.cpuUs / s.lives).toFixed(0)} µs a life (${(s.cpuUs / ref.cpuUs).toFixed(3)})`,
  );
for (const s of sides) await s.client.end();
await admin.end();
await db.stop();
