-- quota-jobs: the failure callback of a superseded message does not fail the job.
--
-- QStash calls the failure callback (/api/dlq → fail_job, reason delivery_failed) after the last
-- retry of one message failed. A job may have had several messages: a requeue after a provider
-- 429 and the sweeper's republish each publish a new one and add 1 to publish_seq, and the old
-- message keeps its retries. Until now fail_job did not know which message failed, so the
-- callback of an old message, due after its last retry, failed the job even when the new message
-- had been delivered meanwhile and a live worker was running it (the model check found it:
-- docs/RELIABILITY.md, "Model checking"). The job ended `failed` and refunded under the worker,
-- whose model call was wasted and given away.
--
-- Now every message carries the job's publish_seq at publish time (`{"jobId", "seq"}`), the
-- callback passes it as p_seq, and fail_job ignores a callback whose message is older than the
-- job's current one: outcome `superseded`, no state change, no refund, no event (like the other
-- refusals, already_final and not_running; the route logs it). The job's current message (or the
-- lease and the sweeper) decides its fate instead.
--
-- p_seq null (a message published by the code before this change, or a caller that is not the
-- failure callback: the worker's fail_job, the enqueue's publish_failed) is treated as the
-- current message, as before. A p_seq newer than the job's cannot come from a message we
-- published; it is treated as current too (only an older message is known to be superseded).
-- Order of the guards: a final job is already_final first (as in every transition), then an
-- older message is superseded, then the claim guard as before.
--
-- One function of this name: the old signature is dropped, so PostgREST's resolution by
-- argument names stays unambiguous (a call without p_seq matches the new one through its
-- default). Apply this migration before the code that passes p_seq is deployed: the old code
-- calls the new function without p_seq, while the new code against the old function would get
-- PGRST202 (the callback would answer 503 and QStash retry it).

drop function public.fail_job(uuid, text, text, integer, timestamptz, jsonb);
create function public.fail_job(
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
  return jsonb_build_object('outcome', 'failed', 'job', to_jsonb(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage)
  )) - 'request_hash');
end
$$;
comment on function public.fail_job(uuid, text, text, integer, timestamptz, jsonb, integer) is
  'queued or running (with p_attempt: only that claim) → failed + refund; the attempt''s usage '
  'goes in the event. With p_seq (the failure callback''s message) older than the job''s '
  'publish_seq: superseded, nothing changes.';

-- grants -------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close it to everyone but the
-- service role; said again here so the intent is in the file that makes it.

revoke all on function public.fail_job(uuid, text, text, integer, timestamptz, jsonb, integer)
  from public, anon, authenticated;
grant execute on function public.fail_job(uuid, text, text, integer, timestamptz, jsonb, integer)
  to service_role;
