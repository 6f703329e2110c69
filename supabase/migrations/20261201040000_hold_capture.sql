-- quota-jobs: hold → capture metering, and plans that meter tokens.
--
-- Until now a job reserved one unit and its ending either kept it or refunded it. A plan may now
-- meter tokens instead of jobs (plans.meter = 'tokens'): its quota is a number of tokens per
-- period, and a job costs what the provider consumed for it, which nobody knows at enqueue. So
-- every job, on either kind of plan, now works as a card payment does:
-- - enqueue HOLDS the most the job can cost (generation_jobs.hold): 1 on a job plan; on a token
--   plan the prompt's tokens plus the plan's max_output_tokens (one attempt's bound). The
--   counter (quota_usage.units_used) goes up by the hold; a refusal holds nothing.
-- - the ending CAPTURES what is kept (generation_jobs.captured, 0 ≤ captured ≤ hold) and
--   releases the rest (counter − (hold − captured)), exactly once, in the ending's own
--   transaction, as the refund was before:
--     succeeded            job plan 1; token plan the provider's prompt + completion tokens
--                          from complete_job's p_usage (the hold when none is given), ≤ hold
--     failed (by us)       0 (delivery_failed, publish_failed, the sweeper's reasons,
--                          model_refused, provider_quota_exhausted)
--     canceled, queued     0
--     canceled, running    job plan: 0 within the plan's refunded running-cancels, else 1
--                          (refund_withheld); token plan: the prompt tokens plus the job's
--                          partial_tokens as of the last progress write (what SQL knows in the
--                          cancel's transaction; it under-counts by what streamed since, about
--                          one progress interval), ≤ hold. No bound on token plans: the cancel
--                          pays for what it consumed, so a cancel loop is not free.
-- - quota_drift: counter = open holds + captures, per user and period.
--
-- refunded_at and refund_withheld keep their meaning on job plans. On a token plan refunded_at
-- is set on every failed or canceled ending (the rest of the hold went back at that moment;
-- `captured` says what was kept), and refund_withheld is never set.
-- docs/DESIGN.md#invariant-2-exactly-once-refund states the rule.

-- what a plan meters -----------------------------------------------------------------------------

alter table public.plans
  add column meter text not null default 'jobs' check (meter in ('jobs', 'tokens'));
comment on column public.plans.meter is
  'jobs: units_per_period counts jobs (a job holds 1). tokens: units_per_period counts tokens '
  '(a job holds its prompt tokens plus max_output_tokens and captures what it consumed).';

-- hold and capture per job -------------------------------------------------------------------------

alter table public.generation_jobs
  add column meter text not null default 'jobs' check (meter in ('jobs', 'tokens')),
  add column prompt_tokens integer check (prompt_tokens >= 0),
  add column hold integer not null default 1 check (hold >= 1),
  add column captured integer check (captured >= 0);
comment on column public.generation_jobs.meter is
  'The meter of the job''s plan when it was enqueued (a later plan change does not reprice it).';
comment on column public.generation_jobs.prompt_tokens is
  'The prompt''s tokens as counted at enqueue (chat framing included); null on jobs older than metering.';
comment on column public.generation_jobs.hold is
  'What enqueue added to the counter: 1 on a job plan; prompt_tokens + max_output_tokens on a token plan.';
comment on column public.generation_jobs.captured is
  'Null while active. On an ending, what the job kept of its hold (0 ≤ captured ≤ hold); the rest '
  'went back to the counter in the same transaction.';

-- Jobs that ended before this migration: what the old rule kept. Final rows cannot be updated
-- (generation_jobs_final_is_final), so the trigger is off for this one statement.
alter table public.generation_jobs disable trigger generation_jobs_final_is_final;
update public.generation_jobs
set captured = case when status = 'succeeded' or refunded_at is null then 1 else 0 end
where status in ('succeeded', 'failed', 'canceled');
alter table public.generation_jobs enable trigger generation_jobs_final_is_final;

alter table public.generation_jobs
  add constraint generation_jobs_captured_iff_final
    check ((status in ('succeeded', 'failed', 'canceled')) = (captured is not null)),
  add constraint generation_jobs_captured_within_hold
    check (captured is null or captured <= hold),
  add constraint generation_jobs_job_meter_holds_one
    check (meter = 'tokens' or hold = 1);

-- drift: counter = open holds + captures ----------------------------------------------------------

create or replace view public.quota_drift with (security_invoker = true) as
with reserved as (
  select user_id, period_start, sum(coalesce(captured, hold)) as units_expected
  from public.generation_jobs
  group by user_id, period_start
)
select
  coalesce(u.user_id, r.user_id) as user_id,
  coalesce(u.period_start, r.period_start) as period_start,
  coalesce(u.units_used, 0) as units_used,
  coalesce(r.units_expected, 0)::bigint as units_expected
from public.quota_usage u
full join reserved r on r.user_id = u.user_id and r.period_start = u.period_start
where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0);
comment on view public.quota_drift is
  'Users and periods whose counter differs from their open holds plus their captures (an active '
  'job counts its hold, a final one what it captured). Always empty.';

