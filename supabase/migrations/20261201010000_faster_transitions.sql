-- quota-jobs: the same transitions, fewer statements inside the server. Every guard, outcome,
-- event row, refund and returned shape is what 20261130040100_transitions.sql defines; only how
-- much work PostgreSQL does per call changes.
--
-- Where the time went (measured per call, one connection; see docs/BENCHMARKS.md):
-- - The final-is-final trigger ran a PL/pgSQL function on every update, although it can only
--   refuse an update of a row that is already final. A WHEN clause on OLD.status keeps the
--   guarantee and skips the call on every other update.
-- - The small helpers (job_json, period_start, usage_object, period_end) are `sql` functions
--   with `set search_path`, which PostgreSQL never inlines: each call was planned afresh. The
--   PL/pgSQL helpers (log_event, refund, end_with_refund) each paid a function call, a
--   search_path change and its own executor start. On the hot paths their bodies are now
--   written in place, and the writes of one transition (job row, counter, event row) are one
--   statement (data-modifying CTEs), so a transition costs one or two statements, not six to ten.
--   The helpers stay: the sweeper and the reads still use them, and their rare paths
--   (replay, refusals) are unchanged.
--
-- end_with_refund stays the only function that ends a job failed or canceled: it is now one
-- statement (end the row, refund the counter, append the event), and fail_job, cancel_job and
-- requeue_job's give-up call it as before.

-- final is final, without a call on the common path -------------------------------------------

create or replace trigger generation_jobs_final_is_final
  before update on public.generation_jobs
  for each row
  when (old.status in ('succeeded', 'failed', 'canceled'))
  execute function private.forbid_changing_final_jobs();

-- ending with a refund: one statement ----------------------------------------------------------

create or replace function private.end_with_refund(
  p_job public.generation_jobs,
  p_status text,
  p_reason text,
  p_error text,
  p_event text,
  p_now timestamptz,
  p_detail jsonb default '{}'::jsonb
) returns public.generation_jobs
language plpgsql security invoker set search_path = ''
as $$
declare
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
        updated_at = p_now
    where j.id = p_job.id and j.status in ('queued', 'running')
    returning j as job, j.id, j.user_id, j.period_start, j.status
  ), refunded as (
    update public.quota_usage q
    set units_used = q.units_used - 1, updated_at = p_now
    from ended e
    where q.user_id = e.user_id and q.period_start = e.period_start and q.units_used > 0
    returning 1
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select e.id, e.user_id, p_now, p_event, p_job.status, e.status, p_detail
    from ended e
  )
  select e.job, exists (select from refunded) as refunded into v_ended
  from ended e;
  if not found then
    raise exception 'job % is no longer active', p_job.id using errcode = 'P0001';
  end if;
  if not v_ended.refunded then
    -- A reserved unit with no counter to return it to is drift: refuse the whole transition
    -- (the caller sees an error and retries) rather than end the job without its refund.
    raise exception 'no reserved unit to refund for job % (user %, period %)',
      p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
  end if;
  return v_ended.job;
end
$$;

-- enqueue -------------------------------------------------------------------------------------

