-- quota-jobs: the spend a user can cause in a period is bounded by their plan, whatever calls and
-- failures they make. docs/DESIGN.md#metering-hold-and-capture states the rule.
--
-- Before this migration three rounds were free for the user and paid by the operator:
-- - A token plan's job records what its released attempts (a timeout, a 5xx mid-stream) consumed
--   in generation_jobs.consumed, but no ending captured it: a job that consumed 1,422 tokens
--   and was then canceled while queued captured 0 (canceled while running: only the last
--   attempt's 27), and two timed-out attempts ending in the failure callback's delivery_failed
--   captured 0 of their 1,620.
-- - A job plan refunded every failed job and every queued cancel, also after the provider had
--   billed its attempts: a prompt that times the model out on every delivery (→ release, then the
--   failure callback's delivery_failed) or a timeout followed by a cancel of the queued job gave
--   the unit back at once, and the round could repeat without end, each costing QSTASH_RETRIES + 1
--   attempts.
-- - quota_usage was keyed by (user, period), not by meter: after a plan change inside a period
--   the counter was read in the other unit (2 jobs became 2 tokens; 1,481 tokens became 1,481
--   jobs → 429).
-- And two small ones: a token for a user with no auth.users row (deleted, or never created) got
-- the free plan; a token plan's usage showed a running-cancel bound (units_per_period) it does
-- not have.
--
-- The rule of every ending now (private.end_with_refund, the one place that releases a hold;
-- complete_job for success):
-- - the ending attempt's own tokens: its usage when its worker ends it (p_usage); when someone
--   else ends a running attempt (a cancel, the failure callback, the sweeper), what SQL knows of
--   it: the prompt plus the tokens of its last progress write (the estimate a reclaim already adds
--   to consumed); 0 for a queued job.
-- - token plan: captures least(hold, consumed + own). The 2 × hold attempt budget of
--   20261201050000_attempt_budget.sql stays, so the operator pays less than one hold per job
--   beyond what the user pays.
-- - job plan: an ending after provider spend (consumed + own > 0, or a running cancel) refunds
--   only within the plan's bound (max_refunded_running_cancels, null: units_per_period), counted
--   in the same quota_usage.refunded_running_cancels as running cancels: one shared bound, so a
--   period's refunds after spend are at most that number, whatever mix of cancels and failures.
--   Past it the unit stays spent: refund_withheld = 'running_cancel_limit' (a running cancel,
--   as before) or 'paid_refund_limit' (a failure or a queued cancel after spend).
-- - an ending with nothing consumed refunds freely, as before.
-- - provider_misconfigured (a revoked key, a region, an unknown model: the operator's fault)
--   captures 0 and is never bounded, on either meter.
-- Counters are now per (user, period, meter), and every reader and writer names the meter.

-- failure reasons: provider_misconfigured ----------------------------------------------------------
-- 20261201085000_operator_fault.sql adds the reason; said again here (the same list) so that this
-- migration's rule for it can be tested whatever order the two land in.

alter table public.generation_jobs
  drop constraint if exists generation_jobs_failure_reason_check,
  add constraint generation_jobs_failure_reason_check check (failure_reason in (
    'model_refused', 'delivery_failed', 'publish_failed', 'provider_quota_exhausted',
    'lease_expired', 'max_age_exceeded', 'never_delivered', 'attempt_budget_exhausted',
    'provider_misconfigured'
  ));

-- a withheld refund: also on a failed job ------------------------------------------------------------

alter table public.generation_jobs
  drop constraint generation_jobs_refund_withheld_check,
  add constraint generation_jobs_refund_withheld_check
    check (refund_withheld in ('running_cancel_limit', 'paid_refund_limit')),
  drop constraint generation_jobs_withheld_only_when_canceled,
  add constraint generation_jobs_withheld_only_when_failed_or_canceled
    check (refund_withheld is null or status in ('failed', 'canceled')),
  add constraint generation_jobs_running_cancel_limit_only_when_canceled
    check (refund_withheld is distinct from 'running_cancel_limit' or status = 'canceled');
comment on column public.generation_jobs.refund_withheld is
  'Why a job plan''s failed or canceled job kept its unit spent: running_cancel_limit (canceled '
  'while running) or paid_refund_limit (failed, or canceled while queued, after its attempts '
  'consumed provider tokens), when the user''s refunds after spend had reached the plan''s bound. '
  'Null on every other job.';

comment on column public.plans.max_refunded_running_cancels is
  'How many jobs per period get their unit back after the provider billed them (running cancels, '
  'and failures or queued cancels after a consumed attempt). Null: as many as units_per_period. '
  'Job plans only: a token plan captures what was consumed instead.';
comment on column public.quota_usage.refunded_running_cancels is
  'Refunds after provider spend in this period (running cancels, failures and queued cancels '
  'after a consumed attempt). Changed only by private.end_with_refund, with the refund, in the '
  'same statement.';

-- counters per meter ---------------------------------------------------------------------------------
-- The counter of a (user, period) was read in whatever the user's plan meters now. It is now one
-- counter per meter: a job holds and releases on the counter of its own meter (the one it was
-- enqueued under), and usage reads the counter of the plan's meter.

alter table public.quota_usage
  add column meter text not null default 'jobs' check (meter in ('jobs', 'tokens'));
comment on column public.quota_usage.meter is
  'What units_used counts: jobs or tokens. A job holds on the counter of its own meter.';
alter table public.quota_usage
  drop constraint quota_usage_pkey,
  add primary key (user_id, period_start, meter);

-- Rows written before: the token jobs' holds and captures move to a counter of their own.
with tokens as (
  select j.user_id, j.period_start, sum(coalesce(j.captured, j.hold))::integer as units
  from public.generation_jobs j
  where j.meter = 'tokens'
  group by j.user_id, j.period_start
), moved as (
  insert into public.quota_usage (user_id, period_start, meter, units_used, updated_at)
  select t.user_id, t.period_start, 'tokens', t.units, now() from tokens t
  returning user_id, period_start, units_used
)
update public.quota_usage q
set units_used = greatest(q.units_used - m.units_used, 0)
from moved m
where q.user_id = m.user_id and q.period_start = m.period_start and q.meter = 'jobs';

create or replace view public.quota_drift with (security_invoker = true) as
with reserved as (
  select user_id, period_start, meter, sum(coalesce(captured, hold)) as units_expected
  from public.generation_jobs
  group by user_id, period_start, meter
)
select
  coalesce(u.user_id, r.user_id) as user_id,
  coalesce(u.period_start, r.period_start) as period_start,
  coalesce(u.units_used, 0) as units_used,
  coalesce(r.units_expected, 0)::bigint as units_expected,
  coalesce(u.meter, r.meter) as meter
from public.quota_usage u
full join reserved r
  on r.user_id = u.user_id and r.period_start = u.period_start and r.meter = u.meter
where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0);
comment on view public.quota_drift is
  'Users, periods and meters whose counter differs from their open holds plus their captures (an '
  'active job counts its hold, a final one what it captured). Always empty.';

-- a user that exists --------------------------------------------------------------------------------

-- Security definer for the reason of private.plan_for (20261201000000_closed_by_default.sql):
-- auth.users is readable by the migration role, not by the service role the API runs as.
create function private.user_exists(p_user_id uuid) returns boolean
language sql stable security definer set search_path = ''
as $$
  select exists (select from auth.users u where u.id = p_user_id)
$$;
comment on function private.user_exists(uuid) is
  'Whether Supabase Auth knows the user (an auth.users row). A valid token outlives its user.';

-- the ending: capture, refund, bound -----------------------------------------------------------------
-- Replaces the one of 20261201040000_hold_capture.sql, whose callers passed what to capture. The
-- rule is now here, once: callers say what the ending attempt consumed (p_own; null: what SQL
-- knows) and whether it is a running cancel. Two statements, in the caller's transaction, on a
-- job row the caller locked: the counter's guarded update (which, for a bounded refund, is also
-- the check of the bound: two endings of one user take turns on that row), then the job.

drop function private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer);
create function private.end_with_refund(
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
    and (not v_bounded or q.refunded_running_cancels < (
      select coalesce(p.max_refunded_running_cancels, p.units_per_period)
      from public.plans p where p.id = p_job.plan_id));
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
comment on function private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer, boolean) is
  'Ends a locked active job failed or canceled. Token plan: captures least(hold, consumed + the '
  'ending attempt''s tokens) and releases the rest. Job plan: refunds the unit; after provider '
  'spend (consumed, the ending attempt''s tokens, or a running cancel) only under the plan''s '
  'bound of refunds after spend, counted, else keeps it (refund_withheld). provider_misconfigured: '
  'captures 0, never bounded. Raises if the job is no longer active or has no counter.';

