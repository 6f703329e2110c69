-- quota-jobs: an economy plan on OpenAI's flex tier, its honest wait, and "thinking" progress.
--
-- OpenAI's flex service tier is priced at Batch rates, answers more slowly, and may refuse a
-- request with 429 "resource unavailable" when it has no capacity (nothing is billed). That 429
-- is not a quota: it says nothing about the account or about other tiers, so it must not count
-- a provider quota hit (three of them give the job up) nor close the shared provider gate (one
-- Redis key that holds back every plan's jobs). What it is instead:
--
-- - The plan chooses the tier (plans.service_tier) and whether a job that waited long enough
--   for flex capacity falls back to the standard tier (plans.flex_fallback_after_seconds; null:
--   never, the plan is sold at flex prices). start_job returns the tier the attempt uses: the
--   plan's, or 'default' once the job has waited for capacity for the fallback's seconds.
-- - A capacity wait is requeue_job with p_capacity: the same transition as the closed gate's
--   wait (queued until resume_at, a new message, no hit counted), which records what the job
--   waits for (waiting_for, read by the page) and since when (capacity_wait_since, read by the
--   fallback). When the wait would take the job past its max age it gives up as before, with a
--   reason of its own, capacity_unavailable: refunded by private.end_with_refund's rule, like
--   provider_quota_exhausted (the 429 billed nothing, so it is after spend only if an earlier
--   attempt consumed). The reason is new because the page and on-call must read it apart from
--   a quota that ran out: nobody needs to add credits.
-- - record_progress takes the attempt's reasoning: whether the model is thinking (streaming no
--   visible text yet) and the reasoning tokens the provider reported so far. Those are billed
--   as output and are inside p_completion_tokens (the worker adds them), so a running cancel on
--   a token plan charges them too.

-- plans: the tier ---------------------------------------------------------------------------------

alter table public.plans
  add column service_tier text not null default 'default'
    constraint plans_service_tier_check check (service_tier in ('default', 'flex')),
  add column flex_fallback_after_seconds integer
    constraint plans_flex_fallback_after_seconds_check check (flex_fallback_after_seconds >= 0),
  add constraint plans_fallback_only_on_flex
    check (flex_fallback_after_seconds is null or service_tier = 'flex');
comment on column public.plans.service_tier is
  'OpenAI''s service tier for this plan''s model calls: default, or flex (Batch prices, slower, '
  'may answer 429 resource unavailable; the job then waits for capacity without counting a '
  'provider quota hit).';
comment on column public.plans.flex_fallback_after_seconds is
  'A flex plan''s job that has waited this long for flex capacity runs its next attempt on the '
  'default tier. Null: never (the job waits within its max age, then fails capacity_unavailable, '
  'refunded).';

-- jobs: what a wait is for, and the running attempt's reasoning -----------------------------------

alter table public.generation_jobs
  add column waiting_for text
    constraint generation_jobs_waiting_for_check check (waiting_for in ('provider', 'capacity')),
  add column capacity_wait_since timestamptz,
  add column thinking boolean not null default false,
  add column reasoning_tokens integer
    constraint generation_jobs_reasoning_tokens_check check (reasoning_tokens >= 0);
comment on column public.generation_jobs.waiting_for is
  'What the last requeue waits for: provider (a quota 429 or the closed provider gate) or '
  'capacity (flex had none). Meaningful while resume_at is ahead; cleared by a claim.';
comment on column public.generation_jobs.capacity_wait_since is
  'When the job first met no flex capacity (429 resource unavailable). Never cleared: the '
  'plan''s flex_fallback_after_seconds counts from it.';
comment on column public.generation_jobs.thinking is
  'The running attempt reports reasoning and has streamed no visible text yet (record_progress).';
comment on column public.generation_jobs.reasoning_tokens is
  'The running attempt''s reasoning tokens as the provider reported them so far (billed output, '
  'part of partial_tokens); null when none were reported.';

