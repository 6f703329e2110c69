/**
 * Section 2c: where a job's life spends its time in the database, and what each suspect costs.
 *
 * 1. The profile: `enqueue_job` → `start_job` → `complete_job` (and the failure path's
 *    `fail_job`), one connection, as PostgREST calls them (prepared, the service role), on a
 *    cluster with `pg_stat_statements` (track = all: the statements inside the functions too).
 *    Each call's and each statement's time in the server per job, and what is left outside them
 *    (the protocol, the client, the round trips).
 * 2. The suspects: the same life with one thing taken away (the job's JSON in the results, the
 *    event log's foreign key, the job table's secondary indexes, the broadcast to the page, the
 *    plan's kinds in the enqueue's answer), each on its own copy of the migrated database in one
 *    cluster, the lives alternated between the copies and the unchanged one round by round
 *    (bench/schema-ab.ts), so a drift of the machine lands on all alike: fresh clusters one
 *    after the other moved a life by ±20 % here, more than most suspects cost. What a suspect
 *    costs is the life with it less the life without it, in wall time and in the backend's CPU;
 *    the removals are measurements only, nothing here ships without them.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { startPostgres } from "../dev/postgres/index.ts";
import { interleaved } from "./schema-ab.ts";
import { createUsers, freePort } from "./support/pg.ts";
import { log, round, table, writeResult } from "./support/util.ts";

const PROMPT = "Write a short note about queues and quotas.";

interface Cluster {
  admin: pg.Client;
  life: (path: "success" | "failure") => Promise<void>;
  stop(): Promise<void>;
}

async function cluster(prepare?: (admin: pg.Client) => Promise<void>): Promise<Cluster> {
  const dataDir = await mkdtemp(join(tmpdir(), "quota-jobs-hot-path-"));
  const server = await startPostgres({
    dataDir,
    port: await freePort(),
    reset: true,
    settings: {
      shared_preload_libraries: "pg_stat_statements",
      "pg_stat_statements.track": "all",
    },
  });
  const admin = new pg.Client({ connectionString: server.url });
  await admin.connect();
  await admin.query("create extension if not exists pg_stat_statements");
  await admin.query(
    `insert into public.plans (id, name, period, units_per_period, max_active_jobs)
     values ('bench', 'Bench', 'month', 1000000000, 1000000) on conflict (id) do nothing`,
  );
  const users = await createUsers(admin, 1000, "bench");
  await prepare?.(admin);
  const c = new pg.Client({
    connectionString: server.url,
    options: "-c role=service_role -c TimeZone=UTC",
  });
  await c.connect();
  let i = 0;
  return {
    admin,
    async life(path) {
      const user = users[i++ % users.length];
      const e = await c.query({
        name: "enqueue",
        text: "select public.enqueue_job(p_user_id => $1, p_prompt => $2) as r",
        values: [user, `${PROMPT} #${i}`],
      });
      const id = e.rows[0].r.job.id as string;
      await c.query({
        name: "start",
        text: "select public.start_job(p_job_id => $1) as r",
        values: [id],
      });
      if (path === "success")
        await c.query({
          name: "complete",
          text: "select public.complete_job(p_job_id => $1, p_attempt => 1, p_output => 'bench output') as r",
          values: [id],
        });
      else
        await c.query({
          name: "fail",
          text: `select public.fail_job(p_job_id => $1, p_reason => 'model_refused',
                   p_error => 'bench: refused', p_attempt => 1) as r`,
          values: [id],
        });
    },
    async stop() {
      await c.end();
      await admin.end();
      await server.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/** Lives per second, and each function's time per job, after a warm-up. */
