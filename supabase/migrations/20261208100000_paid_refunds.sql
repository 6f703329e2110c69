-- quota-jobs: the counter and the bound of refunds after provider spend say what they count.
--
-- quota_usage.refunded_running_cancels and plans.max_refunded_running_cancels were named when
-- only a running cancel was refunded after the provider billed it. Since 20261201090000_paid_endings
-- they count every such refund (a running cancel, a failure or a queued cancel after a consumed
-- attempt), which their comments had to explain against their names. They are now paid_refunds
-- and max_paid_refunds: "paid" as in the ending's v_paid and its withheld reason
-- paid_refund_limit, one word for "after the provider billed it".
--
-- A rename keeps every value, default and check (a check holds the column, not its name); the
-- checks are renamed to match. PL/pgSQL bodies are text, so every function that names a column
-- is re-created here with the new name: private.cancel_refunds, private.end_with_refund,
-- private.refund_bound, private.usage_json and public.enqueue_job. No view, trigger or policy
-- names them. usage_json's keys are renamed too (paid_refunds, max_paid_refunds); lib/view.ts
-- reads them, and the old keys from a database before this migration, so deploy the code first.
-- GET /api/usage keeps its field runningCancelRefunds (lib/view.ts says why). Behaviour is
-- unchanged (test/db/refund-bound.test.ts, test/db/paid-endings.test.ts).

alter table public.quota_usage rename column refunded_running_cancels to paid_refunds;
alter table public.quota_usage rename constraint quota_usage_refunded_running_cancels_check
  to quota_usage_paid_refunds_check;
comment on column public.quota_usage.paid_refunds is
  'Refunds after provider spend in this period: running cancels, failures and queued cancels '
  'after a consumed attempt. Changed only by private.end_with_refund, with the refund, in the '
  'same statement.';

alter table public.plans rename column max_refunded_running_cancels to max_paid_refunds;
alter table public.plans rename constraint plans_max_refunded_running_cancels_check
  to plans_max_paid_refunds_check;
comment on column public.plans.max_paid_refunds is
  'How many jobs per period get their unit back after the provider billed them: running '
  'cancels, failures and queued cancels after a consumed attempt. Null: as many as '
  'units_per_period. Job plans only: a token plan captures what was consumed instead.';

CREATE OR REPLACE FUNCTION private.cancel_refunds(p_job public.generation_jobs)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select case
    when p_job.status not in ('queued', 'running') then false
    when p_job.meter in ('tokens', 'money') then true
    -- A job plan's queued job whose attempts consumed nothing: always.
    when p_job.status = 'queued' and p_job.consumed = 0 then true
    else coalesce((
      select q.paid_refunds < private.refund_bound(p)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
  );
end
$function$;

CREATE OR REPLACE FUNCTION private.end_with_refund(p_job public.generation_jobs, p_status text, p_reason text, p_error text, p_event text, p_now timestamp with time zone, p_detail jsonb DEFAULT '{}'::jsonb, p_own integer DEFAULT NULL::integer, p_running_cancel boolean DEFAULT false)
 RETURNS public.generation_jobs
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  -- What the ending attempt consumed: as its worker reports it, else (someone else ends a running
  -- attempt) the prompt and the last progress write, else (queued) nothing.
  -- (A job plan only asks whether it is more than 0: its tokens, with no call.)
  v_own integer := greatest(coalesce(p_own, case when p_job.status <> 'running' then 0
    when p_job.meter = 'jobs' then coalesce(p_job.prompt_tokens, 0) + p_job.partial_tokens
    else private.running_cost(p_job) end), 0);
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
      paid_refunds = q.paid_refunds + case when v_bounded then 1 else 0 end,
      updated_at = p_now
  where q.user_id = p_job.user_id and q.period_start = p_job.period_start and q.meter = p_job.meter
    and q.units_used >= p_job.hold - v_capture
    -- The row being updated is the one compared: two endings of one user take turns on it.
    and (not v_bounded or q.paid_refunds < (
      select private.refund_bound(p) from public.plans p where p.id = p_job.plan_id));
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
$function$;

CREATE OR REPLACE FUNCTION private.refund_bound(p_plan public.plans)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_plan.meter = 'jobs'
    then coalesce(p_plan.max_paid_refunds, p_plan.units_per_period) end;
end
$function$;

CREATE OR REPLACE FUNCTION private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  with bounds as (
    select private.period_start(p_plan.period, p_now) as period_start
  ), counter as (
    select q.units_used, q.paid_refunds from public.quota_usage q, bounds b
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
    'paid_refunds', case when p_plan.meter = 'jobs'
      then coalesce((select c.paid_refunds from counter c), 0) end,
    'max_paid_refunds', private.refund_bound(p_plan),
    'kinds', private.plan_kinds_json(p_plan.id)
  )
  from bounds b, active a
  );
end
$function$;

CREATE OR REPLACE FUNCTION public.enqueue_job(p_user_id uuid, p_prompt text, p_idempotency_key text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT now(), p_prompt_tokens integer DEFAULT NULL::integer, p_kind text DEFAULT 'document'::text, p_input jsonb DEFAULT NULL::jsonb, p_model text DEFAULT NULL::text)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_plan public.plans;
  v_period_start timestamptz;
  v_hash text;
  v_job public.generation_jobs;
  v_used integer;
  v_active integer;
  v_prompt_tokens integer;
  v_hold bigint;
  v_model public.models;
  v_model_id text;
  v_kind_model text;
  v_reasons boolean;
  v_units integer;
  v_input jsonb := coalesce(p_input, jsonb_build_object('prompt', p_prompt));
  v_result jsonb;
