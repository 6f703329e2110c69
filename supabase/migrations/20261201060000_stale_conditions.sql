-- quota-jobs: one definition of each stale-job condition, for the sweeper and for reconcile.
--
-- The three conditions the sweeper ends jobs for (past the max age, a lease expired more than the
-- grace ago, queued and never delivered) were written twice: in public.sweep_jobs and again in
-- ops/reconcile.ts, which reports them. Two copies of a predicate drift apart, and then reconcile
-- reports jobs the sweeper never ends (or misses jobs it does). Each condition is now one SQL
-- function of the job row; sweep_jobs walks with them and reconcile reports with them.
--
-- The sweep must stay an ordered walk of its partial index with `limit` and `for update skip
-- locked`, so that a batch costs the same with a hundred stale jobs or a hundred thousand, and
-- two sweepers share the work. A predicate the planner sees only as a function call matches no
-- index: the walk would become a scan of the whole table and a sort. So these are functions
-- PostgreSQL inlines: `language sql`, one plain `select` of an expression, security invoker, and
-- no `set` clause (a function with one is never inlined). Inlined, the call is replaced by its
-- expression on the caller's row, and the planner proves the partial index's `where` and uses
-- the index for the comparison and the order, exactly as if the query had been written out.
--
-- Why no `set search_path = ''` here, unlike every other function: it would stop the inlining.
-- Nothing in them is looked up by an unqualified name an attacker could shadow: they name no
-- table, every function they call is schema-qualified (pg_catalog.make_interval,
-- private.queued_due_since), and their operators are the built-ins on built-in types, resolved
-- in pg_catalog, which is searched first unless a search path names it later (the sweeper's is
-- empty). They run with the caller's rights in any case (security invoker).
-- test/db/stale-conditions.test.ts fails if a walk stops using its index (as it does when one of
-- these gets a `set` clause).

-- the conditions -------------------------------------------------------------------------------

create function private.queued_due_since(j public.generation_jobs) returns timestamptz
language sql immutable parallel safe security invoker
as $$
  select coalesce(j.resume_at, j.queued_at)
$$;
comment on function private.queued_due_since(public.generation_jobs) is
  'Since when a queued job should have been delivered: its resume time after a provider 429, else '
  'when it was (re)queued. The generation_jobs_queued_since index is on this expression. Inlined '
  'by the planner, hence no search_path setting (see its migration).';

create function private.stale_past_max_age(
  j public.generation_jobs,
  p_now timestamptz,
  p_max_age_seconds integer
) returns boolean
language sql stable parallel safe security invoker
as $$
  select j.status in ('queued', 'running')
    and j.created_at < p_now - pg_catalog.make_interval(secs => p_max_age_seconds)
$$;
comment on function private.stale_past_max_age(public.generation_jobs, timestamptz, integer) is
  'Stale: an active job created more than the max age before p_now (the sweeper fails it '
  'max_age_exceeded; reconcile reports active_past_max_age). Index: generation_jobs_active_created, '
  'walked by created_at. Inlined by the planner, hence no search_path setting (see its migration).';

create function private.stale_lease_expired(
  j public.generation_jobs,
  p_now timestamptz,
  p_lease_grace_seconds integer
) returns boolean
language sql stable parallel safe security invoker
as $$
  select j.status = 'running'
    and j.lease_expires_at < p_now - pg_catalog.make_interval(secs => p_lease_grace_seconds)
$$;
comment on function private.stale_lease_expired(public.generation_jobs, timestamptz, integer) is
  'Stale: a running job whose lease expired more than the grace before p_now, its worker dead (the '
  'sweeper fails it lease_expired; reconcile reports running_lease_expired). Index: '
  'generation_jobs_running_lease, walked by lease_expires_at. Inlined by the planner, hence no '
  'search_path setting (see its migration).';

create function private.stale_undelivered(
  j public.generation_jobs,
  p_now timestamptz,
  p_undelivered_after_seconds integer
) returns boolean
language sql stable parallel safe security invoker
as $$
  select j.status = 'queued'
    and private.queued_due_since(j)
      < p_now - pg_catalog.make_interval(secs => p_undelivered_after_seconds)
