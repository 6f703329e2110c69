-- quota-jobs: job_events partitioned by month on `at`, so history older than the retention is
-- dropped a month at a time (a DROP of a partition: no row-by-row delete, no bloat, no vacuum)
-- instead of growing without bound (docs/DESIGN.md#history).
--
-- Why monthly: the longest quota period is a month (plans are 'day' or 'month'), so a partition
-- never splits a period's audit: the current period's events are all in the current month's
-- partition, and the cutoff (below) only ever drops whole past months. Few partitions keep the
-- lookups that do not name `at` (a job's events by job_id, a user's by user_id: every partition's
-- index is probed) at three or four probes. The price: with a 30-day retention a month's events
-- live until the month after next begins, 30 to 61 days, up to twice what the retention asks.
--
-- What stays as it was: the table's name, columns, identity (its sequence keeps counting where
-- it was), the FK to generation_jobs, the (job_id, id) and (user_id, id) indexes (now
-- partitioned indexes), row level security, its policy and grants, and the append-only trigger
-- with the same function, private.forbid_changing_events(). What changes: the primary key is
-- (id, at), as a partitioned table's must include its partition key; id alone stays unique (it
-- comes from the identity only: `generated always`).
--
-- The existing events are copied into their months' partitions in this migration's transaction,
-- holding the table's lock for the copy, a time proportional to the events held: a database
-- with tens of millions of events runs it in a maintenance window.

-- the old table out of the way ------------------------------------------------------------------

alter table public.job_events rename to job_events_unpartitioned;
alter table public.job_events_unpartitioned rename constraint job_events_pkey to job_events_unpartitioned_pkey;
alter table public.job_events_unpartitioned rename constraint job_events_job_id_fkey to job_events_unpartitioned_job_id_fkey;
alter index public.job_events_job rename to job_events_unpartitioned_job;
alter index public.job_events_user rename to job_events_unpartitioned_user;
alter sequence public.job_events_id_seq rename to job_events_unpartitioned_id_seq;

-- the partitioned table --------------------------------------------------------------------------

create table public.job_events (
  id bigint generated always as identity,
  job_id uuid not null references public.generation_jobs (id),
  user_id uuid not null,
  at timestamptz not null,
  event text not null,
  from_status text,
  to_status text not null,
  detail jsonb not null default '{}'::jsonb,
  constraint job_events_pkey primary key (id, at)
) partition by range (at);
comment on table public.job_events is
  'Append-only log of every transition, written in the transition''s own transaction. '
  'Partitioned by UTC month on at (partitions in schema private); months older than the retention '
  'are dropped whole by public.maintain_job_events.';
create index job_events_job on public.job_events (job_id, id);
create index job_events_user on public.job_events (user_id, id);

create trigger job_events_append_only
  before update or delete on public.job_events
  for each row execute function private.forbid_changing_events();

-- A row whose month has no partition (far past, far future) lands here, so an insert never fails.
-- public.maintain_job_events moves such rows into their month's partition when it creates it.
create table private.job_events_default partition of public.job_events default;
comment on table private.job_events_default is
  'Events whose month has no partition of its own yet. Normally empty.';

-- What the history still holds: events before this instant may have been dropped. Reconcile
-- (ops/reconcile.ts) audits only jobs and periods that start at or after it.
create table private.history_horizon (
  id boolean primary key default true check (id),
  events_complete_since timestamptz not null
);
comment on table private.history_horizon is
  'One row: every event at or after events_complete_since is kept; earlier ones may have been dropped '
  'by public.maintain_job_events (-infinity until the first drop).';
insert into private.history_horizon (events_complete_since) values ('-infinity');
alter table private.history_horizon enable row level security;

-- partition maintenance ---------------------------------------------------------------------------

create function private.events_complete_since() returns timestamptz
language sql stable security invoker set search_path = ''
as $$
  select h.events_complete_since from private.history_horizon h
$$;
comment on function private.events_complete_since() is
  'Events at or after this instant are all kept; a job created (or a period started) before it may '
  'have lost some to the retention.';

