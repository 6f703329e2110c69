/**
 * What the job-state broadcast costs a job's life, piece by piece (docs/BENCHMARKS.md, section
 * 2b): `npx tsx bench/broadcast-cost.ts` (C=8 N=1600 by default; `C=32 N=1600 npx tsx …`). One
 * cluster, `enqueue_job` → `start_job` → `complete_job` on C connections as the service role,
 * with the broadcast trigger's function swapped between variants, interleaved for 4 rounds (the
 * first a warm-up), so a drift of the shared machine lands on all of them:
 *
 * - `send`: realtime.send, as 20261209000000_job_state_broadcast.sql had it (a subtransaction);
 * - `insert`: the guarded plain insert of 20261210000000_broadcast_without_subtransaction.sql;
 * - `none`: no broadcast at all.
 *
 * No Realtime stand-in runs here: it reads the table by logical decoding, as Realtime does, in a
 * WAL sender of its own, off the transactions' path. Measurements only: nothing here ships.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startPostgres } from "../dev/postgres/index.ts";
import { createUsers, freePort } from "./support/pg.ts";
import { median } from "./support/util.ts";

const SEND = `create or replace function private.broadcast_job_state() returns trigger
language plpgsql set search_path to '' as $$
begin
  perform realtime.send(jsonb_build_object('job_id', new.job_id, 'state', new.to_status, 'seq', new.id),
    'job_state', 'job:' || new.user_id::text, true);
  return null;
end $$`;
const NONE = `create or replace function private.broadcast_job_state() returns trigger
language plpgsql set search_path to '' as $$ begin return null; end $$`;

const C = Number(process.env.C ?? 8);
const N = Number(process.env.N ?? 1600);
const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-broadcast-cost-"));
const server = await startPostgres({ dataDir, port: await freePort(), reset: true });
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
const INSERT = (
  await admin.query("select pg_get_functiondef('private.broadcast_job_state()'::regprocedure) as d")
).rows[0].d as string;
const variants: { name: string; fn: string }[] = [
  { name: "send", fn: SEND },
  { name: "insert", fn: INSERT },
  { name: "none", fn: NONE },
];
await admin.query(
  `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
   values ('bench', 'Bench', 'month', 1000000000, 1000000) on conflict (id) do nothing`,
);
const users = await createUsers(admin, 1000, "bench");
const clients = await Promise.all(
  Array.from({ length: C }, async () => {
    const c = new pg.Client({
      connectionString: server.url,
      options: "-c role=service_role -c TimeZone=UTC",
    });
    await c.connect();
    return c;
  }),
);
let u = 0;
async function lives(c: pg.Client, n: number) {
  for (let k = 0; k < n; k++) {
    const e = await c.query({
      name: "enqueue",
      text: "select public.enqueue_job(p_user_id => $1, p_prompt => $2) as r",
      values: [users[u++ % users.length], `bench prompt ${u}`],
    });
    const id = e.rows[0].r.job.id as string;
    await c.query({ name: "start", text: "select public.start_job(p_job_id => $1)", values: [id] });
    await c.query({
      name: "complete",
      text: "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'bench output')",
      values: [id],
    });
  }
}
const xid = async () =>
  Number(
    (await admin.query("select pg_snapshot_xmax(pg_current_snapshot())::text as x")).rows[0].x,
  );
const rates: Record<string, number[]> = {};
const xids: Record<string, number> = {};
for (let round = 0; round < 4; round++)
  for (const v of variants) {
    await admin.query(v.fn);
    const x0 = await xid();
    const t0 = performance.now();
    await Promise.all(clients.map((c) => lives(c, Math.ceil(N / C))));
    const rate = (Math.ceil(N / C) * C) / ((performance.now() - t0) / 1000);
    xids[v.name] = (await xid()) - x0;
    if (round > 0) rates[v.name] = [...(rates[v.name] ?? []), Math.round(rate)];
  }
console.log(`C = ${C}, ${Math.ceil(N / C) * C} lives a measurement, median of 3:`);
for (const v of variants)
  console.log(
    `${v.name}: ${median(rates[v.name] ?? [])} lives/s (${rates[v.name]?.join(", ")}),`,
    `${((xids[v.name] ?? 0) / (Math.ceil(N / C) * C)).toFixed(2)} transaction ids a life`,
  );
for (const c of clients) await c.end();
await admin.end();
await server.stop();
await rm(dataDir, { recursive: true, force: true });
