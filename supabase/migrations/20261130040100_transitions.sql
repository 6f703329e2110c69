-- quota-jobs: the job state machine. One function per transition; each is one transaction and
-- one round trip, guarded by the state it expects, takes `now` as a parameter, appends to
-- job_events, and returns jsonb with an `outcome` naming what happened.
--
-- Why the refund lives inside the transition: when "end the job" and "give the unit back" are
-- two calls, two callers that both notice a failure (the worker, the failure callback, the
-- sweeper, a cancel) can both refund, and a caller that dies between the two calls refunds
-- nobody (docs/DESIGN.md#refunds-scattered-across-callers). Here the only way to end a job failed or canceled is a guarded update
-- that sets refunded_at, and the decrement runs in the same transaction; the table constraints
-- make refunded_at and failed/canceled inseparable, and the final-is-final trigger makes the
-- update impossible to repeat.

-- helpers -------------------------------------------------------------------------------------

create function private.job_json(j public.generation_jobs) returns jsonb
language sql immutable security invoker set search_path = ''
as $$
  select to_jsonb(j) - 'request_hash'
$$;
comment on function private.job_json(public.generation_jobs) is
  'A job as the functions return it (every column but the prompt hash).';

-- The helpers called once per transition are plpgsql rather than sql: PL/pgSQL caches their
-- plans, while a non-inlined sql function is planned on every call (measured: the event insert
-- cost 0.12-0.18 ms through a sql wrapper around a 0.05 ms insert; see BENCHMARKS.md).
create function private.plan_for(p_user_id uuid) returns public.plans
language plpgsql stable security invoker set search_path = ''
as $$
declare
  v_plan public.plans;
begin
  select p.* into v_plan
  from public.plans p
  where p.id = coalesce(
    (select up.plan_id from public.user_plans up where up.user_id = p_user_id),
    'free'
  );
  return v_plan;
end
$$;
comment on function private.plan_for(uuid) is 'The plan a user is on (free without a user_plans row).';

create function private.period_start(p_period text, p_now timestamptz) returns timestamptz
language sql immutable security invoker set search_path = ''
as $$
  select date_trunc(p_period, p_now at time zone 'UTC') at time zone 'UTC'
$$;
comment on function private.period_start(text, timestamptz) is
  'Start of the UTC day or month that contains p_now (independent of the session time zone).';

create function private.period_end(p_period text, p_start timestamptz) returns timestamptz
language sql immutable security invoker set search_path = ''
as $$
  select ((p_start at time zone 'UTC') + ('1 ' || p_period)::interval) at time zone 'UTC'
$$;
comment on function private.period_end(text, timestamptz) is
  'When the period that starts at p_start resets.';

create function private.usage_object(
  p_plan public.plans,
  p_period_start timestamptz,
  p_used integer,
  p_active bigint
) returns jsonb
language sql immutable security invoker set search_path = ''
as $$
  select jsonb_build_object(
    'plan', p_plan.id,
    'used', p_used,
    'limit', p_plan.units_per_period,
    'period_start', p_period_start,
    'resets_at', private.period_end(p_plan.period, p_period_start),
    'active', p_active,
    'max_active', p_plan.max_active_jobs
  )
$$;
comment on function private.usage_object(public.plans, timestamptz, integer, bigint) is
  'A usage report from values the caller already holds (enqueue knows them: no second read).';

create function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamptz) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  with bounds as (
    select private.period_start(p_plan.period, p_now) as period_start
  )
  select private.usage_object(
    p_plan,
    b.period_start,
    coalesce((
      select q.units_used from public.quota_usage q
      where q.user_id = p_user_id and q.period_start = b.period_start
    ), 0),
    (
      select count(*) from public.generation_jobs j
      where j.user_id = p_user_id and j.status in ('queued', 'running')
    )
  )
  from bounds b
$$;
comment on function private.usage_json(uuid, public.plans, timestamptz) is
  'A user''s usage in the period containing p_now, as the API reports it.';