-- Security definer: a partition is created, attached and dropped by the owner of
-- public.job_events (the migration role), and the cron runs as the service role. The function
-- touches nothing but job_events' partitions and the horizon row; only the service role runs it.
create function private.job_events_month_partition(p_month timestamptz) returns text
language plpgsql security definer set search_path = '' set timezone = 'UTC'
as $$
declare
  v_from timestamptz := date_trunc('month', p_month);
  v_to timestamptz := date_trunc('month', p_month) + interval '1 month';
  v_name text := 'job_events_' || to_char(date_trunc('month', p_month), 'YYYY_MM');
  v_in_default boolean;
begin
  if to_regclass('private.' || v_name) is not null then
    return null;
  end if;
  select exists (select 1 from private.job_events_default d where d.at >= v_from and d.at < v_to)
    into v_in_default;
  if not v_in_default then
    execute format('create table private.%I partition of public.job_events for values from (%L) to (%L)',
      v_name, v_from, v_to);
  else
    -- Creating the partition would fail while the default holds rows of its range. The rows
    -- move, unchanged (same id, same at), with the default detached: a detached partition has
    -- no clone of the append-only trigger, and nothing reads it in the meantime (this
    -- transaction holds the table's lock until it ends).
    alter table public.job_events detach partition private.job_events_default;
    execute format('create table private.%I partition of public.job_events for values from (%L) to (%L)',
      v_name, v_from, v_to);
    insert into public.job_events overriding system value
      select * from private.job_events_default d where d.at >= v_from and d.at < v_to;
    delete from private.job_events_default d where d.at >= v_from and d.at < v_to;
    alter table public.job_events attach partition private.job_events_default default;
  end if;
  execute format('comment on table private.%I is %L', v_name,
    'Events of ' || to_char(v_from, 'YYYY-MM') || ' (UTC), a partition of public.job_events.');
  -- Read and written through public.job_events only (its policy and grants), never directly.
  execute format('revoke all on table private.%I from public, anon, authenticated, service_role', v_name);
  return v_name;
end
$$;
comment on function private.job_events_month_partition(timestamptz) is
  'Creates the partition of job_events for the UTC month of p_month, moving in any rows the default '
  'partition holds for it; its name, or null when it existed.';

create function public.maintain_job_events(
  p_before timestamptz,
  p_now timestamptz default now(),
  p_months_ahead integer default 2,
  p_max_drops integer default 2
) returns jsonb
language plpgsql security definer set search_path = '' set timezone = 'UTC'
-- A drop waits for the transactions reading job_events; the cron does not wait long for them.
set lock_timeout = '2s'
as $$
declare
  v_created text[] := '{}';
  v_dropped text[] := '{}';
  v_name text;
  v_active_since timestamptz;
  v_cutoff timestamptz;
  v_part record;
  v_horizon timestamptz;
begin
  if p_before is null or p_now is null or p_months_ahead is null or p_months_ahead < 0
     or p_months_ahead > 24 or p_max_drops is null or p_max_drops < 0 then
    return jsonb_build_object('outcome', 'invalid_arguments');
  end if;
  -- This month's partition and the next ones, so inserts never reach the default.
  for i in 0 .. p_months_ahead loop
    v_name := private.job_events_month_partition(p_now + make_interval(months => i));
    if v_name is not null then
      v_created := v_created || v_name;
    end if;
  end loop;

  -- The cutoff: events before it may go. Never the current month (the current quota period of
  -- a month plan starts there, a day plan's later), by p_now's clock nor the database's (a
  -- p_now far ahead drops nothing more), never an active job's (its ending reads and appends
  -- to its events, and reconcile audits them), whatever p_before says.
  select min(j.created_at) into v_active_since
  from public.generation_jobs j where j.status in ('queued', 'running');
  v_cutoff := least(p_before, date_trunc('month', p_now), date_trunc('month', now()),
    coalesce(v_active_since, 'infinity'));

  -- Partitions wholly before the cutoff, oldest first, at most p_max_drops a run.
  for v_part in
    select c.relname, b.upper_bound
    from pg_inherits i
    join pg_class c on c.oid = i.inhrelid
    cross join lateral (
      select (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
        as upper_bound
    ) b
    where i.inhparent = 'public.job_events'::regclass
      and b.upper_bound is not null and b.upper_bound <= v_cutoff
    order by b.upper_bound
    limit p_max_drops
  loop
    begin
      execute format('drop table private.%I', v_part.relname);
    exception when lock_not_available then
      -- Long readers hold the table: the next run drops it.
      exit;
    end;
    v_dropped := v_dropped || v_part.relname::text;
    update private.history_horizon h
      set events_complete_since = greatest(h.events_complete_since, v_part.upper_bound);
  end loop;

  select h.events_complete_since into v_horizon from private.history_horizon h;
  return jsonb_build_object('outcome', 'maintained', 'created', to_jsonb(v_created),
    'dropped', to_jsonb(v_dropped), 'cutoff', v_cutoff, 'events_complete_since', v_horizon);
end
$$;
comment on function public.maintain_job_events(timestamptz, timestamptz, integer, integer) is
  'Keeps job_events'' partitions: creates this UTC month''s and the next p_months_ahead, and drops at '
  'most p_max_drops partitions wholly older than the cutoff, the earliest of p_before (now minus the '
  'retention), the start of the current month (by p_now and by the database''s clock) and the oldest '
  'active job''s creation. Cheap when there is '
  'nothing to do. Outcome maintained (created, dropped, cutoff, events_complete_since) or invalid_arguments.';

-- the existing events, into their months ---------------------------------------------------------

do $$
declare
  v_oldest timestamptz := (select min(e.at) from public.job_events_unpartitioned e);
  v_month timestamptz;
begin
  -- Every month from the oldest event's (at most two years back: older ones wait in the
  -- default partition) to two months ahead.
  v_month := date_trunc('month', greatest(coalesce(v_oldest, now()), now() - interval '24 months'));
  while v_month <= now() + interval '2 months' loop
    perform private.job_events_month_partition(v_month);
    v_month := v_month + interval '1 month';
  end loop;
