-- quota-jobs: a running attempt's prompt is charged at what it counts, not at its hold's bound.
--
-- enqueue_job stores the prompt's hold bound in prompt_tokens (its UTF-8 bytes + 8: no
-- tokenizer on the request path; a byte-level BPE never makes more tokens than bytes). That is
-- the right hold, but the endings that charge a running attempt for what it consumed without
-- the provider's usage (a cancel, the failure callback or the sweeper ending a running job, a
-- reclaim) read prompt_tokens as what the prompt cost: about four times an English prompt's
-- real tokens, on a token plan's bill. The worker counts the prompt with the configured model's
-- tokenizer (lib/tokens.ts; never above the bytes) and sends it, with the chat framing, in its
-- progress writes: record_progress lowers prompt_tokens to it. Never raises it: the hold was
-- made with the bound, and a lower charge is the only way this can move. The hold is unchanged.

drop function public.record_progress(uuid, integer, text, integer, timestamptz);

create function public.record_progress(
  p_job_id uuid,
  p_attempt integer,
  p_partial_output text,
  p_completion_tokens integer,
  p_now timestamptz default now(),
  p_prompt_tokens integer default null
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
comment on function public.record_progress(uuid, integer, text, integer, timestamptz, integer) is
  'The running attempt''s output so far, and (p_prompt_tokens) its prompt as the worker counts '
  'it, which lowers prompt_tokens (never raises it). recorded, or not_running (with the job''s '
  'status): the worker then cuts the model''s stream at once.';

revoke all on function public.record_progress(uuid, integer, text, integer, timestamptz, integer)
  from public, anon, authenticated;
grant execute on function public.record_progress(uuid, integer, text, integer, timestamptz, integer)
  to service_role;