alter table public.generation_jobs
  drop constraint generation_jobs_failure_reason_check,
  add constraint generation_jobs_failure_reason_check check (failure_reason in (
    'model_refused', 'delivery_failed', 'publish_failed', 'provider_quota_exhausted',
    'lease_expired', 'max_age_exceeded', 'never_delivered', 'attempt_budget_exhausted',
    'provider_misconfigured', 'capacity_unavailable'
  ));
comment on constraint generation_jobs_failure_reason_check on public.generation_jobs is
  'The one list is lib/jobs.ts''s FAILURE_REASONS (test/unit/one-source.test.ts).';

-- start_job: the tier the attempt uses ------------------------------------------------------------

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
        waiting_for = null,
        started_at = p_now,
        partial_output = null,
        partial_tokens = 0,
        thinking = false,
        reasoning_tokens = null,
        progress_at = null,
        consumed = v_consumed,
        updated_at = p_now
    where j.id = p_job_id
      and ((j.status = 'queued' and (j.resume_at is null or j.resume_at <= p_now))
        or (j.status = 'running' and j.lease_expires_at <= p_now))
    returning j.*
  ), tier as (
    -- The plan's tier; a flex job that has waited for capacity for the plan's fallback time
    -- runs this attempt on the default tier.
    select s.id,
      case when p.service_tier = 'flex' and p.flex_fallback_after_seconds is not null
          and s.capacity_wait_since is not null
          and s.capacity_wait_since + make_interval(secs => p.flex_fallback_after_seconds) <= p_now
        then 'default' else p.service_tier end as service_tier
    from started s join public.plans p on p.id = s.plan_id
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select s.id, s.user_id, p_now,
      case when v_old.status = 'running' then 'reclaimed' else 'started' end,
      v_old.status, s.status,
      jsonb_build_object('attempt', s.attempts, 'service_tier', t.service_tier)
    from started s join tier t on t.id = s.id
  )
  select jsonb_build_object(
    'outcome', 'started',
    'job', to_jsonb(s) - 'request_hash',
    'max_output_tokens', p.max_output_tokens,
    'service_tier', t.service_tier,
    'flex_fallback_after_seconds', p.flex_fallback_after_seconds
  ) into v_result
  from started s join public.plans p on p.id = s.plan_id join tier t on t.id = s.id;
  if v_result is null then
    raise exception 'job % could not be claimed', p_job_id using errcode = 'P0001';
  end if;
  return v_result;
end
$$;
comment on function public.start_job(uuid, integer, timestamptz) is
  'Claim: queued (past resume_at) or running with an expired lease → running, attempts + 1, '
  'with the plan''s output bound and the service tier of this attempt (the plan''s; default once '
  'a flex job waited for capacity for the plan''s flex_fallback_after_seconds). A token plan''s '
  'job whose next attempt could take it past 2 × hold ends failed (attempt_budget_exhausted, '
  'capturing least(hold, consumed)) instead: budget_exhausted.';

-- requeue_job: a wait for flex capacity -----------------------------------------------------------

drop function public.requeue_job(uuid, integer, timestamptz, text, integer, integer, timestamptz,
  boolean, jsonb);

create function public.requeue_job(
  p_job_id uuid,
  p_attempt integer,
  p_resume_at timestamptz,
  p_error text default null,
  p_max_hits integer default 3,
  p_max_age_seconds integer default 10800,
  p_now timestamptz default now(),
  p_count_hit boolean default true,
  p_usage jsonb default null,
  p_capacity boolean default false
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

  -- No flex capacity is not a quota: it never counts a hit, whatever the caller says.
  v_hits := v_old.provider_quota_hits
    + case when p_count_hit and not p_capacity then 1 else 0 end;
  v_deadline := v_old.created_at + make_interval(secs => p_max_age_seconds);
  v_give_up := case
    when p_count_hit and not p_capacity and v_hits >= p_max_hits then 'hits'
    when p_now >= v_deadline then 'age'
    when p_resume_at > v_deadline then 'age'
  end;

  if v_give_up is not null then
    update public.generation_jobs j set provider_quota_hits = v_hits where j.id = p_job_id
    returning * into v_old;
    v_job := private.end_with_refund(
      v_old, 'failed',
      case when p_capacity then 'capacity_unavailable' else 'provider_quota_exhausted' end,
      p_error, 'gave_up', p_now,
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
        waiting_for = case when p_capacity then 'capacity' else 'provider' end,
        capacity_wait_since = case when p_capacity then coalesce(j.capacity_wait_since, p_now)
          else j.capacity_wait_since end,
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
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'resume_at', r.resume_at,
          'waiting_for', r.waiting_for), p_usage
      )
    from requeued r
  )
  select jsonb_build_object('outcome', 'requeued', 'job', to_jsonb(r) - 'request_hash') into v_result
  from requeued r;
  return v_result;