create or replace function public.enqueue_job(
  p_user_id uuid,
  p_prompt text,
  p_idempotency_key text default null,
  p_now timestamptz default now()
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
  v_result jsonb;
begin
  if p_prompt is null or p_prompt !~ '[^[:space:]]' or char_length(p_prompt) > 8000 then
    return jsonb_build_object('outcome', 'invalid_prompt');
  end if;
  if p_idempotency_key is not null and char_length(p_idempotency_key) not between 1 and 255 then
    return jsonb_build_object('outcome', 'invalid_idempotency_key');
  end if;
  v_hash := encode(sha256(convert_to(p_prompt, 'UTF8')), 'hex');

  -- One user's enqueues take turns (other users are not affected): the idempotency lookup,
  -- the active-job count and the reservation see each other's effects, also across a period
  -- boundary where two requests would otherwise lock two different counter rows. Its own
  -- statement: the reads below must take their snapshot after the lock is granted.
  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  -- private.period_start in place, the counter and the active jobs: one
  -- statement. The plan's fields are read one by one, into the plan row the refusals report.
  select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, b.period_start,
    (select q.units_used from public.quota_usage q
     where q.user_id = p_user_id and q.period_start = b.period_start),
    (select count(*) from public.generation_jobs j
     where j.user_id = p_user_id and j.status in ('queued', 'running'))
  into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
    v_period_start, v_used, v_active
  from public.plans p
  cross join lateral (
    select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
  ) b
  -- private.plan_for stays a call: it alone may read auth.users (an anonymous sign-in gets the
  -- plan marked for anonymous users, or none), which this function's caller cannot.
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

  if coalesce(v_used, 0) >= v_plan.units_per_period then
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
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

  -- Reserve, insert and log in one statement; the job and its event exist only if the
  -- guarded reservation took a unit.
  with reserved as (
    insert into public.quota_usage as q (user_id, period_start, units_used, updated_at)
    values (p_user_id, v_period_start, 1, p_now)
    on conflict (user_id, period_start) do update
      set units_used = q.units_used + 1, updated_at = p_now
      where q.units_used < v_plan.units_per_period
    returning q.units_used
  ), inserted as (
    insert into public.generation_jobs (
      user_id, status, prompt, request_hash, idempotency_key, plan_id, period_start,
      created_at, queued_at, updated_at
    )
    select p_user_id, 'queued', p_prompt, v_hash, p_idempotency_key, v_plan.id, v_period_start,
      p_now, p_now, p_now
    from reserved
    returning *
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select i.id, i.user_id, p_now, 'enqueued', null, i.status, jsonb_build_object('plan', v_plan.id)
    from inserted i
  )
  -- private.job_json and private.usage_object, in place.
  select jsonb_build_object(
    'outcome', 'enqueued',
    'job', to_jsonb(i) - 'request_hash',
    'usage', jsonb_build_object(
      'plan', v_plan.id,
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
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;
  return v_result;
end
$$;

-- start (claim) -------------------------------------------------------------------------------

create or replace function public.start_job(
  p_job_id uuid,
  p_lease_seconds integer default 90,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
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

  with started as (
    update public.generation_jobs j
    set status = 'running',
        attempts = j.attempts + 1,
        lease_expires_at = p_now + make_interval(secs => p_lease_seconds),
        resume_at = null,
        started_at = p_now,
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
  select jsonb_build_object('outcome', 'started', 'job', to_jsonb(s) - 'request_hash') into v_result
  from started s;
  if v_result is null then
    -- Unreachable: the row is locked and the checks above are the update's guard.
    raise exception 'job % could not be claimed', p_job_id using errcode = 'P0001';
  end if;
  return v_result;
end
$$;

-- complete ------------------------------------------------------------------------------------

create or replace function public.complete_job(
  p_job_id uuid,
  p_attempt integer,
  p_output text,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
  v_result jsonb;
begin
  with completed as (
    update public.generation_jobs j
    set status = 'succeeded',
        output = p_output,
        lease_expires_at = null,
        finished_at = p_now,
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select c.id, c.user_id, p_now, 'completed', 'running', c.status,
      jsonb_build_object('attempt', p_attempt)
    from completed c
  )
  select jsonb_build_object('outcome', 'completed', 'job', to_jsonb(c) - 'request_hash') into v_result
  from completed c;
  if v_result is not null then
    return v_result;
  end if;
  select * into v_job from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_job));
end
$$;

-- release after a transient error -------------------------------------------------------------

create or replace function public.release_job(
  p_job_id uuid,
  p_attempt integer,
  p_error text default null,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
  v_result jsonb;
begin
  with released as (
    update public.generation_jobs j
    set status = 'queued',
        lease_expires_at = null,
        queued_at = p_now,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'released', 'running', r.status,
      jsonb_build_object('attempt', p_attempt)
    from released r
  )
  select jsonb_build_object('outcome', 'released', 'job', to_jsonb(r) - 'request_hash') into v_result
  from released r;
  if v_result is not null then
    return v_result;
  end if;
  select * into v_job from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_job));
end
$$;

-- requeue after a provider quota hit ----------------------------------------------------------

create or replace function public.requeue_job(
  p_job_id uuid,
  p_attempt integer,
  p_resume_at timestamptz,
  p_error text default null,
  p_max_hits integer default 3,
  p_max_age_seconds integer default 10800,
  p_now timestamptz default now(),
  p_count_hit boolean default true
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

  -- Counted, and given up by hits OR age: a requeue that counts nothing is indistinguishable
  -- from the first one, and a job can wait on a provider for days. A worker that finds the
  -- shared provider gate closed defers without a hit: only the provider's own refusal counts,
  -- or the give-up limit would be reached by waiting alone.
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
      jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'by', v_give_up)
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
        publish_seq = j.publish_seq + 1,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'requeued', 'running', r.status,
      jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'resume_at', r.resume_at)
    from requeued r
  )
  select jsonb_build_object('outcome', 'requeued', 'job', to_jsonb(r) - 'request_hash') into v_result
  from requeued r;
  return v_result;
end
$$;

-- fail ----------------------------------------------------------------------------------------

create or replace function public.fail_job(
  p_job_id uuid,
  p_reason text,
  p_error text default null,
  p_attempt integer default null,
  p_now timestamptz default now()
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
  if p_attempt is not null and (v_old.status <> 'running' or v_old.attempts <> p_attempt) then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;
  return jsonb_build_object('outcome', 'failed', 'job', to_jsonb(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    jsonb_build_object('attempt', p_attempt, 'reason', p_reason)
  )) - 'request_hash');
end
$$;

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
  return jsonb_build_object('outcome', 'canceled', 'job', to_jsonb(private.end_with_refund(
    v_old, 'canceled', null, null, 'canceled', p_now
  )) - 'request_hash');
end
$$;
