-- quota-jobs: a plan may name a model per kind.
--
-- A plan named one model for every kind it offers, while the kinds ask different things of a
-- model: an extraction (a schema-bound JSON answer) may want a stronger model than a summary of
-- the same plan. public.plan_kinds.model names the model a kind runs on under that plan; null
-- keeps the plan's (else the deployment's OPENAI_MODEL). The tier and the reasoning effort stay
-- the plan's: one tier per plan keeps its promise (economy never bills at the standard price) and
-- one effort per plan keeps what a cancel costs the same for every kind. So a kind's model must
-- offer the plan's tier, take its effort, and allow its output bound; checked when either row is
-- written, so no saved plan can send a call the provider would refuse. A job keeps the model it was
-- enqueued with (generation_jobs.model), so a later change moves no running job.

alter table public.plan_kinds
  add column model text constraint plan_kinds_model_fkey references public.models (id);
comment on column public.plan_kinds.model is
  'The model a job of this kind runs on under this plan (public.models). Null: the plan''s, else '
  'the deployment''s OPENAI_MODEL. It must offer the plan''s tier, take its reasoning effort and '
  'allow its max_output_tokens.';

create function private.check_kind_models(p_plan_id text, p_kind text default null)
returns void
language plpgsql
stable
set search_path = ''
as $$
declare
  v record;
begin
  for v in
    select k.kind, k.model, p.id as plan_id, p.service_tier, p.max_output_tokens,
      p.reasoning_effort, m.max_output_tokens as model_max, m.reasoning_efforts,
      exists (select from public.model_tiers t
        where t.model_id = k.model and t.tier = p.service_tier) as tier_offered
    from public.plan_kinds k
    join public.plans p on p.id = k.plan_id
    join public.models m on m.id = k.model
    where k.plan_id = p_plan_id and (p_kind is null or k.kind = p_kind)
  loop
    if not v.tier_offered then
      raise exception 'plan %, kind %: model % is not offered on tier %',
        v.plan_id, v.kind, v.model, v.service_tier
        using errcode = '23514', constraint = 'plan_kinds_tier_offered';
    end if;
    if v.max_output_tokens > v.model_max then
      raise exception 'plan %, kind %: max_output_tokens % is above model %''s largest output %',
        v.plan_id, v.kind, v.max_output_tokens, v.model, v.model_max
        using errcode = '23514', constraint = 'plan_kinds_output_within_model';
    end if;
    if v.reasoning_effort is not null and not (v.reasoning_effort = any (v.reasoning_efforts)) then
      raise exception 'plan %, kind %: model % does not take reasoning effort %',
        v.plan_id, v.kind, v.model, v.reasoning_effort
        using errcode = '23514', constraint = 'plan_kinds_effort_of_model';
    end if;
  end loop;
end
$$;
comment on function private.check_kind_models(text, text) is
  'A plan''s kinds that name a model keep within it: the model offers the plan''s tier, allows its '
  'output bound and takes its reasoning effort (23514 otherwise).';

create function private.check_plan_kind_model() returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if tg_table_name = 'plan_kinds' then
    if new.model is not null then
      perform private.check_kind_models(new.plan_id, new.kind);
    end if;
  else
    perform private.check_kind_models(new.id);
  end if;
  return null;
end
$$;
comment on function private.check_plan_kind_model() is
  'private.check_kind_models after a kind''s model, or its plan''s tier, bound or effort, is written.';

create constraint trigger plan_kinds_check_model after insert or update of model on public.plan_kinds
  for each row execute function private.check_plan_kind_model();
create constraint trigger plans_check_kind_models
  after update of service_tier, max_output_tokens, reasoning_effort on public.plans
  for each row execute function private.check_plan_kind_model();

-- enqueue: the kind's model first ----------------------------------------------------------------

create or replace function public.enqueue_job(p_user_id uuid, p_prompt text, p_idempotency_key text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT now(), p_prompt_tokens integer DEFAULT NULL::integer, p_kind text DEFAULT 'document'::text, p_input jsonb DEFAULT NULL::jsonb, p_model text DEFAULT NULL::text)
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
    p.max_refunded_running_cancels, p.meter, p.model, p.service_tier, p.reasoning_effort,
    b.period_start,
    (select q.units_used from public.quota_usage q
     where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p.meter),
    (select count(*) from public.generation_jobs j
     where j.user_id = p_user_id and j.status in ('queued', 'running')),
    k.units, k.model
  into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
    v_plan.max_output_tokens, v_plan.max_refunded_running_cancels, v_plan.meter, v_plan.model,
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
comment on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb, text) is
  'Starts a job of a kind (default document) for a user that exists (else user_not_found): a kind '
  'the plan does not offer is kind_not_in_plan; a model (the kind''s on the plan, else the '
  'plan''s, else p_model) past its '
  'shutdown date is model_retired; holds the kind''s units (job plan), p_prompt_tokens + '
  'max_output_tokens (token plan) or that call''s worst case in micro-dollars (money plan) on the '
  'counter of the plan''s meter under the limit, checks the active-job limit and the idempotency '
  'key, inserts, in one transaction. A refusal holds nothing.';


