-- quota-jobs: a running job's cancel refunds its unit only within a plan limit.
--
-- Canceling a queued job costs nobody anything: it always refunds. Canceling a running job
-- does not undo the model call the provider already billed for, so a user who could cancel and
-- get the unit back again and again would run the model for free, as often as they like. The
-- refunds of running-cancels are therefore counted per user and quota period (beside the units,
-- in the same quota_usage row) and bounded by the plan. Past the bound the job is still canceled
-- (the worker's output is dropped), but the unit stays spent: `refunded_at` stays null and
-- `refund_withheld` names why. docs/DESIGN.md#invariant-2-exactly-once-refund states the rule.

-- the plan's bound ----------------------------------------------------------------------------

alter table public.plans
  add column max_refunded_running_cancels integer
    check (max_refunded_running_cancels >= 0);
comment on column public.plans.max_refunded_running_cancels is
  'How many canceled running jobs per period get their unit back. Null: as many as the plan''s '
  'units_per_period.';

-- the count, beside the units it refunded -----------------------------------------------------

alter table public.quota_usage
  add column refunded_running_cancels integer not null default 0
    check (refunded_running_cancels >= 0);
comment on column public.quota_usage.refunded_running_cancels is
  'Running jobs of this period canceled with a refund. Changed only by cancel_job, with the '
  'refund, in the same statement.';

-- a canceled job without its refund, and why ---------------------------------------------------

alter table public.generation_jobs
  add column refund_withheld text check (refund_withheld in ('running_cancel_limit'));
comment on column public.generation_jobs.refund_withheld is
  'Why a canceled job kept its unit spent: it was running and the user''s refunded '
  'running-cancels had reached the plan''s bound. Null on every other job.';

-- Exactly one of the two for every failed or canceled job, neither for any other; a withheld
-- refund only on a canceled job.
alter table public.generation_jobs
  drop constraint generation_jobs_refunded_iff_failed_or_canceled,
  add constraint generation_jobs_refunded_iff_failed_or_canceled
    check ((status in ('failed', 'canceled')) = ((refunded_at is not null) <> (refund_withheld is not null))),
  add constraint generation_jobs_withheld_only_when_canceled
    check (refund_withheld is null or status = 'canceled');

-- whether a cancel now would refund -------------------------------------------------------------

create function private.cancel_refunds(p_job public.generation_jobs) returns boolean
language sql stable security invoker set search_path = ''
as $$
  select case p_job.status
    when 'queued' then true
    when 'running' then coalesce((
      select q.refunded_running_cancels < coalesce(p.max_refunded_running_cancels, p.units_per_period)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start and p.id = p_job.plan_id
    ), false)
    else false
  end
$$;
comment on function private.cancel_refunds(public.generation_jobs) is
  'Whether canceling this job now would return its unit: always for a queued job, for a running '
  'one while the refunded running-cancels of its period are under its plan''s bound.';

-- cancel --------------------------------------------------------------------------------------

create or replace function public.cancel_job(
  p_job_id uuid,
  p_user_id uuid,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j
  where j.id = p_job_id and j.user_id = p_user_id
  for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status in ('succeeded', 'failed', 'canceled') then
    return jsonb_build_object('outcome', 'already_finished', 'job', private.job_json(v_old));
  end if;
  if v_old.status = 'queued' then
    return jsonb_build_object('outcome', 'canceled', 'refunded', true, 'job', to_jsonb(private.end_with_refund(
      v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('refunded', true)
    )) - 'request_hash');
  end if;

  -- Running: one statement. The refund is a guarded update of the counter row: its guard reads
  -- the row's latest version (PostgreSQL re-checks the WHERE clause of an UPDATE on the row it
  -- waited for), so two cancels of one user take turns and the second sees the first's count.
  -- A count read in a subquery or a join would come from the statement's snapshot and let two
  -- racing cancels both refund (test/db/races.test.ts shows it). The job row then ends with or
  -- without its refund according to whether the counter row was updated, and the event says which.
  with counted as (
    update public.quota_usage q
    set units_used = q.units_used - 1,
        refunded_running_cancels = q.refunded_running_cancels + 1,
        updated_at = p_now
    where q.user_id = v_old.user_id and q.period_start = v_old.period_start
      and q.refunded_running_cancels < (
        select coalesce(p.max_refunded_running_cancels, p.units_per_period)
        from public.plans p where p.id = v_old.plan_id
      )
    returning 1
  ), ended as (
    update public.generation_jobs j
    set status = 'canceled',
        lease_expires_at = null,
        finished_at = p_now,
        refunded_at = case when exists (select from counted) then p_now end,
        refund_withheld = case when exists (select from counted) then null else 'running_cancel_limit' end,
        updated_at = p_now
    where j.id = v_old.id and j.status = 'running'
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select e.id, e.user_id, p_now, 'canceled', 'running', 'canceled',
      case when e.refund_withheld is null then jsonb_build_object('refunded', true)
           else jsonb_build_object('refunded', false, 'reason', e.refund_withheld) end
    from ended e
  )
  select jsonb_build_object('outcome', 'canceled', 'refunded', e.refund_withheld is null,
    'job', to_jsonb(e) - 'request_hash')
  into v_result
  from ended e;
  if v_result is null then
    raise exception 'job % is no longer active', v_old.id using errcode = 'P0001';
  end if;
  if not (v_result ->> 'refunded')::boolean and not exists (
    select from public.quota_usage q
    where q.user_id = v_old.user_id and q.period_start = v_old.period_start
  ) then
    -- A reserved unit with no counter row is drift: refuse the whole cancel (the caller sees an
    -- error) rather than end the job with nothing its unit was counted in. Only on this rare
    -- path: a refund that happened proves the row exists.
    raise exception 'no reserved unit for job % (user %, period %)',
      v_old.id, v_old.user_id, v_old.period_start using errcode = 'P0001';
  end if;
  return v_result;
end
$$;
comment on function public.cancel_job(uuid, uuid, timestamptz) is
  'The owner cancels a queued or running job. A queued job is refunded; a running job is refunded '
  'while the refunded running-cancels of its period are under the plan''s bound, else canceled '
  'with the unit spent (refund_withheld = running_cancel_limit). Returns whether it refunded.';

-- reads: whether a cancel now would refund ------------------------------------------------------

create or replace function public.get_job(p_job_id uuid, p_user_id uuid) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  select coalesce(
    (select jsonb_build_object('outcome', 'found',
       'job', private.job_json(j) || jsonb_build_object('cancel_refunds', private.cancel_refunds(j)))
     from public.generation_jobs j where j.id = p_job_id and j.user_id = p_user_id),
    jsonb_build_object('outcome', 'not_found')
  )
$$;

create or replace function public.list_jobs(
  p_user_id uuid,
  p_limit integer default 20,
  p_before_created_at timestamptz default null,
  p_before_id uuid default null
) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  with lim as (
    select least(greatest(coalesce(p_limit, 20), 1), 100) as n
  ), page as (
    select j as job, row_number() over (order by j.created_at desc, j.id desc) as rn
    from public.generation_jobs j
    where j.user_id = p_user_id
      and (p_before_created_at is null or (j.created_at, j.id) < (p_before_created_at, p_before_id))
    order by j.created_at desc, j.id desc
    limit (select n + 1 from lim)
  )
  select jsonb_build_object(
    'outcome', 'listed',
    'jobs', coalesce(
      (select jsonb_agg(
         private.job_json(p.job) || jsonb_build_object('cancel_refunds', private.cancel_refunds(p.job))
         order by p.rn)
       from page p, lim where p.rn <= lim.n),
      '[]'::jsonb
    ),
    'has_more', (select count(*) from page) > (select n from lim)
  )
$$;

-- The usage report says how many of the period's refunded running-cancels are used, so the page
-- can tell the user before they confirm a cancel that will not refund.
create or replace function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamptz) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  with bounds as (
    select private.period_start(p_plan.period, p_now) as period_start
  ), counter as (
    select q.units_used, q.refunded_running_cancels from public.quota_usage q, bounds b
    where q.user_id = p_user_id and q.period_start = b.period_start
  )
  select private.usage_object(
    p_plan,
    b.period_start,
    coalesce((select c.units_used from counter c), 0),
    (
      select count(*) from public.generation_jobs j
      where j.user_id = p_user_id and j.status in ('queued', 'running')
    )
  ) || jsonb_build_object(
    'refunded_running_cancels', coalesce((select c.refunded_running_cancels from counter c), 0),
    'max_refunded_running_cancels',
      coalesce(p_plan.max_refunded_running_cancels, p_plan.units_per_period)
  )
  from bounds b
$$;
comment on function private.usage_json(uuid, public.plans, timestamptz) is
  'A user''s usage in the period that contains p_now: units used and the limit, active jobs, '
  'and the running-cancel refunds used and allowed.';

comment on view public.quota_drift is
  'Users and periods whose counter differs from their jobs reserved and not refunded (a running '
  'cancel past the plan''s bound is not refunded: its unit counts as used). Always empty.';

revoke execute on function private.cancel_refunds(public.generation_jobs) from public, anon, authenticated;
grant execute on function private.cancel_refunds(public.generation_jobs) to service_role;
