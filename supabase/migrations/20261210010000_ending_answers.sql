-- quota-jobs: a job's ending answers with the job's state, not its whole row.
--
-- complete_job's `completed` and fail_job's `failed` answered with every column of the job but
-- its prompt hash (to_jsonb of ~45 columns: the prompt, the input and the output among them,
-- the output sent back to the worker that had just sent it, and for a failure its partial
-- output read again from its chunks). Their callers read a few fields: the worker the outcome
-- only, the failure callback the job's user_id (lib/worker/index.ts, lib/worker/settle.ts,
-- lib/failure-callback.ts, lib/enqueue.ts). Building and parsing that JSON cost ~11 % of a
-- job's life (docs/BENCHMARKS.md, section 2c). Now both answer private.ending_json: the job's
-- state as an ending leaves it, without its text. The HTTP API never shows these answers (it
-- reads get_job and list_jobs, and the enqueue's answer, all unchanged). The answers to a call
-- that changed nothing (not_running, already_final, superseded) still carry the whole job: they
-- are rare, and their callers read the job's current state from them.

create function private.ending_json(j public.generation_jobs) returns jsonb
language plpgsql
stable
set search_path to ''
as $$
begin
  return pg_catalog.jsonb_build_object(
    'id', j.id, 'user_id', j.user_id, 'status', j.status, 'kind', j.kind, 'plan_id', j.plan_id,
    'meter', j.meter, 'attempts', j.attempts, 'publish_seq', j.publish_seq,
    'failure_reason', j.failure_reason, 'hold', j.hold, 'consumed', j.consumed,
    'captured', j.captured, 'refunded_at', j.refunded_at, 'refund_withheld', j.refund_withheld,
    'finished_at', j.finished_at, 'updated_at', j.updated_at);
end
$$;
comment on function private.ending_json(j public.generation_jobs) is
  'A job as complete_job and fail_job answer an ending: its state (id, user, status, kind, plan, meter, attempts, message seq, failure reason, hold, consumed, captured, refund, times), none of its text.';

create or replace function public.complete_job(p_job_id uuid, p_attempt integer, p_output text, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $$
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
        -- No usage: the hold, so a missing report never under-charges.
        captured = case when j.meter in ('tokens', 'money')
                        then least(j.consumed + coalesce(case when p_usage is null then null
                          else private.usage_cost(j, p_usage) end, j.hold), j.hold)
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
  select jsonb_build_object('outcome', 'completed', 'job', private.ending_json(c::public.generation_jobs),
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
comment on function public.complete_job(p_job_id uuid, p_attempt integer, p_output text, p_now timestamp with time zone, p_usage jsonb) is 'running under this claim → succeeded with the output; captures the whole hold (job plan: the kind''s units) or least(hold, consumed + the usage''s tokens) (token plan) and releases the rest; the usage goes in the event. Answers completed with the job''s state (private.ending_json).';

create or replace function public.fail_job(p_job_id uuid, p_reason text, p_error text DEFAULT NULL::text, p_attempt integer DEFAULT NULL::integer, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb, p_seq integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $$
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
    insert into public.superseded_callbacks (job_id, at, message_seq, job_seq)
    values (v_old.id, p_now, p_seq, v_old.publish_seq);
    return jsonb_build_object('outcome', 'superseded', 'job', private.job_json(v_old));
  end if;
  if p_attempt is not null and (v_old.status <> 'running' or v_old.attempts <> p_attempt) then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;
  return jsonb_build_object('outcome', 'failed', 'job', private.ending_json(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage),
    case when p_usage is null then null else private.usage_cost(v_old, p_usage) end
  )));
end
$$;
comment on function public.fail_job(p_job_id uuid, p_reason text, p_error text, p_attempt integer, p_now timestamp with time zone, p_usage jsonb, p_seq integer) is 'queued or running (with p_attempt: only that claim) → failed (private.end_with_refund''s rule: a token plan captures what was consumed; a job plan''s refund after spend is bounded; provider_misconfigured captures 0, unbounded). With p_seq older than the job''s publish_seq: superseded, nothing changes but a row in superseded_callbacks. Answers failed with the job''s state (private.ending_json).';