create function private.log_event(
  p_job public.generation_jobs,
  p_event text,
  p_from_status text,
  p_now timestamptz,
  p_detail jsonb default '{}'::jsonb
) returns void
language plpgsql security invoker set search_path = ''
as $$
begin
  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  values (p_job.id, p_job.user_id, p_now, p_event, p_from_status, p_job.status, p_detail);
end
$$;
comment on function private.log_event(public.generation_jobs, text, text, timestamptz, jsonb) is
  'Appends one transition to job_events.';

create function private.refund(p_job public.generation_jobs, p_now timestamptz) returns void
language plpgsql security invoker set search_path = ''
as $$
begin
  update public.quota_usage q
  set units_used = q.units_used - 1, updated_at = p_now
  where q.user_id = p_job.user_id and q.period_start = p_job.period_start and q.units_used > 0;
  if not found then
    -- A reserved unit with no counter to return it to is drift: refuse the whole transition
    -- (the caller sees an error and retries) rather than end the job without its refund.
    raise exception 'no reserved unit to refund for job % (user %, period %)',
      p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
  end if;
end
$$;
comment on function private.refund(public.generation_jobs, timestamptz) is
  'Returns a job''s unit to the period it was reserved from. Called only by transitions that '
  'have just ended the job failed or canceled, in the same transaction.';

create function private.end_with_refund(
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
  v_job public.generation_jobs;
begin
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
  returning * into v_job;
  if not found then
    raise exception 'job % is no longer active', p_job.id using errcode = 'P0001';
  end if;
  perform private.refund(v_job, p_now);
  perform private.log_event(v_job, p_event, p_job.status, p_now, p_detail);
  return v_job;
end
$$;
comment on function private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb) is
  'Ends a locked, active job as failed or canceled and refunds its unit: the only way to do either.';

-- enqueue -------------------------------------------------------------------------------------