async function measure(db: Cluster, path: "success" | "failure", n: number) {
  for (let k = 0; k < 200; k++) await db.life(path);
  await db.admin.query("select pg_stat_statements_reset(), pg_stat_reset()");
  const t0 = performance.now();
  for (let k = 0; k < n; k++) await db.life(path);
  const perSecond = n / ((performance.now() - t0) / 1000);
  // Each call's time in the server, as pg_stat_statements times the top-level statement.
  const { rows } = await db.admin.query(
    `select substring(query from 'public\\.(\\w+)\\(') as fn, total_exec_time
     from pg_stat_statements where toplevel and query like 'select public.%'`,
  );
  const functions: Record<string, number> = Object.fromEntries(
    rows.map((r) => [r.fn, (r.total_exec_time / n) * 1000]),
  );
  return { perSecond, functions };
}

async function statements(db: Cluster, n: number) {
  const { rows } = await db.admin.query(
    `select calls, total_exec_time, toplevel,
            regexp_replace(left(query, 90), '\\s+', ' ', 'g') as query
     from pg_stat_statements where calls >= $1 order by total_exec_time desc limit 14`,
    [n / 2],
  );
  return rows.map((r) => ({
    query: r.query as string,
    toplevel: r.toplevel as boolean,
    perJob: Number(r.calls) / n,
    us: round((r.total_exec_time / n) * 1000, 1),
  }));
}

const fnDef = async (
  admin: Pick<pg.Client, "query">,
  signature: string,
  edit: (d: string) => string,
) => {
  const d = (await admin.query(`select pg_get_functiondef('${signature}'::regprocedure) as d`))
    .rows[0].d as string;
  const changed = edit(d);
  if (changed === d) throw new Error(`hot-path bench: ${signature} no longer has what it edits`);
  await admin.query(changed);
};

const SUSPECTS: { name: string; take: (admin: pg.Client) => Promise<void> }[] = [
  {
    name: "the job's whole row as JSON in each result (replaced by its id)",
    take: async (a) => {
      await fnDef(
        a,
        "public.enqueue_job(uuid,text,text,timestamptz,integer,text,jsonb,text,uuid)",
        (d) =>
          d.replace(
            "'job', to_jsonb(i) - 'request_hash',",
            "'job', jsonb_build_object('id', i.id),",
          ),
      );
      await fnDef(a, "public.start_job(uuid,integer,timestamptz)", (d) =>
        d.replace("'job', to_jsonb(s) - 'request_hash',", "'job', jsonb_build_object('id', s.id),"),
      );
      await fnDef(a, "public.complete_job(uuid,integer,text,timestamptz,jsonb)", (d) =>
        d.replace(
          "'job', private.ending_json(c::public.generation_jobs),",
          "'job', jsonb_build_object('id', c.id),",
        ),
      );
    },
  },
  {
    name: "job_events' foreign key to generation_jobs",
    take: async (a) => {
      await a.query("alter table public.job_events drop constraint job_events_job_id_fkey");
    },
  },
  {
    name: "the broadcast of each transition to the page (its trigger)",
    take: async (a) => {
      await a.query("drop trigger job_events_broadcast_state on public.job_events");
    },
  },
  {
    name: "the plan's kinds in the enqueue's answer",
    take: async (a) => {
      await fnDef(
        a,
        "public.enqueue_job(uuid,text,text,timestamptz,integer,text,jsonb,text,uuid)",
        (d) => d.replace("'kinds', private.plan_kinds_json(v_plan.id)", "'kinds', null"),
      );
    },
  },
  {
    // Only those the three functions never read: dropping the active-jobs index too (as this
    // suspect did until 2026-12-07) turns the enqueue's active count into a scan, which hid
    // what the upkeep of the others costs.
    name: "the job table's 8 indexes the hot path never reads",
    take: async (a) => {
      await a.query(`drop index public.generation_jobs_created, public.generation_jobs_finished,
        public.generation_jobs_finished_unerased, public.generation_jobs_active_created,
        public.generation_jobs_period, public.generation_jobs_organization_period,
        public.generation_jobs_running_lease, public.generation_jobs_queued_since`);
    },
  },
];

