-- quota-jobs: one sweep at a time.
--
-- sweep_jobs ends its whole batch in one transaction, and each ending takes its job's counter
-- row (the user's quota_usage, or an organization's pool and member rows) as it goes, in the
-- walk's order. Two sweeps at once (the cron's and an operator's, or a cron run that outlasted
-- its minute) share the walk by skip locked, ten rows at a time, and so can reach two counters
-- in opposite orders: one of them died with "deadlock detected" (money-safe: its transaction
-- rolled back, and the next sweep ended its jobs). Now a sweep takes a lock of its own first:
-- a second one waits for the first to commit, then ends what is left. Nothing else takes that
-- lock, and it is taken before any row, so it adds no cycle to the lock order. The body is the
-- one from 20261201060000_stale_conditions.sql with that line added.

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
  -- One sweep at a time (above): a second waits here, before it holds anything.
  perform pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('quota_jobs.sweep', 0));

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
  'Ends what nobody else will, one batch, one sweep at a time (a second waits for the first to '
  'commit; rows locked with skip locked): jobs older than the max age, running jobs whose lease '
  'expired more than the grace ago, and queued jobs never delivered (republished once, then '
  'failed). Every failure refunds. Returns the failed jobs, the jobs to republish (publish_seq '
  'grew) and whether more may remain.';
