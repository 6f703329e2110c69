-- quota-jobs: streamed, bounded model attempts whose spend stops when the job stops being ours.
--
-- The attack this closes: a free user enqueues a slow prompt, waits for `running`, cancels.
-- The unit comes back at once (cancel_job's refund), while a model call that nobody listens to
-- any more runs to its end and is paid for; repeated, that is an unbounded provider bill for
-- one unit a day. Now
-- - every call is bounded by the plan's `max_output_tokens` (start_job hands it to the worker);
-- - the worker streams, and writes its progress through record_progress at most once a second;
--   the first write that finds the job no longer running under its claim (a cancel, the
--   sweeper, the failure callback) tells it to cut the stream, so a canceled attempt costs at
--   most about one progress interval of tokens;
-- - what each attempt consumed is in job_events: in the detail of the transition that ended the
--   attempt (complete, release, requeue, fail take a `p_usage` argument), or, when someone else
--   ended the job, in an insert-only `attempt_usage` event (a final job cannot be updated and
--   job_events is append-only, so the usage is a new row, never an edit).
-- No guard, outcome, refund or state change of an existing transition changes here.

-- the bound --------------------------------------------------------------------------------------

alter table public.plans
  add column max_output_tokens integer not null default 512 check (max_output_tokens >= 1);
comment on column public.plans.max_output_tokens is
  'The most completion tokens one model attempt may produce (sent as max_completion_tokens).';
update public.plans set max_output_tokens = 2048 where id = 'pro';

-- progress ---------------------------------------------------------------------------------------

alter table public.generation_jobs
  add column partial_output text,
  add column partial_tokens integer not null default 0 check (partial_tokens >= 0),
  add column progress_at timestamptz;
comment on column public.generation_jobs.partial_output is
  'The running attempt''s output so far, written by record_progress; the API shows it only while running.';
comment on column public.generation_jobs.partial_tokens is
  'Completion tokens the running attempt has streamed so far (as counted by the worker).';
comment on column public.generation_jobs.progress_at is
  'When the running attempt last recorded its progress.';

-- start: the claim carries the bound -------------------------------------------------------------
-- As in 20261201010000_faster_transitions.sql, plus: a new claim starts with no partial output,
-- and the result has a top-level `max_output_tokens` (the job's plan's bound) beside `job`.

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
        partial_output = null,
        partial_tokens = 0,
        progress_at = null,
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
    -- Unreachable: the row is locked and the checks above are the update's guard.
    raise exception 'job % could not be claimed', p_job_id using errcode = 'P0001';
  end if;
  return v_result;
end
$$;

-- record_progress ----------------------------------------------------------------------------------

create function public.record_progress(
  p_job_id uuid,
  p_attempt integer,
  p_partial_output text,
  p_completion_tokens integer,
  p_now timestamptz default now()
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
comment on function public.record_progress(uuid, integer, text, integer, timestamptz) is
  'The running attempt''s output so far. recorded, or not_running (with the job''s status): '
  'the worker then cuts the model''s stream at once.';

-- usage in the ending transition -------------------------------------------------------------------
-- complete, release, requeue and fail take `p_usage` (what the attempt consumed:
-- {"prompt_tokens", "completion_tokens", "source"}) and put it in their event's detail as
-- `usage`. Default null: no usage key, the event as before. The signature changes, so the old
-- functions are dropped (an overload would make named calls ambiguous).

create or replace function private.with_usage(p_detail jsonb, p_usage jsonb) returns jsonb
language sql immutable security invoker set search_path = ''
as $$
  select case when p_usage is null then p_detail else p_detail || jsonb_build_object('usage', p_usage) end
$$;
comment on function private.with_usage(jsonb, jsonb) is
  'An event detail with the attempt''s usage added under `usage` (unchanged without one).';

drop function public.complete_job(uuid, integer, text, timestamptz);
create function public.complete_job(
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
begin
  with completed as (
    update public.generation_jobs j
    set status = 'succeeded',
        output = p_output,
        partial_output = null,
        lease_expires_at = null,
        finished_at = p_now,
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select c.id, c.user_id, p_now, 'completed', 'running', c.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt), p_usage)
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
comment on function public.complete_job(uuid, integer, text, timestamptz, jsonb) is
  'running under this claim → succeeded with the output; the attempt''s usage goes in the event.';

drop function public.release_job(uuid, integer, text, timestamptz);
create function public.release_job(
  p_job_id uuid,
  p_attempt integer,
  p_error text default null,
  p_now timestamptz default now(),
  p_usage jsonb default null
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
        partial_output = null,
        last_error = coalesce(p_error, j.last_error),
        updated_at = p_now
    where j.id = p_job_id and j.status = 'running' and j.attempts = p_attempt
    returning j.*
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select r.id, r.user_id, p_now, 'released', 'running', r.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt), p_usage)
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
comment on function public.release_job(uuid, integer, text, timestamptz, jsonb) is
  'running under this claim → queued after a transient error; the attempt''s usage goes in the event.';

drop function public.requeue_job(uuid, integer, timestamptz, text, integer, integer, timestamptz, boolean);
create function public.requeue_job(
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

  -- The give-up rule of 20261130040100_transitions.sql, unchanged.
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
      )
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
  'running under this claim → queued until p_resume_at after a provider quota hit, or failed + '
  'refund when it gives up (hits or age); the attempt''s usage goes in the event.';

drop function public.fail_job(uuid, text, text, integer, timestamptz);
create function public.fail_job(
  p_job_id uuid,
  p_reason text,
  p_error text default null,
  p_attempt integer default null,
  p_now timestamptz default now(),
  p_usage jsonb default null
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
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage)
  )) - 'request_hash');