begin
  if p_prompt is null or p_prompt !~ '[^[:space:]]' or char_length(p_prompt) > 8000
     or p_prompt_tokens < 0 then
    return jsonb_build_object('outcome', 'invalid_prompt');
  end if;
  if jsonb_typeof(v_input) <> 'object' then
    return jsonb_build_object('outcome', 'invalid_input');
  end if;
  if p_idempotency_key is not null and char_length(p_idempotency_key) not between 1 and 255 then
    return jsonb_build_object('outcome', 'invalid_idempotency_key');
  end if;
  if p_kind is null or not exists (select from public.job_kinds k where k.id = p_kind) then
    return jsonb_build_object('outcome', 'unknown_kind');
  end if;
  -- A document's prompt is its whole input, the bound below is its bytes; any other kind's model
  -- input is more than its text (instructions, a schema), which only the caller can bound.
  if p_kind <> 'document' and p_prompt_tokens is null then
    raise exception 'enqueue_job: p_prompt_tokens is required for kind %', p_kind
      using errcode = 'P0001';
  end if;
  -- A signed token outlives its user (deleted) and can name one that never was: without an
  -- auth.users row there is no account, so no plan, not the free one.
  if not private.user_exists(p_user_id) then
    return jsonb_build_object('outcome', 'user_not_found');
  end if;
  -- A document keeps the hash it always had (a replay across this change still matches); any
  -- other kind hashes its kind and its input's jsonb text, which is canonical (keys sorted, no
  -- insignificant whitespace), so the same input sent with other spacing or key order matches.
  v_hash := encode(sha256(convert_to(case when p_kind = 'document' then p_prompt
    else p_kind || ':' || v_input::text end, 'UTF8')), 'hex');
  v_prompt_tokens := coalesce(p_prompt_tokens, octet_length(convert_to(p_prompt, 'UTF8')) + 8);

  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
    p.max_paid_refunds, p.meter, p.model, p.service_tier, p.reasoning_effort,
    b.period_start,
    (select q.units_used from public.quota_usage q
     where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p.meter),
    (select count(*) from public.generation_jobs j
     where j.user_id = p_user_id and j.status in ('queued', 'running')),
    k.units, k.model
  into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
    v_plan.max_output_tokens, v_plan.max_paid_refunds, v_plan.meter, v_plan.model,
    v_plan.service_tier, v_plan.reasoning_effort, v_period_start, v_used, v_active, v_units,
    v_kind_model
  from public.plans p
  cross join lateral (
    select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
  ) b
  left join public.plan_kinds k on k.plan_id = p.id and k.kind = p_kind
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

  if v_units is null then
    return jsonb_build_object(
      'outcome', 'kind_not_in_plan',
      'plan', v_plan.id,
      'kinds', private.plan_kinds_json(v_plan.id)
    );
  end if;

  -- The model the job runs on: its kind's on the plan, else the plan's, else the deployment's. From
  -- its shutdown date on, the provider no longer serves it: refused here, nothing held, rather
  -- than failed at the provider.
  v_model_id := coalesce(v_kind_model, v_plan.model, p_model);
  select * into v_model from public.models m where m.id = v_model_id;
  if v_model.shutdown_date <= (p_now at time zone 'UTC')::date then
    return jsonb_build_object('outcome', 'model_retired', 'model', v_model.id,
      'shutdown_date', v_model.shutdown_date);
  end if;
  -- A model the price book does not know is taken to reason: its cut attempts cost their bound.
  v_reasons := v_model_id is not null and (v_model.id is null
    or (v_model.reasons and v_plan.reasoning_effort is distinct from 'none'));

  if v_plan.meter = 'money' then
    -- The call's worst case: the prompt's bound at the input price and the output bound
    -- (reasoning included) at the output price, at the dearer of the plan's and standard tier.
    select ceil((v_prompt_tokens::numeric * h.input_per_mtok
      + v_plan.max_output_tokens::numeric * h.output_per_mtok) / 1000000)::bigint
    into v_hold
    from private.held_prices(v_model_id, v_plan.service_tier) h;
  elsif v_plan.meter = 'tokens' then
    v_hold := v_prompt_tokens + v_plan.max_output_tokens;
  else
    v_hold := v_units;
  end if;

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
      user_id, status, kind, prompt, input, request_hash, idempotency_key, plan_id, period_start,
      meter, prompt_tokens, hold, model, service_tier, reasons, created_at, queued_at, updated_at
    )
    select p_user_id, 'queued', p_kind, p_prompt, v_input, v_hash, p_idempotency_key, v_plan.id,
      v_period_start, v_plan.meter, v_prompt_tokens, v_hold, v_model_id, v_plan.service_tier,
      v_reasons, p_now, p_now, p_now
    from reserved
    returning *
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select i.id, i.user_id, p_now, 'enqueued', null, i.status,
      jsonb_build_object('plan', v_plan.id, 'kind', p_kind, 'hold', v_hold)
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
      'max_active', v_plan.max_active_jobs,
      'kinds', private.plan_kinds_json(v_plan.id)
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
$function$;

comment on function private.refund_bound(public.plans) is
  'How many refunds after provider spend (running cancels, failures and queued cancels after a '
  'consumed attempt) the plan gives per period: max_paid_refunds, else units_per_period. Null on '
  'a token plan, which has no such bound (an ending captures what was consumed). A refund after '
  'spend is made while the period''s quota_usage.paid_refunds is under it.';
comment on function private.usage_json(uuid, public.plans, timestamptz) is
  'A user''s usage in the period that contains p_now: the meter, units (jobs or tokens) used on '
  'that meter''s counter and the limit, what active jobs hold, active jobs, (job plans) the '
  'refunds after spend used and allowed (paid_refunds, max_paid_refunds), null for both on a '
  'token plan, and the kinds the plan offers.';