-- enqueue: a user that exists; the counter of the plan's meter ---------------------------------------
-- As in 20261201040000_hold_capture.sql, plus the user check (outcome user_not_found, nothing
-- held) and the meter in every counter read and write.

create or replace function public.enqueue_job(
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
  -- A signed token outlives its user (deleted) and can name one that never was: without an
  -- auth.users row there is no account, so no plan, not the free one.
  if not private.user_exists(p_user_id) then
    return jsonb_build_object('outcome', 'user_not_found');
  end if;
  v_hash := encode(sha256(convert_to(p_prompt, 'UTF8')), 'hex');
  v_prompt_tokens := coalesce(p_prompt_tokens, octet_length(convert_to(p_prompt, 'UTF8')) + 8);

  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
    p.max_refunded_running_cancels, p.meter, b.period_start,
    (select q.units_used from public.quota_usage q
     where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p.meter),
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

  with reserved as (
    insert into public.quota_usage as q (user_id, period_start, meter, units_used, updated_at)
    values (p_user_id, v_period_start, v_plan.meter, v_hold, p_now)
    on conflict (user_id, period_start, meter) do update
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
  'Starts a job for a user that exists (else user_not_found): holds 1 (job plan) or '
  'p_prompt_tokens + max_output_tokens (token plan) on the counter of the plan''s meter under the '
  'limit, checks the active-job limit and the idempotency key, inserts, in one transaction. A '
  'refusal holds nothing.';

-- complete: a token plan captures the released attempts too -------------------------------------------
-- As in 20261201040000_hold_capture.sql, plus consumed in the capture and the meter of the counter.

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
  v_tokens integer := case when p_usage is null then null else private.usage_tokens(p_usage) end;
begin
  with completed as (
    update public.generation_jobs j
    set status = 'succeeded',
        output = p_output,
        partial_output = null,
        lease_expires_at = null,
        finished_at = p_now,
        -- No usage: the hold, so a missing report never under-charges.
        captured = case when j.meter = 'tokens'
                        then least(j.consumed + coalesce(v_tokens, j.hold), j.hold)
                        else j.hold end,
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), released as (
    update public.quota_usage q
    set units_used = q.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured
      and q.user_id = c.user_id and q.period_start = c.period_start and q.meter = c.meter
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
  'running under this claim → succeeded with the output; captures 1 (job plan) or least(hold, '
  'consumed + the usage''s tokens) (token plan) and releases the rest; the usage goes in the event.';

-- cancel: one rule for every meter and state -----------------------------------------------------------

create or replace function public.cancel_job(
  p_job_id uuid,
  p_user_id uuid,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_job public.generation_jobs;
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
  -- Queued: what its earlier attempts consumed. Running: also the running attempt as last
  -- recorded; on a job plan a running cancel is always after spend.
  v_job := private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now, '{}'::jsonb,
    null, v_old.status = 'running');
  return jsonb_build_object('outcome', 'canceled', 'refunded', v_job.refunded_at is not null,
    'job', private.job_json(v_job));
end
$$;
comment on function public.cancel_job(uuid, uuid, timestamptz) is
  'The owner cancels a queued or running job (private.end_with_refund''s rule). Token plan: captures '
  'what its attempts consumed, up to the hold. Job plan: refunded, except after provider spend '
  '(a running cancel, or earlier attempts that consumed) past the plan''s bound (refund_withheld).';

-- fail: the ending attempt is the worker's (p_usage) or the one SQL knows --------------------------
-- As in 20261201070000_superseded_callback.sql; the capture and the bound are end_with_refund's.

create or replace function public.fail_job(
  p_job_id uuid,
  p_reason text,
  p_error text default null,
  p_attempt integer default null,
  p_now timestamptz default now(),
  p_usage jsonb default null,
  p_seq integer default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status in ('succeeded', 'failed', 'canceled') then
    return jsonb_build_object('outcome', 'already_final', 'job', private.job_json(v_old));
  end if;
  if p_seq is not null and p_seq < v_old.publish_seq then
    return jsonb_build_object('outcome', 'superseded', 'job', private.job_json(v_old));
  end if;
  if p_attempt is not null and (v_old.status <> 'running' or v_old.attempts <> p_attempt) then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;
  return jsonb_build_object('outcome', 'failed', 'job', private.job_json(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage),
    case when p_usage is null then null else private.usage_tokens(p_usage) end
  )));
end
$$;
comment on function public.fail_job(uuid, text, text, integer, timestamptz, jsonb, integer) is
  'queued or running (with p_attempt: only that claim) → failed (private.end_with_refund''s rule: '
  'a token plan captures what was consumed; a job plan''s refund after spend is bounded; '
  'provider_misconfigured captures 0, unbounded). With p_seq older than the job''s publish_seq: '
  'superseded, nothing changes.';

-- requeue: the give-up captures what earlier attempts consumed ----------------------------------------
-- As in 20261201020000_streamed_attempts.sql. The attempt that gave up hit a 429, which bills
-- nothing: its own tokens are its usage's (0 without one).

create or replace function public.requeue_job(
  p_job_id uuid,
  p_attempt integer,
  p_resume_at timestamptz,
  p_error text default null,
  p_max_hits integer default 3,
  p_max_age_seconds integer default 10800,
  p_now timestamptz default now(),
  p_count_hit boolean default true,
  p_usage jsonb default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_job public.generation_jobs;
  v_hits integer;
  v_deadline timestamptz;
  v_give_up text;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status <> 'running' or v_old.attempts <> p_attempt then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;

  v_hits := v_old.provider_quota_hits + case when p_count_hit then 1 else 0 end;
  v_deadline := v_old.created_at + make_interval(secs => p_max_age_seconds);
  v_give_up := case
    when p_count_hit and v_hits >= p_max_hits then 'hits'
    when p_now >= v_deadline then 'age'
    when p_resume_at > v_deadline then 'age'
  end;

  if v_give_up is not null then
    update public.generation_jobs j set provider_quota_hits = v_hits where j.id = p_job_id
    returning * into v_old;
    v_job := private.end_with_refund(
      v_old, 'failed', 'provider_quota_exhausted', p_error, 'gave_up', p_now,
      private.with_usage(
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'by', v_give_up), p_usage
      ),
      private.usage_tokens(p_usage)
    );
    return jsonb_build_object('outcome', 'gave_up', 'by', v_give_up, 'job', private.job_json(v_job));
  end if;

  with requeued as (
    update public.generation_jobs j
    set status = 'queued',
        provider_quota_hits = v_hits,
        resume_at = greatest(p_resume_at, p_now),
        queued_at = p_now,
        lease_expires_at = null,
        partial_output = null,
        publish_seq = j.publish_seq + 1,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'requeued', 'running', r.status,
      private.with_usage(
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'resume_at', r.resume_at), p_usage
      )
    from requeued r
  )
  select jsonb_build_object('outcome', 'requeued', 'job', to_jsonb(r) - 'request_hash') into v_result
  from requeued r;
  return v_result;
end
$$;
comment on function public.requeue_job(uuid, integer, timestamptz, text, integer, integer, timestamptz, boolean, jsonb) is
  'running under this claim → queued until p_resume_at after a provider quota hit, or failed when '
  'it gives up (hits or age; private.end_with_refund''s rule); the attempt''s usage goes in the event.';

-- sweep: a running job's attempt is the one SQL knows -------------------------------------------------
-- As in 20261130040100_transitions.sql; the capture and the bound are end_with_refund's.

create or replace function private.sweep_one(
  p_old public.generation_jobs,
  p_reason text,
  p_now timestamptz
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
begin
  if p_reason = 'republish' then
    update public.generation_jobs j
    set republish_count = j.republish_count + 1,
        publish_seq = j.publish_seq + 1,
        queued_at = p_now,
        resume_at = null,
        updated_at = p_now
    where j.id = p_old.id
    returning * into v_job;
    perform private.log_event(v_job, 'republished', 'queued', p_now,
      jsonb_build_object('republish_count', v_job.republish_count));
    return jsonb_build_object('republish', private.job_json(v_job));
  end if;
  v_job := private.end_with_refund(p_old, 'failed', p_reason, 'ended by the sweeper', 'swept', p_now,
    jsonb_build_object('reason', p_reason));
  return jsonb_build_object('failed', jsonb_build_object(
    'id', v_job.id, 'user_id', v_job.user_id, 'reason', p_reason, 'from_status', p_old.status));
end
$$;
comment on function private.sweep_one(public.generation_jobs, text, timestamptz) is
  'One locked stale job: republished (queued, message lost) or failed (private.end_with_refund''s rule).';

-- start: the claim refused at the budget captures what was consumed ----------------------------------
-- As in 20261201050000_attempt_budget.sql, except the capture of the refused claim's ending.

create or replace function public.start_job(
  p_job_id uuid,
  p_lease_seconds integer default 90,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_consumed integer;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status in ('succeeded', 'failed', 'canceled') then
    return jsonb_build_object('outcome', 'already_final', 'job', private.job_json(v_old));
  end if;
  if v_old.status = 'queued' and v_old.resume_at > p_now then
    return jsonb_build_object('outcome', 'not_ready', 'job', private.job_json(v_old));
  end if;
  if v_old.status = 'running' and v_old.lease_expires_at > p_now then
    return jsonb_build_object('outcome', 'already_running', 'job', private.job_json(v_old));
  end if;

  v_consumed := v_old.consumed + case when v_old.status = 'running'
    then coalesce(v_old.prompt_tokens, 0) + v_old.partial_tokens else 0 end;
  if v_old.meter = 'tokens' and v_consumed + v_old.hold > 2 * v_old.hold then
    update public.generation_jobs j set consumed = v_consumed where j.id = p_job_id
    returning * into v_old;
    -- The dead attempt is in consumed now: the ending attempt is none (p_own 0).
    return jsonb_build_object('outcome', 'budget_exhausted', 'job', private.job_json(
      private.end_with_refund(v_old, 'failed', 'attempt_budget_exhausted', null, 'failed', p_now,
        jsonb_build_object('reason', 'attempt_budget_exhausted', 'consumed', v_consumed), 0)));
  end if;

  with started as (
    update public.generation_jobs j
    set status = 'running',
        attempts = j.attempts + 1,
        lease_expires_at = p_now + make_interval(secs => p_lease_seconds),
        resume_at = null,
        started_at = p_now,
        partial_output = null,
        partial_tokens = 0,
        progress_at = null,
        consumed = v_consumed,
        updated_at = p_now
    where j.id = p_job_id
      and ((j.status = 'queued' and (j.resume_at is null or j.resume_at <= p_now))
        or (j.status = 'running' and j.lease_expires_at <= p_now))
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select s.id, s.user_id, p_now,
      case when v_old.status = 'running' then 'reclaimed' else 'started' end,
      v_old.status, s.status, jsonb_build_object('attempt', s.attempts)
    from started s
  )
  select jsonb_build_object(
    'outcome', 'started',
    'job', to_jsonb(s) - 'request_hash',
    'max_output_tokens', p.max_output_tokens
  ) into v_result
  from started s join public.plans p on p.id = s.plan_id;
  if v_result is null then
    raise exception 'job % could not be claimed', p_job_id using errcode = 'P0001';
  end if;
  return v_result;
end
$$;
comment on function public.start_job(uuid, integer, timestamptz) is
  'Claim: queued (past resume_at) or running with an expired lease → running, attempts + 1. A token '
  'plan''s job whose next attempt could take it past 2 × hold ends failed (attempt_budget_exhausted, '
  'capturing least(hold, consumed)) instead: budget_exhausted.';

-- release: at the budget, the ending captures consumed + this attempt ---------------------------------
-- As in 20261201050000_attempt_budget.sql, except the capture of the ending at the budget: all
-- that was consumed (this attempt included), up to the hold.

create or replace function public.release_job(
  p_job_id uuid,
  p_attempt integer,
  p_error text default null,
  p_now timestamptz default now(),
  p_usage jsonb default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_tokens integer := private.usage_tokens(p_usage);
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status <> 'running' or v_old.attempts <> p_attempt then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;

  if v_old.meter = 'tokens' and v_old.consumed + v_tokens + v_old.hold > 2 * v_old.hold then
    -- As before, this attempt goes into consumed (the job's whole spend), so the ending's own is 0.
    update public.generation_jobs j set consumed = j.consumed + v_tokens where j.id = p_job_id
    returning * into v_old;
    return jsonb_build_object('outcome', 'budget_exhausted', 'job', private.job_json(
      private.end_with_refund(v_old, 'failed', 'attempt_budget_exhausted', p_error, 'failed', p_now,
        private.with_usage(jsonb_build_object('attempt', p_attempt,
          'reason', 'attempt_budget_exhausted', 'consumed', v_old.consumed), p_usage),
        0)));
  end if;

  with released as (
    update public.generation_jobs j
    set status = 'queued',
        lease_expires_at = null,
        queued_at = p_now,
        partial_output = null,
        consumed = j.consumed + v_tokens,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'released', 'running', r.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt), p_usage)
    from released r
  )
  select jsonb_build_object('outcome', 'released', 'job', to_jsonb(r) - 'request_hash') into v_result
  from released r;
  return v_result;
end
$$;
comment on function public.release_job(uuid, integer, text, timestamptz, jsonb) is
  'running under this claim → queued after a transient error, the attempt''s tokens added to '
  'consumed; on a token plan, when no further attempt fits under 2 × hold, → failed '
  '(attempt_budget_exhausted) capturing least(hold, consumed + this attempt): budget_exhausted.';

-- whether a cancel now would refund -------------------------------------------------------------------

create or replace function private.cancel_refunds(p_job public.generation_jobs) returns boolean
language sql stable security invoker set search_path = ''
as $$
  select case
    when p_job.status not in ('queued', 'running') then false
    when p_job.meter = 'tokens' then true
    -- A job plan's queued job whose attempts consumed nothing: always.
    when p_job.status = 'queued' and p_job.consumed = 0 then true
    else coalesce((
      select q.refunded_running_cancels < coalesce(p.max_refunded_running_cancels, p.units_per_period)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
$$;
comment on function private.cancel_refunds(public.generation_jobs) is
  'Whether canceling this job now would give back what it holds: on a token plan, the rest beyond '
  'what it consumed; on a job plan, always for a queued job whose attempts consumed nothing, else '
  'while the refunds after spend of its period are under its plan''s bound.';

-- usage: the counter of the plan's meter; no running-cancel bound on a token plan -------------------

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
    'max_refunded_running_cancels', case when p_plan.meter = 'jobs'
      then coalesce(p_plan.max_refunded_running_cancels, p_plan.units_per_period) end
  )
  from bounds b, active a
$$;
comment on function private.usage_json(uuid, public.plans, timestamptz) is
  'A user''s usage in the period that contains p_now: the meter, units (jobs or tokens) used on '
  'that meter''s counter and the limit, what active jobs hold, active jobs, and (job plans) the '
  'refunds after spend used and allowed; null for both on a token plan.';

-- grants -------------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but the
-- service role; said again here so the intent is in the file that makes them.

revoke all on function private.user_exists(uuid),
  private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer, boolean)
  from public, anon, authenticated;
grant execute on function private.user_exists(uuid),
  private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer, boolean)
  to service_role;