-- ending with a capture: one statement -------------------------------------------------------------
-- As in 20261201010000_faster_transitions.sql, plus p_capture (what the ending keeps; clamped to
-- [0, hold]): the counter gets back hold − capture, the job records the capture, and the event
-- says both. fail_job, requeue_job's give-up, the sweeper and the queued cancel pass 0.

drop function private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb);
create function private.end_with_refund(
  p_job public.generation_jobs,
  p_status text,
  p_reason text,
  p_error text,
  p_event text,
  p_now timestamptz,
  p_detail jsonb default '{}'::jsonb,
  p_capture integer default 0
) returns public.generation_jobs
language plpgsql security invoker set search_path = ''
as $$
declare
  v_capture integer := least(greatest(coalesce(p_capture, 0), 0), p_job.hold);
  v_ended record;
begin
  with ended as (
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
        refunded_at = p_now,
        captured = v_capture,
        updated_at = p_now
    where j.id = p_job.id and j.status in ('queued', 'running')
    returning j as job, j.id, j.user_id, j.period_start, j.status, j.hold
  ), released as (
    update public.quota_usage q
    set units_used = q.units_used - (e.hold - v_capture), updated_at = p_now
    from ended e
    where q.user_id = e.user_id and q.period_start = e.period_start
      and q.units_used >= e.hold - v_capture
    returning 1
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select e.id, e.user_id, p_now, p_event, p_job.status, e.status,
      p_detail || jsonb_build_object('captured', v_capture, 'released', e.hold - v_capture)
    from ended e
  )
  select e.job, exists (select from released) as released into v_ended
  from ended e;
  if not found then
    raise exception 'job % is no longer active', p_job.id using errcode = 'P0001';
  end if;
  if not v_ended.released then
    -- A hold with no counter to release it to is drift: refuse the whole transition (the
    -- caller sees an error and retries) rather than end the job without its release.
    raise exception 'no hold to release for job % (user %, period %)',
      p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
  end if;
  return v_ended.job;
end
$$;
comment on function private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer) is
  'Ends an active job failed or canceled: keeps p_capture of its hold (default 0), gives the rest '
  'back to the counter, appends the event. One statement; raises if the job is no longer active.';

