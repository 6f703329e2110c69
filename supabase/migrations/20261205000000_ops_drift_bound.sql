-- quota-jobs: the operator page's drift tile reads the periods that can still change, through an
-- index, instead of the quota_drift view's aggregate over every job ever enqueued.
--
-- Measured before (docs/BENCHMARKS.md, the operator page section): at 1 M jobs the tile was a
-- Parallel Seq Scan over all of generation_jobs and a Seq Scan over quota_usage, 4–9 s of a page
-- whose series take well under a second. The series read their window; the tile read history.
--
-- Which periods can still change. A counter moves only with a job of its own key (user, period,
-- meter): a hold at enqueue, a capture or a refund at the job's end. A job's period starts no
-- later than its created_at and no earlier than the start of created_at's UTC month (a plan's
-- period is a UTC day or month). So every key with a job that is still active has a period
-- that starts at or after the UTC month of the oldest active job's created_at; and every key a
-- job could still be enqueued into starts at or after the month of p_now. Periods before that
-- month are closed and all their jobs final: their counters and jobs no longer change (retention
-- empties text, not accounting; an erasure deletes a user's counters with their jobs), and the
-- full check, quota_drift and npm run reconcile, covers them. The tile says which periods it
-- counted (drift_since), and the page prints it.
--
-- The oldest active job is one probe of generation_jobs_active_created (the sweeper's index).
-- The sum is an index-only walk of the new generation_jobs_period over the open periods, the
-- counters a range of quota_usage_period. Both are bounded by the open periods' jobs, not by
-- the table.

create index generation_jobs_period on public.generation_jobs
  (period_start, user_id, meter) include (hold, captured);
create index quota_usage_period on public.quota_usage (period_start);

create function private.open_periods_since(p_now timestamptz)
returns timestamptz
language sql
stable
set search_path = ''
as $$
  select private.period_start('month', least(p_now, (
    select min(j.created_at) from public.generation_jobs j
    where j.status in ('queued', 'running'))))
$$;
comment on function private.open_periods_since(p_now timestamptz) is
  'The start of the oldest quota period that can still change at p_now: the UTC month of p_now or '
  'of the oldest active job''s created_at, whichever is earlier. Earlier periods are closed and '
  'all their jobs final.';

-- quota_drift's rule, once, with the periods it reads as a parameter: the view is this function
-- over every period (the full check, as npm run reconcile reads it), the tile the same function
-- from drift_since on. Not inlined (it sets its search_path), so p_since reaches the scans as a
-- value and the open periods are an index range.
create function private.quota_drift_since(p_since timestamptz)
returns table (user_id uuid, period_start timestamptz, units_used integer, units_expected bigint,
  meter text)
language sql
stable
set search_path = ''
as $$
  with reserved as (
    select j.user_id, j.period_start, j.meter, sum(coalesce(j.captured, j.hold)) as units_expected
    from public.generation_jobs j
    where j.period_start >= p_since
    group by j.user_id, j.period_start, j.meter
  ), used as (
    select u.user_id, u.period_start, u.meter, u.units_used
    from public.quota_usage u
    where u.period_start >= p_since
  )
  select
    coalesce(u.user_id, r.user_id),
    coalesce(u.period_start, r.period_start),
    coalesce(u.units_used, 0),
    coalesce(r.units_expected, 0)::bigint,
    coalesce(u.meter, r.meter)
  from used u
  full join reserved r
    on r.user_id = u.user_id and r.period_start = u.period_start and r.meter = u.meter
  where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0)
$$;
comment on function private.quota_drift_since(p_since timestamptz) is
  'quota_drift''s rows for the periods that start at or after p_since (-infinity: all of them, '
  'the view), read through generation_jobs_period and quota_usage_period.';

create or replace view public.quota_drift with (security_invoker = true) as
  select d.user_id, d.period_start, d.units_used, d.units_expected, d.meter
  from private.quota_drift_since('-infinity') d;
comment on view public.quota_drift is
  'Users, periods and meters whose counter differs from their open holds plus their captures (an '
  'active job counts its hold, a final one what it captured). Always empty.';

create or replace function public.ops_now(
  p_now timestamptz default now(),
  p_lease_grace_seconds integer default 300,
  p_undelivered_after_seconds integer default 900,
  p_max_age_seconds integer default 10800
) returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object(
    'at', p_now,
    'stuck', jsonb_build_object(
      'running_lease_expired', (select count(*) from public.generation_jobs j
        where private.stale_lease_expired(j, p_now, p_lease_grace_seconds)),
      'active_past_max_age', (select count(*) from public.generation_jobs j
        where private.stale_past_max_age(j, p_now, p_max_age_seconds)),
      'queued_never_delivered', (select count(*) from public.generation_jobs j
        where private.stale_undelivered(j, p_now, p_undelivered_after_seconds))),
    'drift_since', s.since,
    'drift_rows', (select count(*) from private.quota_drift_since(s.since)))
  from (select private.open_periods_since(p_now) as since) s
$$;
comment on function public.ops_now(p_now timestamptz, p_lease_grace_seconds integer, p_undelivered_after_seconds integer, p_max_age_seconds integer) is 'Operator page''s "now" tiles: active jobs stale by each of the sweeper''s three rules (the same predicates and partial indexes as sweep_jobs and reconcile), and the rows of quota_drift in the periods that can still change (those starting at or after drift_since; closed periods are npm run reconcile''s).';

revoke all on function private.open_periods_since(timestamptz) from public, anon, authenticated;
revoke all on function private.quota_drift_since(timestamptz) from public, anon, authenticated;
grant execute on function private.open_periods_since(timestamptz) to service_role;
grant execute on function private.quota_drift_since(timestamptz) to service_role;