export interface HotPathResult {
  n: number;
  profile: Record<"success" | "failure", Awaited<ReturnType<typeof measure>>>;
  statements: Awaited<ReturnType<typeof statements>>;
  /** µs a life on the unchanged schema, round by round of the interleaved run. */
  baselines: number[];
  /** The unchanged schema's life in the interleaved run: wall and backend CPU µs. */
  unchanged: { wallUs: number; cpuUs: number };
  suspects: { name: string; without: number; savedUs: number; wall: number; cpu: number }[];
}

export async function runHotPath(o: { quick: boolean }): Promise<HotPathResult> {
  const n = o.quick ? 600 : 3000;
  log(`   profile: ${n} lives a path`);
  const db = await cluster();
  let profile: Pick<HotPathResult, "profile" | "statements">;
  try {
    const success = await measure(db, "success", n);
    const topStatements = await statements(db, n);
    const failure = await measure(db, "failure", n);
    profile = { profile: { success, failure }, statements: topStatements };
  } finally {
    await db.stop();
  }
  const rounds = o.quick ? 3 : 8;
  const per = o.quick ? 100 : 200;
  log(`   the suspects, interleaved on one cluster: ${rounds} rounds of ${per} lives each`);
  const sides = await interleaved(
    [
      ["unchanged", ""],
      ...SUSPECTS.map((s): [string, (a: pg.Client) => Promise<void>] => [s.name, s.take]),
    ],
    { rounds, per },
  );
  const [ref, ...without] = sides;
  if (!ref) throw new Error("hot-path bench: no reference side");
  const result: HotPathResult = {
    n,
    ...profile,
    baselines: ref.rounds,
    unchanged: { wallUs: ref.wallUs, cpuUs: ref.cpuUs },
    suspects: without.map((side) => ({
      name: side.name,
      without: side.wallUs,
      savedUs: ref.wallUs - side.wallUs,
      wall: round(side.wallUs / ref.wallUs, 2),
      cpu: round(side.cpuUs / ref.cpuUs, 2),
    })),
  };
  await writeResult("hot-path", result);
  return result;
}

export function printHotPath(r: HotPathResult): string {
  const fns = (["success", "failure"] as const).map((path) => {
    const p = r.profile[path];
    const f = (name: string) => p.functions[name] ?? 0;
    const end = path === "success" ? "complete_job" : "fail_job";
    return [
      path,
      round(p.perSecond, 0),
      round(1e6 / p.perSecond, 0),
      round(f("enqueue_job"), 0),
      round(f("start_job"), 0),
      round(f(end), 0),
      round(1e6 / p.perSecond - f("enqueue_job") - f("start_job") - f(end), 0),
    ];
  });
  return [
    `${r.n} lives a path, one connection; µs per job (pg_stat_user_functions, pg_stat_statements)`,
    "",
    table(
      [
        "path",
        "lives/s",
        "µs a life",
        "enqueue_job",
        "start_job",
        "ending",
        "outside the functions",
      ],
      fns,
    ),
    "",
    table(
      ["statement (success path)", "top level", "per job", "µs per job"],
      r.statements.map((s) => [s.query, s.toplevel, round(s.perJob, 2), s.us]),
    ),
    "",
    `The suspects, interleaved on one cluster (bench/schema-ab.ts): the unchanged schema ${r.unchanged.wallUs} µs a life wall, ${r.unchanged.cpuUs} µs backend CPU; round by round ${r.baselines.join(", ")}`,
    "",
    table(
      [
        "taken away",
        "µs a life without it",
        "it costs a life",
        "wall, without / with",
        "backend CPU, without / with",
      ],
      r.suspects.map((s) => [s.name, s.without, `${s.savedUs} µs`, s.wall, s.cpu]),
    ),
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(printHotPath(await runHotPath({ quick: process.argv.includes("--quick") })));
}
