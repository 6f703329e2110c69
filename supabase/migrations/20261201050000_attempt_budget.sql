-- quota-jobs: a retry cannot double the bill.
--
-- A token plan's job holds one attempt's worst case (prompt + max_output_tokens) and captures at
-- most that. Its retries (a transient error or a timeout releases the attempt; a dead worker's
-- lease expires and the job is reclaimed) are paid by the operator, and without a bound a job
-- whose every attempt streams until the time budget cuts it would be billed to us again and
-- again. So the job's attempts may consume at most twice its hold in all: each attempt that did
-- not end the job adds what it consumed to generation_jobs.consumed, and no attempt starts that
-- could take the job past 2 × hold (the next attempt may cost a whole hold). Where that is
-- decided:
-- - release_job: an attempt released with usage that already brings the job to the bound (a
--   timeout or a 5xx after a long stream) ends the job `failed` (attempt_budget_exhausted) and
--   captures what that attempt consumed, up to the hold. Why not end it `succeeded` with its
--   partial output: the text was cut mid-answer by our time budget, not finished by the model,
--   and calling that a success would be dishonest; the provider billed those tokens for the
--   user's prompt, so the user pays them once (≤ the hold, what they agreed to at enqueue) and we
--   pay the attempts before it (< one hold).
-- - start_job: a reclaim adds the dead attempt's estimate (prompt + partial_tokens of its last
--   progress write: what SQL knows); when the next attempt could cross the bound, the claim is
--   refused with `budget_exhausted` and the job ends `failed` capturing nothing (the attempts
--   died on our side: crashed or lost workers).
-- Job plans are unchanged: their retries are bounded by the provider-quota hits and the max age.
-- requeue_job is not changed: it follows a 429, which bills nothing (usage 0 and 0).

alter table public.generation_jobs
  add column consumed integer not null default 0 check (consumed >= 0);
comment on column public.generation_jobs.consumed is
  'Tokens the job''s attempts that did not end it consumed (released attempts'' usage, reclaimed '
  'attempts'' last progress). A token plan''s job never starts an attempt that could take it past 2 × hold.';

alter table public.generation_jobs
  drop constraint generation_jobs_failure_reason_check,
  add constraint generation_jobs_failure_reason_check check (failure_reason in (
    'model_refused', 'delivery_failed', 'publish_failed', 'provider_quota_exhausted',
    'lease_expired', 'max_age_exceeded', 'never_delivered', 'attempt_budget_exhausted'
  ));

create function private.usage_tokens(p_usage jsonb) returns integer
language sql immutable security invoker set search_path = ''
as $$
  select case when p_usage is null then 0 else
    greatest(coalesce((p_usage ->> 'prompt_tokens')::integer, 0), 0)
    + greatest(coalesce((p_usage ->> 'completion_tokens')::integer, 0), 0) end
$$;
comment on function private.usage_tokens(jsonb) is
  'prompt_tokens + completion_tokens of an attempt''s usage (0 without one).';

-- start: refuse an attempt that could cross 2 × hold ---------------------------------------------
-- As in 20261201020000_streamed_attempts.sql, plus the reclaim estimate and the bound.

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

  -- A reclaim: the dead attempt consumed at least its prompt and what it last recorded.
  v_consumed := v_old.consumed + case when v_old.status = 'running'
    then coalesce(v_old.prompt_tokens, 0) + v_old.partial_tokens else 0 end;
  if v_old.meter = 'tokens' and v_consumed + v_old.hold > 2 * v_old.hold then
    update public.generation_jobs j set consumed = v_consumed where j.id = p_job_id
    returning * into v_old;
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
  'nothing captured) instead: budget_exhausted.';

-- release: count the attempt; at the bound, fail and capture it ----------------------------------
-- As in 20261201020000_streamed_attempts.sql, plus consumed and the bound.

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
    update public.generation_jobs j set consumed = j.consumed + v_tokens where j.id = p_job_id
    returning * into v_old;
    return jsonb_build_object('outcome', 'budget_exhausted', 'job', private.job_json(
      private.end_with_refund(v_old, 'failed', 'attempt_budget_exhausted', p_error, 'failed', p_now,
        private.with_usage(jsonb_build_object('attempt', p_attempt,
          'reason', 'attempt_budget_exhausted', 'consumed', v_old.consumed), p_usage),
        v_tokens)));
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
  '(attempt_budget_exhausted) capturing this attempt''s tokens up to the hold: budget_exhausted.';

revoke all on function private.usage_tokens(jsonb) from public, anon, authenticated;
grant execute on function private.usage_tokens(jsonb) to service_role;