$$;
comment on function private.stale_undelivered(public.generation_jobs, timestamptz, integer) is
  'Stale: a queued job not delivered within the window after it was due, its message lost (the '
  'sweeper republishes it once, then fails it never_delivered; reconcile reports '
  'queued_never_delivered). Index: generation_jobs_queued_since, walked by private.queued_due_since. '
  'Inlined by the planner, hence no search_path setting (see its migration).';

-- the sweeper, walking with them ------------------------------------------------------------------
-- As in 20261130040100_transitions.sql, with each walk's condition (and the undelivered walk's
-- order) being the functions above. Same signature, outcomes and order of the walks.

create or replace function public.sweep_jobs(
  p_now timestamptz default now(),
  p_batch_size integer default 100,
  p_lease_grace_seconds integer default 300,
  p_undelivered_after_seconds integer default 900,
  p_max_age_seconds integer default 10800,
  p_max_republish integer default 1
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_seen integer := 0;
  v_done jsonb;
  v_failed jsonb := '[]'::jsonb;
  v_republish jsonb := '[]'::jsonb;
begin
  -- Each reason walks its own partial index in order and stops at the batch size, so a batch
  -- costs the same with a hundred stale jobs or a hundred thousand. A job that matches two
  -- reasons is ended by the first; the later walks no longer see it as active.

  for v_old in
    select j.* from public.generation_jobs j
    where private.stale_past_max_age(j, p_now, p_max_age_seconds)
    order by j.created_at
    limit p_batch_size
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_failed := v_failed || (private.sweep_one(v_old, 'max_age_exceeded', p_now) -> 'failed');
  end loop;

  for v_old in
    select j.* from public.generation_jobs j
    where private.stale_lease_expired(j, p_now, p_lease_grace_seconds)
    order by j.lease_expires_at
    limit greatest(p_batch_size - v_seen, 0)
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_failed := v_failed || (private.sweep_one(v_old, 'lease_expired', p_now) -> 'failed');
  end loop;

  for v_old in
    select j.* from public.generation_jobs j
    where private.stale_undelivered(j, p_now, p_undelivered_after_seconds)
    order by private.queued_due_since(j)
    limit greatest(p_batch_size - v_seen, 0)
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_done := private.sweep_one(
      v_old,
      case when v_old.republish_count < p_max_republish then 'republish' else 'never_delivered' end,
      p_now
    );
    if v_done ? 'republish' then
      v_republish := v_republish || jsonb_build_array(v_done -> 'republish');
    else
      v_failed := v_failed || (v_done -> 'failed');
    end if;
  end loop;

  return jsonb_build_object(
    'outcome', 'swept',
    'failed', v_failed,
    'republish', v_republish,
    'more', v_seen >= p_batch_size
  );
end
$$;
comment on function public.sweep_jobs(timestamptz, integer, integer, integer, integer, integer) is
  'Ends what nobody else will, one batch (rows locked with skip locked, so two sweepers share the '
  'work): jobs older than the max age, running jobs whose lease expired more than the grace ago, '
  'and queued jobs never delivered (republished once, then failed). Every failure refunds. Returns '
  'the failed jobs, the jobs to republish (publish_seq grew) and whether more may remain.';

-- grants ------------------------------------------------------------------------------------------
-- Closed by default (20261201000000_closed_by_default.sql): the service role, which runs the
-- sweeper, and the owner, which runs reconcile. The planner inlines a function only for a caller
-- who may execute it.

revoke all on function private.queued_due_since(public.generation_jobs),
  private.stale_past_max_age(public.generation_jobs, timestamptz, integer),
  private.stale_lease_expired(public.generation_jobs, timestamptz, integer),
  private.stale_undelivered(public.generation_jobs, timestamptz, integer)
  from public, anon, authenticated;
grant execute on function private.queued_due_since(public.generation_jobs),
  private.stale_past_max_age(public.generation_jobs, timestamptz, integer),
  private.stale_lease_expired(public.generation_jobs, timestamptz, integer),
  private.stale_undelivered(public.generation_jobs, timestamptz, integer)
  to service_role;
