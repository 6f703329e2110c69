-- quota-jobs: one rule for the bound of refunds after provider spend.
--
-- How many endings after spend (running cancels, failures and queued cancels after a consumed
-- attempt) a job plan refunds per period, coalesce(max_refunded_running_cancels,
-- units_per_period), was written three times: in private.end_with_refund (the guarded update
-- that is the bound's check), in private.cancel_refunds (what GET /api/jobs/:id and the list say a
-- cancel would do) and in private.usage_json (what GET /api/usage reports), and once more in
-- ops/reconcile.ts's report. A change to one of them (a plan meter with no bound, another default)
-- would have left the others saying something else: a usage page that promised a refund the cancel
-- did not make. private.refund_bound is now the rule; the three call it, and so does
-- reconcile's check that every refund after spend was under it and every withheld one was not.
-- Behaviour is unchanged: the same values for every plan (test/db/refund-bound.test.ts).

create function private.refund_bound(p_plan public.plans) returns integer
language sql immutable security invoker set search_path = ''
as $$
  select case when p_plan.meter = 'jobs'
    then coalesce(p_plan.max_refunded_running_cancels, p_plan.units_per_period) end
$$;
comment on function private.refund_bound(public.plans) is
  'How many refunds after provider spend (running cancels, failures and queued cancels after a '
  'consumed attempt) the plan gives per period: max_refunded_running_cancels, else '
  'units_per_period. Null on a token plan, which has no such bound (an ending captures what was '
  'consumed). A refund after spend is made while the period''s refunded_running_cancels is under it.';

create or replace function private.cancel_refunds(p_job public.generation_jobs) returns boolean
language sql stable security invoker set search_path = ''
as $$
  select case
    when p_job.status not in ('queued', 'running') then false
    when p_job.meter = 'tokens' then true
    -- A job plan's queued job whose attempts consumed nothing: always.
    when p_job.status = 'queued' and p_job.consumed = 0 then true
    else coalesce((
      select q.refunded_running_cancels < private.refund_bound(p)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
$$;

create or replace function private.end_with_refund(
  p_job public.generation_jobs,
  p_status text,
  p_reason text,
  p_error text,
  p_event text,
  p_now timestamptz,
  p_detail jsonb default '{}'::jsonb,
  p_own integer default null,
  p_running_cancel boolean default false
) returns public.generation_jobs
language plpgsql security invoker set search_path = ''
as $$
declare
  -- What the ending attempt consumed: as its worker reports it, else (someone else ends a running
  -- attempt) the prompt and the last progress write, else (queued) nothing.
  v_own integer := greatest(coalesce(p_own, case when p_job.status = 'running'
    then coalesce(p_job.prompt_tokens, 0) + p_job.partial_tokens else 0 end), 0);
  v_operator boolean := p_reason is not distinct from 'provider_misconfigured';
  v_paid boolean := not v_operator and (p_running_cancel or p_job.consumed + v_own > 0);
  -- A job plan's refund after spend uses the shared per-period bound.
  v_bounded boolean := p_job.meter = 'jobs' and v_paid;
  v_capture integer := case when v_operator or p_job.meter = 'jobs' then 0
    else least(p_job.consumed + v_own, p_job.hold) end;
  v_refunded boolean;
  v_job public.generation_jobs;
begin
  update public.quota_usage q
  set units_used = q.units_used - (p_job.hold - v_capture),
      refunded_running_cancels = q.refunded_running_cancels + case when v_bounded then 1 else 0 end,
      updated_at = p_now
  where q.user_id = p_job.user_id and q.period_start = p_job.period_start and q.meter = p_job.meter
    and q.units_used >= p_job.hold - v_capture
    -- The row being updated is the one compared: two endings of one user take turns on it.
    and (not v_bounded or q.refunded_running_cancels < (
      select private.refund_bound(p) from public.plans p where p.id = p_job.plan_id));
  v_refunded := found;
  if not v_refunded and not (v_bounded and exists (
    select from public.quota_usage q
    where q.user_id = p_job.user_id and q.period_start = p_job.period_start and q.meter = p_job.meter
  )) then
    -- A hold with no counter to release it to is drift: refuse the whole transition (the caller
    -- sees an error and retries) rather than end the job without its release.
    raise exception 'no hold to release for job % (user %, period %)',
      p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
  end if;

  update public.generation_jobs j
  set status = p_status,
      failure_reason = case when p_status = 'failed' then p_reason end,
      last_error = coalesce(p_error, j.last_error),
      -- The client was told "nothing was charged, retry": its retry with the same key must
      -- start a job, not replay this one.
      idempotency_key = case when p_reason = 'publish_failed' then null else j.idempotency_key end,
      lease_expires_at = null,
      resume_at = null,
      finished_at = p_now,
      refunded_at = case when v_refunded then p_now end,
      refund_withheld = case when v_refunded then null
        when p_running_cancel then 'running_cancel_limit' else 'paid_refund_limit' end,
      captured = case when v_refunded then v_capture else j.hold end,
      updated_at = p_now
  where j.id = p_job.id and j.status in ('queued', 'running')
  returning * into v_job;
  if not found then
    raise exception 'job % is no longer active', p_job.id using errcode = 'P0001';
  end if;

  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  values (v_job.id, v_job.user_id, p_now, p_event, p_job.status, v_job.status,
    p_detail || jsonb_build_object('refunded', v_refunded, 'captured', v_job.captured,
      'released', v_job.hold - v_job.captured)
    || case when v_bounded and v_refunded then jsonb_build_object('counted', true) else '{}'::jsonb end
    || case when v_refunded then '{}'::jsonb
            -- A cancel's event said why in `reason` before; a failure's `reason` is its own.
            when p_status = 'canceled' then jsonb_build_object('reason', v_job.refund_withheld)
            else jsonb_build_object('withheld', v_job.refund_withheld) end);
  return v_job;
end
$$;

create or replace function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamptz) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  with bounds as (
    select private.period_start(p_plan.period, p_now) as period_start
  ), counter as (
    select q.units_used, q.refunded_running_cancels from public.quota_usage q, bounds b
    where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p_plan.meter
  ), active as (
    select count(*) as n, coalesce(sum(j.hold), 0) as held from public.generation_jobs j
    where j.user_id = p_user_id and j.status in ('queued', 'running')
  )
  select private.usage_object(
    p_plan,
    b.period_start,
    coalesce((select c.units_used from counter c), 0),
    a.n
  ) || jsonb_build_object(
    'meter', p_plan.meter,
    'held', a.held,
    -- A token plan has no bound of refunds: a cancel or a failure pays what it consumed.
    'refunded_running_cancels', case when p_plan.meter = 'jobs'
      then coalesce((select c.refunded_running_cancels from counter c), 0) end,
    'max_refunded_running_cancels', private.refund_bound(p_plan)
  )
  from bounds b, active a
$$;

-- grants -------------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close it to everyone but the
-- service role; said again here so the intent is in the file that makes it.

revoke all on function private.refund_bound(public.plans) from public, anon, authenticated;
grant execute on function private.refund_bound(public.plans) to service_role;