end
$$;
comment on function public.requeue_job(uuid, integer, timestamptz, text, integer, integer,
  timestamptz, boolean, jsonb, boolean) is
  'running under this claim → queued until p_resume_at after a provider quota hit (counted), a '
  'closed provider gate (p_count_hit false) or no flex capacity (p_capacity: never counted, '
  'waiting_for capacity), or failed when it gives up (hits or age; provider_quota_exhausted, or '
  'capacity_unavailable for a capacity wait; private.end_with_refund''s rule); the attempt''s '
  'usage goes in the event.';

revoke all on function public.requeue_job(uuid, integer, timestamptz, text, integer, integer,
  timestamptz, boolean, jsonb, boolean) from public, anon, authenticated;
grant execute on function public.requeue_job(uuid, integer, timestamptz, text, integer, integer,
  timestamptz, boolean, jsonb, boolean) to service_role;

-- record_progress: thinking -----------------------------------------------------------------------

drop function public.record_progress(uuid, integer, text, integer, timestamptz, integer);

create function public.record_progress(
  p_job_id uuid,
  p_attempt integer,
  p_partial_output text,
  p_completion_tokens integer,
  p_now timestamptz default now(),
  p_prompt_tokens integer default null,
  p_thinking boolean default false,
  p_reasoning_tokens integer default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_status text;
begin
  -- Guarded like complete_job: only the claim that is still running may write. Not a
  -- transition (the status does not change), so no event row: one a second would bury the
  -- history. What the attempt consumed is recorded when it ends.
  update public.generation_jobs j
  set partial_output = p_partial_output,
      partial_tokens = greatest(coalesce(p_completion_tokens, 0), 0),
      prompt_tokens = case when p_prompt_tokens is null or p_prompt_tokens < 0 then j.prompt_tokens
        else least(coalesce(j.prompt_tokens, p_prompt_tokens), p_prompt_tokens) end,
      thinking = coalesce(p_thinking, false),
      -- A count once reported is kept (a later write without one does not erase it).
      reasoning_tokens = case when p_reasoning_tokens is null or p_reasoning_tokens < 0
        then j.reasoning_tokens else p_reasoning_tokens end,
      progress_at = p_now,
      updated_at = p_now
  where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt;
  if found then
    return jsonb_build_object('outcome', 'recorded');
  end if;
  select j.status into v_status from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  -- Canceled, failed, succeeded, requeued or reclaimed: this attempt is no longer the job's.
  return jsonb_build_object('outcome', 'not_running', 'status', v_status);
end
$$;
comment on function public.record_progress(uuid, integer, text, integer, timestamptz, integer,
  boolean, integer) is
  'The running attempt''s output so far (p_completion_tokens includes its reasoning tokens: '
  'billed output), whether it is thinking (reasoning, no visible text yet) and the reasoning '
  'tokens reported so far, and (p_prompt_tokens) its prompt as the worker counts it, which '
  'lowers prompt_tokens (never raises it). recorded, or not_running (with the job''s status): '
  'the worker then cuts the model''s stream at once.';

revoke all on function public.record_progress(uuid, integer, text, integer, timestamptz, integer,
  boolean, integer) from public, anon, authenticated;
grant execute on function public.record_progress(uuid, integer, text, integer, timestamptz,
  integer, boolean, integer) to service_role;