-- enqueue: hold the most the job can cost --------------------------------------------------------
-- As in 20261201010000_faster_transitions.sql, plus p_prompt_tokens (counted by the caller with
-- the model's tokenizer) and the hold: a token plan refuses when used + hold > limit.

drop function public.enqueue_job(uuid, text, text, timestamptz);
create function public.enqueue_job(
  p_user_id uuid,
  p_prompt text,
  p_idempotency_key text default null,
  p_now timestamptz default now(),
  p_prompt_tokens integer default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_plan public.plans;
  v_period_start timestamptz;
  v_hash text;
  v_job public.generation_jobs;
  v_used integer;
  v_active integer;
  v_prompt_tokens integer;
  v_hold integer;
  v_result jsonb;
begin
  if p_prompt is null or p_prompt !~ '[^[:space:]]' or char_length(p_prompt) > 8000
     or p_prompt_tokens < 0 then
    return jsonb_build_object('outcome', 'invalid_prompt');
  end if;
  if p_idempotency_key is not null and char_length(p_idempotency_key) not between 1 and 255 then
    return jsonb_build_object('outcome', 'invalid_idempotency_key');
  end if;
  v_hash := encode(sha256(convert_to(p_prompt, 'UTF8')), 'hex');
  -- Without a count, the prompt's UTF-8 bytes: a byte-level BPE token is at least one byte, so
  -- this never holds less than the prompt costs (plus 8 for the chat framing, as the caller adds).
  v_prompt_tokens := coalesce(p_prompt_tokens, octet_length(convert_to(p_prompt, 'UTF8')) + 8);

  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
    p.max_refunded_running_cancels, p.meter, b.period_start,
    (select q.units_used from public.quota_usage q
     where q.user_id = p_user_id and q.period_start = b.period_start),
    (select count(*) from public.generation_jobs j
     where j.user_id = p_user_id and j.status in ('queued', 'running'))
  into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
    v_plan.max_output_tokens, v_plan.max_refunded_running_cancels, v_plan.meter,
    v_period_start, v_used, v_active
  from public.plans p
  cross join lateral (
    select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
  ) b
  where p.id = (select (private.plan_for(p_user_id)).id);

  if p_idempotency_key is not null then
    select * into v_job from public.generation_jobs j
    where j.user_id = p_user_id and j.idempotency_key = p_idempotency_key;
    if found then
      if v_job.request_hash <> v_hash then
        return jsonb_build_object('outcome', 'idempotency_key_reused', 'job_id', v_job.id);
      end if;
      return jsonb_build_object(
        'outcome', 'replayed',
        'job', private.job_json(v_job),
        'usage', private.usage_json(p_user_id, v_plan, p_now)
      );
    end if;
  end if;

  v_hold := case when v_plan.meter = 'tokens' then v_prompt_tokens + v_plan.max_output_tokens else 1 end;

  if coalesce(v_used, 0) + v_hold > v_plan.units_per_period then
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
      'hold', v_hold,
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;
  if v_active >= v_plan.max_active_jobs then
    return jsonb_build_object(
      'outcome', 'too_many_active_jobs',
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;

  -- Hold, insert and log in one statement; the job and its event exist only if the guarded
  -- hold fitted under the limit.
  with reserved as (
    insert into public.quota_usage as q (user_id, period_start, units_used, updated_at)
    values (p_user_id, v_period_start, v_hold, p_now)
    on conflict (user_id, period_start) do update
      set units_used = q.units_used + v_hold, updated_at = p_now
      where q.units_used + v_hold <= v_plan.units_per_period
    returning q.units_used
  ), inserted as (
    insert into public.generation_jobs (
      user_id, status, prompt, request_hash, idempotency_key, plan_id, period_start,
      meter, prompt_tokens, hold, created_at, queued_at, updated_at
    )
    select p_user_id, 'queued', p_prompt, v_hash, p_idempotency_key, v_plan.id, v_period_start,
      v_plan.meter, v_prompt_tokens, v_hold, p_now, p_now, p_now
    from reserved
    returning *
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select i.id, i.user_id, p_now, 'enqueued', null, i.status,
      jsonb_build_object('plan', v_plan.id, 'hold', v_hold)
    from inserted i
  )
  select jsonb_build_object(
    'outcome', 'enqueued',
    'job', to_jsonb(i) - 'request_hash',
    'usage', jsonb_build_object(
      'plan', v_plan.id,
      'meter', v_plan.meter,
      'used', r.units_used,
      'limit', v_plan.units_per_period,
      'period_start', v_period_start,
      'resets_at', ((v_period_start at time zone 'UTC') + ('1 ' || v_plan.period)::interval) at time zone 'UTC',
      'active', v_active + 1,
      'max_active', v_plan.max_active_jobs
    )
  ) into v_result
  from inserted i, reserved r;
  if v_result is null then
    -- Unreachable while the lock above is held; kept so the limit holds even without it.
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
      'hold', v_hold,
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;
  return v_result;
end
$$;
comment on function public.enqueue_job(uuid, text, text, timestamptz, integer) is
  'Starts a job: holds 1 (job plan) or p_prompt_tokens + max_output_tokens (token plan) under the '
  'limit, checks the active-job limit and the idempotency key, inserts, in one transaction. A '
  'refusal holds nothing.';

-- complete: capture what the attempt consumed ------------------------------------------------------
-- As in 20261201020000_streamed_attempts.sql, plus the capture: a job plan keeps its 1; a token
-- plan keeps the provider's prompt + completion tokens (at most the hold; the hold itself when
-- no usage is given, so a missing report never under-charges) and releases the rest.

create or replace function public.complete_job(
  p_job_id uuid,
  p_attempt integer,
  p_output text,
  p_now timestamptz default now(),
  p_usage jsonb default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
  v_result jsonb;
  v_consumed integer := case when p_usage is null then null else
    greatest(coalesce((p_usage ->> 'prompt_tokens')::integer, 0), 0)
    + greatest(coalesce((p_usage ->> 'completion_tokens')::integer, 0), 0) end;
begin
  with completed as (
    update public.generation_jobs j
    set status = 'succeeded',
        output = p_output,
        partial_output = null,
        lease_expires_at = null,
        finished_at = p_now,
        captured = case when j.meter = 'tokens' then least(coalesce(v_consumed, j.hold), j.hold)
                        else j.hold end,
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), released as (
    update public.quota_usage q
    set units_used = q.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured
      and q.user_id = c.user_id and q.period_start = c.period_start
      and q.units_used >= c.hold - c.captured
    returning 1
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select c.id, c.user_id, p_now, 'completed', 'running', c.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt, 'captured', c.captured,
        'released', c.hold - c.captured), p_usage)
    from completed c
  )
  select jsonb_build_object('outcome', 'completed', 'job', to_jsonb(c) - 'request_hash',
    'released', c.hold = c.captured or exists (select from released)) into v_result
  from completed c;
  if v_result is not null then
    if not (v_result ->> 'released')::boolean then
      raise exception 'no hold to release for job %', p_job_id using errcode = 'P0001';
    end if;
    return v_result - 'released';
  end if;
  select * into v_job from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_job));