-- the watch and the worst case: every model a plan's kinds run on ---------------------------------

create or replace function public.watched_models(p_default_model text default null)
returns jsonb
language sql
stable
set search_path = ''
as $$
  with used as (
    select coalesce(p.model, p_default_model) as model, p.id as plan_id
    from public.plans p
    where coalesce(p.model, p_default_model) is not null
    union
    select k.model, k.plan_id from public.plan_kinds k where k.model is not null
  )
  select jsonb_build_object('outcome', 'listed', 'models', coalesce(jsonb_agg(jsonb_build_object(
    'model', u.model,
    'plans', u.plans,
    'priced', m.id is not null,
    'shutdown_date', m.shutdown_date,
    'checked_at', m.catalogue_checked_at
  ) order by u.model), '[]'::jsonb))
  from (select u.model, jsonb_agg(u.plan_id order by u.plan_id) as plans from used u group by u.model) u
  left join public.models m on m.id = u.model
$$;
comment on function public.watched_models(text) is
  'Every model a plan or one of its kinds runs on (a plan naming none: p_default_model, the '
  'deployment''s OPENAI_MODEL), with the plans that use it, whether the price book has it, and the '
  'shutdown date last read from the provider.';

-- A plan's worst case prices every call at the dearest model any of its kinds runs on.
create or replace function public.plan_worst_case(p_default_model text default null,
  p_attempts integer default 2, p_prompt_tokens integer default 8008)
returns table (plan_id text, meter text, model text, service_tier text, units_per_period integer,
  billed_calls integer, worst_case_micro_usd bigint)
language sql
stable
set search_path = ''
as $$
  select p.id, p.meter, coalesce(p.model, p_default_model), p.service_tier, p.units_per_period,
    case when p.meter = 'jobs' then
      (p.units_per_period / greatest((select min(k.units) from public.plan_kinds k
        where k.plan_id = p.id), 1) + coalesce(private.refund_bound(p), 0)) * p_attempts end,
    case p.meter
      -- Each billed call at most its prompt's bound and its output bound, at the held prices.
      when 'jobs' then ceil(
        ((p.units_per_period / greatest((select min(k.units) from public.plan_kinds k
          where k.plan_id = p.id), 1) + coalesce(private.refund_bound(p), 0)) * p_attempts)::numeric
        * (p_prompt_tokens::numeric * h.input_per_mtok + p.max_output_tokens::numeric * h.output_per_mtok)
        / 1000000)::bigint
      -- Below twice the plan's tokens (the attempt budget), each at the dearest token's price.
      when 'tokens' then ceil(2 * p.units_per_period::numeric
        * greatest(h.input_per_mtok, h.output_per_mtok) / 1000000)::bigint
      -- Below twice the plan's micro-dollars: a job's attempts stop at 2 × hold.
      else 2 * p.units_per_period::bigint
    end
  from public.plans p
  -- The dearest of the models the plan's calls may run on; null when one of them is not priced.
  left join lateral (
    select case when bool_and(hp.input_per_mtok is not null) then max(hp.input_per_mtok) end
        as input_per_mtok,
      case when bool_and(hp.output_per_mtok is not null) then max(hp.output_per_mtok) end
        as output_per_mtok
    from (
      select coalesce(p.model, p_default_model) as model
      union
      select k.model from public.plan_kinds k where k.plan_id = p.id and k.model is not null
    ) used
    left join lateral private.held_prices(used.model, p.service_tier) hp on true
  ) h on true
  order by p.id
$$;
comment on function public.plan_worst_case(text, integer, integer) is
  'Each plan''s worst-case provider bill per period, in micro-dollars, from the price book: a job '
  'plan''s billed calls (units / the cheapest kind + refunds after spend, × attempts per job) at '
  'their prompt (p_prompt_tokens) and output bounds; a token plan''s twice its tokens at the '
  'dearest token price; a money plan''s twice its micro-dollars. Prices are the dearest of the '
  'models the plan and its kinds run on; null where one is not priced. '
  'docs/DESIGN.md#metering-hold-and-capture says why each bound holds.';

revoke all on function private.check_kind_models(text, text), private.check_plan_kind_model()
  from public, anon, authenticated;
grant execute on function private.check_kind_models(text, text), private.check_plan_kind_model()
  to service_role;