end
$$;
comment on function public.fail_job(uuid, text, text, integer, timestamptz, jsonb) is
  'queued or running (with p_attempt: only that claim) → failed + refund; the attempt''s usage '
  'goes in the event.';

-- usage of an attempt someone else ended -------------------------------------------------------------

create function public.record_attempt_usage(
  p_job_id uuid,
  p_attempt integer,
  p_usage jsonb,
  p_now timestamptz default now()
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_job public.generation_jobs;
begin
  -- Only appends: the job may be final (the trigger forbids touching it) and job_events is
  -- append-only. At most one usage record per attempt, whoever wrote it, so a retried call
  -- cannot count an attempt twice. The row lock orders concurrent calls for one job.
  select * into v_job from public.generation_jobs j where j.id = p_job_id for share;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if p_attempt is null or p_attempt < 1 or p_attempt > v_job.attempts then
    return jsonb_build_object('outcome', 'no_such_attempt');
  end if;
  if exists (
    select from public.job_events e
    where e.job_id = p_job_id and e.detail ? 'usage' and (e.detail ->> 'attempt')::integer = p_attempt
  ) then
    return jsonb_build_object('outcome', 'already_recorded');
  end if;
  insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
  values (v_job.id, v_job.user_id, p_now, 'attempt_usage', v_job.status, v_job.status,
    jsonb_build_object('attempt', p_attempt, 'usage', p_usage));
  return jsonb_build_object('outcome', 'recorded');
end
$$;
comment on function public.record_attempt_usage(uuid, integer, jsonb, timestamptz) is
  'What an attempt consumed when its own transition was refused (someone else ended or reclaimed '
  'the job): one attempt_usage event, insert only. recorded, already_recorded, no_such_attempt, not_found.';

-- grants -------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but
-- the service role; said again here so the intent is in the file that makes them.

revoke all on function public.record_progress(uuid, integer, text, integer, timestamptz),
  public.record_attempt_usage(uuid, integer, jsonb, timestamptz),
  public.complete_job(uuid, integer, text, timestamptz, jsonb),
  public.release_job(uuid, integer, text, timestamptz, jsonb),
  public.requeue_job(uuid, integer, timestamptz, text, integer, integer, timestamptz, boolean, jsonb),
  public.fail_job(uuid, text, text, integer, timestamptz, jsonb),
  private.with_usage(jsonb, jsonb)
  from public, anon, authenticated;
grant execute on function public.record_progress(uuid, integer, text, integer, timestamptz),
  public.record_attempt_usage(uuid, integer, jsonb, timestamptz),
  public.complete_job(uuid, integer, text, timestamptz, jsonb),
  public.release_job(uuid, integer, text, timestamptz, jsonb),
  public.requeue_job(uuid, integer, timestamptz, text, integer, integer, timestamptz, boolean, jsonb),
  public.fail_job(uuid, text, text, integer, timestamptz, jsonb),
  private.with_usage(jsonb, jsonb)
  to service_role;