end
$$;
comment on function public.complete_job(uuid, integer, text, timestamptz, jsonb) is
  'running under this claim → succeeded with the output; captures 1 (job plan) or the usage''s '
  'tokens up to the hold (token plan) and releases the rest; the attempt''s usage goes in the event.';

-- cancel: a token plan's running cancel captures what was consumed --------------------------------
-- As in 20261201030000_running_cancel_limit.sql for job plans (the bound, refund_withheld),
-- plus the capture; a token plan's running cancel captures prompt_tokens + partial_tokens.

create or replace function public.cancel_job(
  p_job_id uuid,
  p_user_id uuid,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_capture integer;
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

  if v_old.meter = 'tokens' then
    -- What the provider consumed that SQL knows now: the prompt and the tokens of the last
    -- progress write. The worker learns of the cancel at its next write and cuts the stream,
    -- so what streams in between (about one progress interval) is not captured.
    v_capture := coalesce(v_old.prompt_tokens, 0) + v_old.partial_tokens;
    return jsonb_build_object('outcome', 'canceled', 'refunded', true, 'job', to_jsonb(private.end_with_refund(
      v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('refunded', true), v_capture
    )) - 'request_hash');
  end if;

  -- A job plan's running cancel: the rule and the single statement of
  -- 20261201030000_running_cancel_limit.sql, plus captured (0 refunded, 1 withheld).
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
        captured = case when exists (select from counted) then 0 else j.hold end,
        updated_at = p_now
    where j.id = v_old.id and j.status = 'running'
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select e.id, e.user_id, p_now, 'canceled', 'running', 'canceled',
      case when e.refund_withheld is null
           then jsonb_build_object('refunded', true, 'captured', e.captured, 'released', e.hold - e.captured)
           else jsonb_build_object('refunded', false, 'reason', e.refund_withheld,
             'captured', e.captured, 'released', e.hold - e.captured) end
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
    raise exception 'no reserved unit for job % (user %, period %)',
      v_old.id, v_old.user_id, v_old.period_start using errcode = 'P0001';
  end if;
  return v_result;
end
$$;
comment on function public.cancel_job(uuid, uuid, timestamptz) is
  'The owner cancels a queued or running job. Queued: captures nothing. Running on a job plan: '
  'refunded under the plan''s bound of refunded running-cancels, else the unit is kept '
  '(refund_withheld). Running on a token plan: captures the prompt and the streamed tokens last '
  'recorded, up to the hold, and releases the rest.';

-- whether a cancel now would release the hold: a token plan's always does ------------------------

create or replace function private.cancel_refunds(p_job public.generation_jobs) returns boolean
language sql stable security invoker set search_path = ''
as $$
  select case
    when p_job.status = 'queued' then true
    when p_job.status = 'running' and p_job.meter = 'tokens' then true
    when p_job.status = 'running' then coalesce((
      select q.refunded_running_cancels < coalesce(p.max_refunded_running_cancels, p.units_per_period)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start and p.id = p_job.plan_id
    ), false)
    else false
  end
$$;
comment on function private.cancel_refunds(public.generation_jobs) is
  'Whether canceling this job now would give back what it holds: always for a queued job; for a '
  'running job on a token plan (the rest beyond what it consumed); for a running job on a job '
  'plan while the refunded running-cancels of its period are under its plan''s bound.';

-- usage: the meter, and what active jobs hold ------------------------------------------------------

create or replace function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamptz) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  with bounds as (
    select private.period_start(p_plan.period, p_now) as period_start
  ), counter as (
    select q.units_used, q.refunded_running_cancels from public.quota_usage q, bounds b
    where q.user_id = p_user_id and q.period_start = b.period_start
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
    'refunded_running_cancels', coalesce((select c.refunded_running_cancels from counter c), 0),
    'max_refunded_running_cancels',
      coalesce(p_plan.max_refunded_running_cancels, p_plan.units_per_period)
  )
  from bounds b, active a
$$;
comment on function private.usage_json(uuid, public.plans, timestamptz) is
  'A user''s usage in the period that contains p_now: the meter, units (jobs or tokens) used '
  'and the limit, what active jobs hold, active jobs, and the running-cancel refunds used and allowed.';

-- grants -------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but
-- the service role; said again here so the intent is in the file that makes them.

revoke all on function public.enqueue_job(uuid, text, text, timestamptz, integer),
  private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer)
  from public, anon, authenticated;
grant execute on function public.enqueue_job(uuid, text, text, timestamptz, integer),
  private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer)
  to service_role;