create function public.enqueue_job(
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
  -- boundary where two requests would otherwise lock two different counter rows.
  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  v_plan := private.plan_for(p_user_id);
  v_period_start := private.period_start(v_plan.period, p_now);

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

  select q.units_used into v_used from public.quota_usage q
  where q.user_id = p_user_id and q.period_start = v_period_start;
  if coalesce(v_used, 0) >= v_plan.units_per_period then
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;

  select count(*) into v_active from public.generation_jobs j
  where j.user_id = p_user_id and j.status in ('queued', 'running');
  if v_active >= v_plan.max_active_jobs then
    return jsonb_build_object(
      'outcome', 'too_many_active_jobs',
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;

  insert into public.quota_usage as q (user_id, period_start, units_used, updated_at)
  values (p_user_id, v_period_start, 1, p_now)
  on conflict (user_id, period_start) do update
    set units_used = q.units_used + 1, updated_at = p_now
    where q.units_used < v_plan.units_per_period
  returning q.units_used into v_used;
  if not found then
    -- Unreachable while the lock above is held; kept so the limit holds even without it.
    return jsonb_build_object(
      'outcome', 'quota_exceeded',
      'resets_at', private.period_end(v_plan.period, v_period_start),
      'usage', private.usage_json(p_user_id, v_plan, p_now)
    );
  end if;

  insert into public.generation_jobs (
    user_id, status, prompt, request_hash, idempotency_key, plan_id, period_start,
    created_at, queued_at, updated_at
  ) values (
    p_user_id, 'queued', p_prompt, v_hash, p_idempotency_key, v_plan.id, v_period_start,
    p_now, p_now, p_now
  )
  returning * into v_job;
  perform private.log_event(v_job, 'enqueued', null, p_now, jsonb_build_object('plan', v_plan.id));

  return jsonb_build_object(
    'outcome', 'enqueued',
    'job', private.job_json(v_job),
    'usage', private.usage_object(v_plan, v_period_start, v_used, v_active + 1)
  );
end
$$;
comment on function public.enqueue_job(uuid, text, text, timestamptz) is
  'Reserves one unit, checks the active-job limit and the idempotency key, and inserts a queued '
  'job, atomically. Outcomes: enqueued, replayed, idempotency_key_reused, quota_exceeded, '
  'too_many_active_jobs, invalid_prompt, invalid_idempotency_key. A refusal reserves nothing.';

-- start (claim) -------------------------------------------------------------------------------

create function public.start_job(
  p_job_id uuid,
  p_lease_seconds integer default 90,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_old public.generation_jobs;
  v_job public.generation_jobs;
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
  returning * into v_job;
  perform private.log_event(
    v_job,
    case when v_old.status = 'running' then 'reclaimed' else 'started' end,
    v_old.status,
    p_now,
    jsonb_build_object('attempt', v_job.attempts)
  );
  return jsonb_build_object('outcome', 'started', 'job', private.job_json(v_job));
end
$$;
comment on function public.start_job(uuid, integer, timestamptz) is
  'Claims a job for one worker: queued (and past resume_at) or running with an expired lease '
  'becomes running with a new lease and attempts + 1. Outcomes: started, already_running, '
  'not_ready, already_final, not_found. Only "started" may call the model.';

-- complete ------------------------------------------------------------------------------------

create function public.complete_job(
  p_job_id uuid,
  p_attempt integer,
  p_output text,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
begin
  update public.generation_jobs j
  set status = 'succeeded',
      output = p_output,
      lease_expires_at = null,
      finished_at = p_now,
      updated_at = p_now
  where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
  returning * into v_job;
  if found then
    perform private.log_event(v_job, 'completed', 'running', p_now, jsonb_build_object('attempt', p_attempt));
    return jsonb_build_object('outcome', 'completed', 'job', private.job_json(v_job));
  end if;
  select * into v_job from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_job));
end
$$;
comment on function public.complete_job(uuid, integer, text, timestamptz) is
  'Stores the output, only if the job is still running under this claim. Outcomes: completed, '
  'not_running (canceled, failed or reclaimed meanwhile: the late output is dropped), not_found.';

-- requeue after a provider quota hit ----------------------------------------------------------

create function public.requeue_job(
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
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status <> 'running' or v_old.attempts <> p_attempt then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;

  -- Counted, and given up by hits OR age (docs/DESIGN.md#a-requeue-that-counts-nothing): a requeue that counts nothing is
  -- indistinguishable from the first one, and a job can wait on a provider for days.
  -- A worker that finds the shared provider gate closed defers without a hit: only the
  -- provider's own refusal counts, or the give-up limit would be reached by waiting alone.
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
  returning * into v_job;
  perform private.log_event(
    v_job, 'requeued', 'running', p_now,
    jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'resume_at', v_job.resume_at)
  );
  return jsonb_build_object('outcome', 'requeued', 'job', private.job_json(v_job));
end
$$;
comment on function public.requeue_job(uuid, integer, timestamptz, text, integer, integer, timestamptz, boolean) is
  'After a provider quota error: counts the hit and puts the job back in the queue until '
  'p_resume_at, or gives up (failed + refund) when hits reach p_max_hits or the job would outlive '
  'p_max_age_seconds. With p_count_hit false (the shared provider gate was closed, the provider '
  'was not called) no hit is counted. Outcomes: requeued (publish a new message: publish_seq '
  'grew), gave_up, not_running, not_found.';

-- release after a transient error -------------------------------------------------------------

create function public.release_job(
  p_job_id uuid,
  p_attempt integer,
  p_error text default null,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
begin
  update public.generation_jobs j
  set status = 'queued',
      lease_expires_at = null,
      queued_at = p_now,
      last_error = coalesce(p_error, j.last_error),
      updated_at = p_now
  where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
  returning * into v_job;
  if found then
    perform private.log_event(v_job, 'released', 'running', p_now, jsonb_build_object('attempt', p_attempt));
    return jsonb_build_object('outcome', 'released', 'job', private.job_json(v_job));
  end if;
  select * into v_job from public.generation_jobs j where j.id = p_job_id;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_job));
end
$$;
comment on function public.release_job(uuid, integer, text, timestamptz) is
  'Gives a claim back after a transient error (timeout, connection, 5xx) so the queue''s retry can '
  'claim it again. Counts no provider quota hit. Outcomes: released, not_running, not_found.';

-- fail ----------------------------------------------------------------------------------------

create function public.fail_job(
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
  v_job public.generation_jobs;
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
  v_job := private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    jsonb_build_object('attempt', p_attempt, 'reason', p_reason)
  );
  return jsonb_build_object('outcome', 'failed', 'job', private.job_json(v_job));
end
$$;
comment on function public.fail_job(uuid, text, text, integer, timestamptz) is
  'Ends an active job as failed and refunds its unit, once. With p_attempt, only the claim that '
  'holds the job may fail it (the worker); without, any active job (failure callback, publish '
  'failure). Outcomes: failed, already_final, not_running, not_found.';

-- cancel --------------------------------------------------------------------------------------

create function public.cancel_job(
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
  v_job := private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now);
  return jsonb_build_object('outcome', 'canceled', 'job', private.job_json(v_job));
end
$$;
comment on function public.cancel_job(uuid, uuid, timestamptz) is
  'The owner cancels an active job; its unit is refunded in the same transaction. Another user''s '
  'job is not_found, exactly like a missing one. Outcomes: canceled, already_finished, not_found.';

-- sweep ---------------------------------------------------------------------------------------

create function private.sweep_one(
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
  'One locked stale job: republished (queued, message lost) or failed with its refund.';

create function public.sweep_jobs(
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
  v_max_age_before timestamptz := p_now - make_interval(secs => p_max_age_seconds);
  v_lease_before timestamptz := p_now - make_interval(secs => p_lease_grace_seconds);
  v_queued_before timestamptz := p_now - make_interval(secs => p_undelivered_after_seconds);
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
    where j.status in ('queued', 'running') and j.created_at < v_max_age_before
    order by j.created_at
    limit p_batch_size
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_failed := v_failed || (private.sweep_one(v_old, 'max_age_exceeded', p_now) -> 'failed');
  end loop;

  for v_old in
    select j.* from public.generation_jobs j
    where j.status = 'running' and j.lease_expires_at < v_lease_before
    order by j.lease_expires_at
    limit greatest(p_batch_size - v_seen, 0)
    for update skip locked
  loop
    v_seen := v_seen + 1;
    v_failed := v_failed || (private.sweep_one(v_old, 'lease_expired', p_now) -> 'failed');
  end loop;

  for v_old in
    select j.* from public.generation_jobs j
    where j.status = 'queued' and coalesce(j.resume_at, j.queued_at) < v_queued_before
    order by coalesce(j.resume_at, j.queued_at)
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

-- reads ---------------------------------------------------------------------------------------

create function public.get_job(p_job_id uuid, p_user_id uuid) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  select coalesce(
    (select jsonb_build_object('outcome', 'found', 'job', private.job_json(j))
     from public.generation_jobs j where j.id = p_job_id and j.user_id = p_user_id),
    jsonb_build_object('outcome', 'not_found')
  )
$$;
comment on function public.get_job(uuid, uuid) is
  'A job for its owner; another user''s job is not_found, exactly like a missing one.';

create function public.list_jobs(
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
      (select jsonb_agg(private.job_json(p.job) order by p.rn) from page p, lim where p.rn <= lim.n),
      '[]'::jsonb
    ),
    'has_more', (select count(*) from page) > (select n from lim)
  )
$$;
comment on function public.list_jobs(uuid, integer, timestamptz, uuid) is
  'A user''s jobs, newest first, keyset-paginated on (created_at, id); at most 100 a page.';

create function public.get_usage(p_user_id uuid, p_now timestamptz default now()) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  select jsonb_build_object('outcome', 'usage', 'usage', private.usage_json(p_user_id, private.plan_for(p_user_id), p_now))
$$;
comment on function public.get_usage(uuid, timestamptz) is
  'A user''s plan, units used and limit in the current period, when it resets, active jobs.';

-- grants --------------------------------------------------------------------------------------
-- Supabase grants execute on new functions to anon and authenticated by default: take it back.
-- The API calls these with the service role only; users never call them directly.

revoke execute on all functions in schema public from public, anon, authenticated;
revoke execute on all functions in schema private from public, anon, authenticated;
grant execute on all functions in schema public to service_role;
grant execute on all functions in schema private to service_role;