end
$$;

insert into public.job_events
  (id, job_id, user_id, at, event, from_status, to_status, detail) overriding system value
select id, job_id, user_id, at, event, from_status, to_status, detail
from public.job_events_unpartitioned order by id;

-- The identity goes on from where the old one was, so ids keep their commit order.
select setval('public.job_events_id_seq', s.last_value, s.is_called)
from public.job_events_unpartitioned_id_seq s;

drop table public.job_events_unpartitioned;

-- row level security and privileges, as before -------------------------------------------------

alter table public.job_events enable row level security;
create policy "users read their own job events" on public.job_events
  for select to authenticated using (user_id = (select auth.uid()));

revoke all on table public.job_events from public, anon, authenticated;
grant select on table public.job_events to authenticated;
grant all on table public.job_events to service_role;
revoke all on sequence public.job_events_id_seq from public, anon, authenticated;
grant usage, select, update on sequence public.job_events_id_seq to service_role;

-- The partitions are read and written through public.job_events only (its policy and grants):
-- nobody but the owner reaches one directly (job_events_month_partition revokes the same from
-- each month's). The horizon is written by maintain_job_events only.
revoke all on table private.job_events_default, private.history_horizon
  from public, anon, authenticated, service_role;
grant select on table private.history_horizon to service_role;

revoke all on function private.events_complete_since() from public, anon, authenticated;
grant execute on function private.events_complete_since() to service_role;
revoke all on function private.job_events_month_partition(timestamptz) from public, anon, authenticated, service_role;
revoke all on function public.maintain_job_events(timestamptz, timestamptz, integer, integer)
  from public, anon, authenticated;
grant execute on function public.maintain_job_events(timestamptz, timestamptz, integer, integer)
  to service_role;
