-- quota-jobs: the job row's 30 checks in one constraint, one function.
--
-- Every insert into and update of public.generation_jobs compiled the table's 30 CHECK
-- constraints again: PostgreSQL keeps a check as a stored node tree and, for each statement,
-- reads it back from its text (array constants byte by byte) and builds its expression before
-- the first row. A job's life writes the row three times (enqueue, claim, ending), so a fifth of
-- its database time went on reading the same 30 trees. Measured, interleaved on one cluster
-- (the life as PostgREST calls it, one connection): 12 % of a life's backend CPU.
--
-- Now the same 30 rules are one CHECK that calls private.generation_job_valid(row): a function
-- call on a whole-row value, a tree of two nodes, while PL/pgSQL compiles the function once per
-- session and keeps its expressions' plans. Each rule keeps its name: a row that breaks one
-- raises check_violation (23514) naming that constraint, as the declarative check did, so a
-- caller (PostgREST's 400, the tests) sees what it saw before.
--
-- What changes: the rules are in this function's body, not in the table's definition (the
-- schema dump shows the function). A column that a rule reads can be dropped without the rule
-- stopping it; the function then fails on the next write, loudly, instead of at the drop. A new
-- rule goes into a new version of this function (create or replace), in a new migration.
-- PostgreSQL cannot copy a check with a whole-row reference into another table: `create table
-- ... (like public.generation_jobs including constraints)` (or `including all`) and a partition
-- or child of the table refuse it ("cannot convert whole-row table reference"); such a copy
-- takes the rules by a check on row(its columns)::public.generation_jobs instead.
--
-- The constraint is added not valid and then validated: the validation scans the table under a
-- lock that lets reads and writes go on (share update exclusive), not one that stops them.

create or replace function private.generation_job_valid(j public.generation_jobs)
returns boolean
language plpgsql immutable set search_path = ''
as $$
declare
  v_failed text;
begin
  -- One branch per former constraint, in name order; a null rule passes, as a CHECK's does.
  v_failed := case
    when (j.attempts >= 0) is false then 'generation_jobs_attempts_check'
    when (j.captured >= 0) is false then 'generation_jobs_captured_check'
    when ((j.status in ('succeeded', 'failed', 'canceled')) = (j.captured is not null)) is false
      then 'generation_jobs_captured_iff_final'
    when (j.captured is null or j.captured <= j.hold) is false
      then 'generation_jobs_captured_within_hold'
    when (j.consumed >= 0) is false then 'generation_jobs_consumed_check'
    when (j.erased_at is null or j.finished_at is not null and j.prompt = '' and j.input = '{}'
        and j.output is null and j.partial_output is null and j.last_error is null
        and j.idempotency_key is null and j.request_hash = '') is false
      then 'generation_jobs_erased_is_empty'
    when (j.failure_reason in ('model_refused', 'delivery_failed', 'publish_failed',
        'provider_quota_exhausted', 'lease_expired', 'max_age_exceeded', 'never_delivered',
        'attempt_budget_exhausted', 'provider_misconfigured', 'capacity_unavailable',
        'output_invalid', 'output_truncated')) is false
      then 'generation_jobs_failure_reason_check'
    when ((j.status in ('succeeded', 'failed', 'canceled')) = (j.finished_at is not null)) is false
      then 'generation_jobs_finished_iff_terminal'
    when (j.hold >= 1) is false then 'generation_jobs_hold_check'
    when (pg_catalog.char_length(j.idempotency_key) between 1 and 255) is false
      then 'generation_jobs_idempotency_key_check'
    when (pg_catalog.jsonb_typeof(j.input) = 'object') is false
      then 'generation_jobs_input_is_object'
    when ((j.status = 'running') = (j.lease_expires_at is not null)) is false
      then 'generation_jobs_lease_iff_running'
    when (j.meter in ('jobs', 'tokens', 'money')) is false then 'generation_jobs_meter_check'
    when (j.output is null or j.status = 'succeeded') is false
      then 'generation_jobs_output_only_when_succeeded'
    when (j.partial_output is null) is false then 'generation_jobs_partial_output_in_chunks'
    when (j.partial_tokens >= 0) is false then 'generation_jobs_partial_tokens_check'
    when (pg_catalog.char_length(j.prompt) <= 8000
        and (pg_catalog.char_length(j.prompt) >= 1 or j.erased_at is not null)) is false
      then 'generation_jobs_prompt_check'
    when (j.prompt_tokens >= 0) is false then 'generation_jobs_prompt_tokens_check'
    when (j.provider_quota_hits >= 0) is false then 'generation_jobs_provider_quota_hits_check'
    when (j.publish_seq >= 1) is false then 'generation_jobs_publish_seq_check'
    when ((j.status = 'failed') = (j.failure_reason is not null)) is false
      then 'generation_jobs_reason_iff_failed'
    when (j.reasoning_tokens >= 0) is false then 'generation_jobs_reasoning_tokens_check'
    when (j.refund_withheld in ('running_cancel_limit', 'paid_refund_limit')) is false
      then 'generation_jobs_refund_withheld_check'
    when ((j.status in ('failed', 'canceled'))
        = ((j.refunded_at is not null) <> (j.refund_withheld is not null))) is false
      then 'generation_jobs_refunded_iff_failed_or_canceled'
    when (j.republish_count >= 0) is false then 'generation_jobs_republish_count_check'
    when (j.resume_at is null or j.status = 'queued') is false
      then 'generation_jobs_resume_only_when_queued'
    when (j.refund_withheld is distinct from 'running_cancel_limit' or j.status = 'canceled')
        is false
      then 'generation_jobs_running_cancel_limit_only_when_canceled'
    when (j.status in ('queued', 'running', 'succeeded', 'failed', 'canceled')) is false
      then 'generation_jobs_status_check'
    when (j.waiting_for in ('provider', 'capacity')) is false then 'generation_jobs_waiting_for_check'
    when (j.refund_withheld is null or j.status in ('failed', 'canceled')) is false
      then 'generation_jobs_withheld_only_when_failed_or_canceled'
  end;
  if v_failed is not null then
    raise exception 'new row for relation "generation_jobs" violates check constraint "%"', v_failed
      using errcode = 'check_violation', constraint = v_failed, schema = 'public',
        table = 'generation_jobs';
  end if;
  return true;
end
$$;
comment on function private.generation_job_valid(public.generation_jobs) is 'The rules of a job row (public.generation_jobs'' one check, generation_jobs_valid): true, or check_violation (23514) naming the rule broken, under the name each rule had as a constraint of its own (e.g. generation_jobs_failure_reason_check). One function, so a write compiles one call instead of 30 expressions.';
revoke all on function private.generation_job_valid(public.generation_jobs)
  from public, anon, authenticated;
grant execute on function private.generation_job_valid(public.generation_jobs) to service_role;

alter table public.generation_jobs
  drop constraint generation_jobs_attempts_check,
  drop constraint generation_jobs_captured_check,
  drop constraint generation_jobs_captured_iff_final,
  drop constraint generation_jobs_captured_within_hold,
  drop constraint generation_jobs_consumed_check,
  drop constraint generation_jobs_erased_is_empty,
  drop constraint generation_jobs_failure_reason_check,
  drop constraint generation_jobs_finished_iff_terminal,
  drop constraint generation_jobs_hold_check,
  drop constraint generation_jobs_idempotency_key_check,
  drop constraint generation_jobs_input_is_object,
  drop constraint generation_jobs_lease_iff_running,
  drop constraint generation_jobs_meter_check,
  drop constraint generation_jobs_output_only_when_succeeded,
  drop constraint generation_jobs_partial_output_in_chunks,
  drop constraint generation_jobs_partial_tokens_check,
  drop constraint generation_jobs_prompt_check,
  drop constraint generation_jobs_prompt_tokens_check,
  drop constraint generation_jobs_provider_quota_hits_check,
  drop constraint generation_jobs_publish_seq_check,
  drop constraint generation_jobs_reason_iff_failed,
  drop constraint generation_jobs_reasoning_tokens_check,
  drop constraint generation_jobs_refund_withheld_check,
  drop constraint generation_jobs_refunded_iff_failed_or_canceled,
  drop constraint generation_jobs_republish_count_check,
  drop constraint generation_jobs_resume_only_when_queued,
  drop constraint generation_jobs_running_cancel_limit_only_when_canceled,
  drop constraint generation_jobs_status_check,
  drop constraint generation_jobs_waiting_for_check,
  drop constraint generation_jobs_withheld_only_when_failed_or_canceled,
  add constraint generation_jobs_valid check (private.generation_job_valid(generation_jobs.*))
    not valid;
alter table public.generation_jobs validate constraint generation_jobs_valid;
comment on constraint generation_jobs_valid on public.generation_jobs is 'Every rule of a job row, in private.generation_job_valid (which names the rule a row breaks).';
