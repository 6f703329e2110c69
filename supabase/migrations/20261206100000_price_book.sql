-- quota-jobs: a price book the plans reference, a money meter, reasoning charged as billed, and a
-- model past its shutdown date refused at enqueue.
--
-- A plan used to buy one model's tokens (or jobs) while the provider's bill is money, across
-- models and service tiers: a token of one model is not a token of another, flex is half the
-- standard price, priority about double, cached input a tenth. So:
--
-- - public.models and public.model_tiers are the price book: per model, whether it reasons and
--   which efforts it takes, its largest output and context, the shutdown date the provider's
--   catalogue announces (written by the catalogue watch, GET /v1/models/{id}), and per service
--   tier its price per million input, cached-input and output tokens, in integer micro-dollars.
--   Prices are data with a date and a source; a price change is a new migration.
-- - A plan may name its model, tier and reasoning effort. A plan whose model does not offer its
--   tier cannot be saved (a foreign key to model_tiers), nor one on flex or priority, or metered
--   in money, that names no model (a check), nor one whose output bound passes its model's or
--   whose effort its model does not take (a trigger). A plan naming no model runs on the
--   deployment's OPENAI_MODEL (enqueue_job's p_model).
-- - A job keeps what it was priced with: its model, the tier it holds at, and whether its model
--   reasons at the plan's effort (a later plan change does not reprice it, as for its meter).
-- - meter 'money': units are micro-dollars. The hold is the call's worst case: the prompt's
--   bound at the input price plus the output bound (reasoning included) at the output price, at
--   the dearer of the plan's tier and the standard tier (a flex request may be served at
--   standard). What an attempt costs is private.attempt_cost: the provider's usage priced at the
--   tier it reports it served (cached input at the cached price, reasoning inside output), or,
--   for a count of ours, at the held prices.
-- - Hidden reasoning cut short is billed by the provider and reported by no one: a stream cut
--   short carries no usage. So an attempt of a reasoning job whose usage the provider did not
--   report costs its bound (the job's hold) on a token or money plan, whoever ends it (its
--   worker's timeout, a cancel, the sweeper, the failure callback, a reclaim).
-- - max_output_tokens has OpenAI's minimum, 16.

-- the price book ----------------------------------------------------------------------------------

create table public.models (
  id text primary key,
  reasons boolean not null,
  reasoning_efforts text[] not null default '{}',
  max_output_tokens integer not null constraint models_max_output_tokens_check
    check (max_output_tokens >= 16),
  context_window integer not null constraint models_context_window_check
    check (context_window >= max_output_tokens),
  shutdown_date date,
  catalogue_checked_at timestamptz,
  priced_on date not null,
  source text not null,
  constraint models_efforts_known check (reasoning_efforts <@
    array['none', 'minimal', 'low', 'medium', 'high', 'xhigh']::text[]),
  constraint models_efforts_only_when_reasoning check (reasons or reasoning_efforts = '{}')
);
comment on table public.models is
  'The price book''s models: whether each reasons by default (reasoning tokens are billed as '
  'output and never streamed) and which reasoning efforts it takes, its largest output and '
  'context, and when and where its prices were read. shutdown_date is the provider''s '
  '(GET /v1/models/{id}), written by the catalogue watch; from that day enqueue refuses jobs on '
  'it (model_retired).';
comment on column public.models.catalogue_checked_at is
  'When the catalogue watch last read the model from the provider (null: never).';

create table public.model_tiers (
  model_id text not null references public.models (id) on delete cascade,
  tier text not null constraint model_tiers_tier_check
    check (tier in ('default', 'flex', 'priority')),
  input_per_mtok bigint not null constraint model_tiers_input_check check (input_per_mtok >= 0),
  cached_input_per_mtok bigint not null
    constraint model_tiers_cached_check check (cached_input_per_mtok >= 0),
  output_per_mtok bigint not null constraint model_tiers_output_check check (output_per_mtok >= 0),
  primary key (model_id, tier)
);
comment on table public.model_tiers is
  'The service tiers each model is offered on and their prices, in micro-dollars (USD 1e-6) per '
  'million tokens: input, cached input, output (reasoning included). A tier without a row is '
  'not offered: the provider answers 400 for it.';

-- Read from OpenAI's pricing page (developers.openai.com/api/docs/pricing) as copied on
-- 2026-11-05 and 2026-06-04, and the flex guide (flex is priced at Batch rates, half the
-- standard price); gpt-4o-mini from the same page (never a flex model; shuts down 2027-01-14 per
-- the deprecations page: the catalogue watch records it).
insert into public.models (id, reasons, reasoning_efforts, max_output_tokens, context_window,
  priced_on, source) values
  ('gpt-5.4', true, '{none,low,medium,high,xhigh}', 128000, 400000, '2026-11-05',
   'developers.openai.com/api/docs/pricing'),
  ('gpt-5.4-mini', true, '{none,low,medium,high,xhigh}', 128000, 400000, '2026-11-05',
   'developers.openai.com/api/docs/pricing'),
  ('gpt-5.4-nano', true, '{none,low,medium,high,xhigh}', 128000, 400000, '2026-11-05',
   'developers.openai.com/api/docs/pricing'),
  ('gpt-4o-mini', false, '{}', 16384, 128000, '2026-11-05',
   'developers.openai.com/api/docs/pricing');
insert into public.model_tiers (model_id, tier, input_per_mtok, cached_input_per_mtok,
  output_per_mtok) values
  ('gpt-5.4', 'default', 2500000, 250000, 15000000),
  ('gpt-5.4', 'flex', 1250000, 125000, 7500000),
  ('gpt-5.4', 'priority', 5000000, 500000, 30000000),
  ('gpt-5.4-mini', 'default', 750000, 75000, 4500000),
  ('gpt-5.4-mini', 'flex', 375000, 37500, 2250000),
  ('gpt-5.4-mini', 'priority', 1500000, 150000, 9000000),
  ('gpt-5.4-nano', 'default', 200000, 20000, 1250000),
  ('gpt-5.4-nano', 'flex', 100000, 10000, 625000),
  ('gpt-4o-mini', 'default', 150000, 75000, 600000);

-- plans: model, tier, effort, money ---------------------------------------------------------------

alter table public.plans
  add column model text,
  add column reasoning_effort text constraint plans_reasoning_effort_check
    check (reasoning_effort in ('none', 'minimal', 'low', 'medium', 'high', 'xhigh'));
comment on column public.plans.model is
  'The model the plan''s jobs run on (public.models). Null: the deployment''s OPENAI_MODEL.';
comment on column public.plans.reasoning_effort is
  'The reasoning effort sent with the plan''s calls (one its model takes). Null: the model''s '
  'default, which reasons on a reasoning model. none: no hidden reasoning.';

-- A plan on flex that names no model was on OPENAI_MODEL, which the price book cannot check: it
-- moves to a flex model (the economy plan's gpt-4o-mini never offered flex, so every job of it
-- would have failed at the provider).
update public.plans set model = 'gpt-5.4-mini' where service_tier <> 'default' and model is null;

alter table public.plans
  drop constraint plans_service_tier_check,
  add constraint plans_service_tier_check
    check (service_tier in ('default', 'flex', 'priority')),
  drop constraint plans_meter_check,
  add constraint plans_meter_check check (meter in ('jobs', 'tokens', 'money')),
  drop constraint plans_max_output_tokens_check,
  add constraint plans_max_output_tokens_check check (max_output_tokens >= 16),
  add constraint plans_tier_offered foreign key (model, service_tier)
    references public.model_tiers (model_id, tier),
  add constraint plans_priced_plans_name_a_model
    check (model is not null or (service_tier = 'default' and meter <> 'money'));
comment on column public.plans.meter is
  'jobs: units_per_period counts jobs (a job holds its kind''s units). tokens: it counts tokens '
  '(a job holds its prompt tokens plus max_output_tokens and captures what it consumed). money: '
  'it counts micro-dollars of the provider''s bill (a job holds its worst case at the price book''s '
  'prices and captures what the provider billed).';

create function private.check_plan_model() returns trigger
language plpgsql
set search_path = ''
as $$
declare
  v_model public.models;
begin
  if new.model is null then
    return new;
  end if;
  select * into v_model from public.models m where m.id = new.model;
  if new.max_output_tokens > v_model.max_output_tokens then
    raise exception 'plan %: max_output_tokens % is above model %''s largest output %',
      new.id, new.max_output_tokens, new.model, v_model.max_output_tokens
      using errcode = '23514', constraint = 'plans_output_within_model';
  end if;
  if new.reasoning_effort is not null and not (new.reasoning_effort = any (v_model.reasoning_efforts)) then
    raise exception 'plan %: model % does not take reasoning effort %',
      new.id, new.model, new.reasoning_effort
      using errcode = '23514', constraint = 'plans_effort_of_model';
  end if;
  return new;
end
$$;
comment on function private.check_plan_model() is
  'A plan naming a model keeps within it: its output bound within the model''s largest output, '
  'its reasoning effort one the model takes (23514 otherwise). The tier is the foreign key''s.';
create trigger plans_check_model before insert or update on public.plans
  for each row execute function private.check_plan_model();

-- jobs and counters: what a job was priced with --------------------------------------------------

alter table public.generation_jobs
  add column model text,
  add column service_tier text,
  add column reasons boolean not null default false,
  drop constraint generation_jobs_meter_check,
  add constraint generation_jobs_meter_check check (meter in ('jobs', 'tokens', 'money')) not valid;
alter table public.generation_jobs validate constraint generation_jobs_meter_check;
comment on column public.generation_jobs.model is
  'The model the job runs on: its plan''s, else the deployment''s OPENAI_MODEL as enqueue was '
  'told it (null: neither).';
comment on column public.generation_jobs.service_tier is
  'The plan''s service tier when the job was enqueued: a money plan''s hold is priced at it (or '
  'at the standard tier, when dearer).';
comment on column public.generation_jobs.reasons is
  'The job''s model reasons at the plan''s effort (or is not in the price book): an attempt the '
  'provider reported no usage for costs its bound (private.attempt_cost).';
comment on column public.generation_jobs.hold is
  'What enqueue added to the counter: the kind''s units on a job plan; prompt_tokens + '
  'max_output_tokens on a token plan; that call''s worst case in micro-dollars on a money plan.';
comment on column public.generation_jobs.consumed is
  'What the job''s attempts that did not end it cost, in its meter''s unit (tokens on a job or '
  'token plan, micro-dollars on a money plan): released attempts'' usage, reclaimed attempts'' '
  'last progress. A token or money plan''s job never starts an attempt that could take it past '
  '2 × hold.';

alter table public.quota_usage
  drop constraint quota_usage_meter_check,
  add constraint quota_usage_meter_check check (meter in ('jobs', 'tokens', 'money'));
comment on column public.quota_usage.meter is
  'What units_used counts: jobs, tokens or micro-dollars. A job holds on the counter of its own meter.';

-- pricing -----------------------------------------------------------------------------------------

create function private.held_prices(p_model text, p_tier text)
returns table (input_per_mtok bigint, cached_input_per_mtok bigint, output_per_mtok bigint)
language sql
stable
set search_path = ''
as $$
  select max(t.input_per_mtok), max(t.cached_input_per_mtok), max(t.output_per_mtok)
  from public.model_tiers t
  where t.model_id = p_model and t.tier in (coalesce(p_tier, 'default'), 'default')
  having count(*) > 0
$$;
comment on function private.held_prices(text, text) is
  'The prices a money hold is made at: per kind of token, the dearer of the tier''s and the '
  'standard tier''s (a flex request may be served at standard). No row: the model is not priced.';

create function private.attempt_cost(p_job public.generation_jobs, p_prompt integer,
  p_cached integer, p_completion integer, p_served_tier text, p_reported boolean)
returns integer
language plpgsql
stable
set search_path = ''
as $$
declare
  v_prompt integer := greatest(p_prompt, 0);
  v_cached integer := least(greatest(p_cached, 0), greatest(p_prompt, 0));
  v_completion integer := greatest(p_completion, 0);
  v_in bigint;
  v_cached_in bigint;
  v_out bigint;
begin
  -- Hidden reasoning cut short: billed, never reported. The attempt's bound.
  if p_job.meter <> 'jobs' and p_job.reasons and not p_reported and v_prompt + v_completion > 0 then
    return p_job.hold;
  end if;
  -- Job and token plans count tokens: no price is read (the hot path of every job plan).
  if p_job.meter <> 'money' then
    return v_prompt + v_completion;
  end if;
  -- The tier the provider says it served, when the price book has it; else what was held.
  if p_reported and p_served_tier is not null then
    select t.input_per_mtok, t.cached_input_per_mtok, t.output_per_mtok
    into v_in, v_cached_in, v_out
    from public.model_tiers t where t.model_id = p_job.model and t.tier = p_served_tier;
  end if;
  if v_in is null then
    select h.input_per_mtok, h.cached_input_per_mtok, h.output_per_mtok
    into v_in, v_cached_in, v_out
    from private.held_prices(p_job.model, p_job.service_tier) h;
  end if;
  if v_in is null then
    return p_job.hold;
  end if;
  return least(ceil(((v_prompt - v_cached)::numeric * v_in + v_cached::numeric * v_cached_in
    + v_completion::numeric * v_out) / 1000000), 2147483647)::integer;
end
$$;
comment on function private.attempt_cost(public.generation_jobs, integer, integer, integer, text, boolean) is
  'What one attempt cost in the job''s meter''s unit. Tokens (job and token plans): prompt + '
  'completion. Money: micro-dollars, rounded up, the provider''s usage at the tier it served '
  '(p_reported), a count of ours at the held prices; cached input at the cached price. A '
  'reasoning job''s attempt the provider did not report (cut short) costs its bound, the hold.';

create function private.usage_cost(p_job public.generation_jobs, p_usage jsonb)
returns integer
language plpgsql
stable
set search_path = ''
as $$
begin
  if p_usage is null then
    return 0;
  end if;
  return private.attempt_cost(p_job,
    coalesce((p_usage ->> 'prompt_tokens')::integer, 0),
    coalesce((p_usage ->> 'cached_tokens')::integer, 0),
    coalesce((p_usage ->> 'completion_tokens')::integer, 0),
    p_usage ->> 'service_tier',
    coalesce(p_usage ->> 'source' = 'provider', false));
end
$$;
comment on function private.usage_cost(public.generation_jobs, jsonb) is
  'private.attempt_cost of an attempt''s usage {"prompt_tokens", "completion_tokens", '
  '"cached_tokens", "service_tier", "source"} (0 without one).';

create function private.running_cost(p_job public.generation_jobs)
returns integer
language plpgsql
stable
set search_path = ''
as $$
begin
  return private.attempt_cost(p_job, coalesce(p_job.prompt_tokens, 0), 0, p_job.partial_tokens,
    null, false);
end
$$;
comment on function private.running_cost(public.generation_jobs) is
  'What the running attempt cost so far as SQL knows it (its prompt and last progress write), '
  'for an ending or a reclaim by someone else than its worker.';

-- transitions: each attempt's cost in the job's meter ------------------------------------------------
--
-- As before but for the unit: every place that added an attempt's tokens now adds its cost
-- (private.usage_cost for a usage, private.running_cost for what SQL knows of a running attempt),
-- and a money plan takes the token plan's rules (capture what was consumed up to the hold, no
-- bound of refunds, the 2 × hold attempt budget). enqueue_job takes the deployment's model.

drop function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb);

create or replace function private.cancel_refunds(p_job public.generation_jobs)
 RETURNS boolean
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $function$
  select case
    when p_job.status not in ('queued', 'running') then false
    when p_job.meter in ('tokens', 'money') then true
    -- A job plan's queued job whose attempts consumed nothing: always.
    when p_job.status = 'queued' and p_job.consumed = 0 then true
    else coalesce((
      select q.refunded_running_cancels < private.refund_bound(p)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
$function$;

create or replace function private.end_with_refund(p_job public.generation_jobs, p_status text, p_reason text, p_error text, p_event text, p_now timestamp with time zone, p_detail jsonb DEFAULT '{}'::jsonb, p_own integer DEFAULT NULL::integer, p_running_cancel boolean DEFAULT false)
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
      refunded_running_cancels = q.refunded_running_cancels + case when v_bounded then 1 else 0 end,
      updated_at = p_now
  where q.user_id = p_job.user_id and q.period_start = p_job.period_start and q.meter = p_job.meter
    and q.units_used >= p_job.hold - v_capture
    -- The row being updated is the one compared: two endings of one user take turns on it.
    and (not v_bounded or q.refunded_running_cancels < (
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

create or replace function public.complete_job(p_job_id uuid, p_attempt integer, p_output text, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
  select jsonb_build_object('outcome', 'completed', 'job', to_jsonb(c) - 'request_hash',
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
$function$;

create or replace function public.fail_job(p_job_id uuid, p_reason text, p_error text DEFAULT NULL::text, p_attempt integer DEFAULT NULL::integer, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb, p_seq integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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
  return jsonb_build_object('outcome', 'failed', 'job', private.job_json(private.end_with_refund(
    v_old, 'failed', p_reason, p_error, 'failed', p_now,
    private.with_usage(jsonb_build_object('attempt', p_attempt, 'reason', p_reason), p_usage),
    case when p_usage is null then null else private.usage_cost(v_old, p_usage) end
  )));
end
$function$;

create or replace function public.release_job(p_job_id uuid, p_attempt integer, p_error text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT now(), p_usage jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
declare
  v_old public.generation_jobs;
  v_tokens integer;
  v_result jsonb;
begin
  select * into v_old from public.generation_jobs j where j.id = p_job_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_old.status <> 'running' or v_old.attempts <> p_attempt then
    return jsonb_build_object('outcome', 'not_running', 'job', private.job_json(v_old));
  end if;
  v_tokens := private.usage_cost(v_old, p_usage);

  if v_old.meter in ('tokens', 'money') and v_old.consumed + v_tokens + v_old.hold > 2 * v_old.hold then
    -- As before, this attempt goes into consumed (the job's whole spend), so the ending's own is 0.
    update public.generation_jobs j set consumed = j.consumed + v_tokens where j.id = p_job_id
    returning * into v_old;
    return jsonb_build_object('outcome', 'budget_exhausted', 'job', private.job_json(
      private.end_with_refund(v_old, 'failed', 'attempt_budget_exhausted', p_error, 'failed', p_now,
        private.with_usage(jsonb_build_object('attempt', p_attempt,
          'reason', 'attempt_budget_exhausted', 'consumed', v_old.consumed), p_usage),
        0)));
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
$function$;

create or replace function public.requeue_job(p_job_id uuid, p_attempt integer, p_resume_at timestamp with time zone, p_error text DEFAULT NULL::text, p_max_hits integer DEFAULT 3, p_max_age_seconds integer DEFAULT 10800, p_now timestamp with time zone DEFAULT now(), p_count_hit boolean DEFAULT true, p_usage jsonb DEFAULT NULL::jsonb, p_capacity boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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

  -- No flex capacity is not a quota: it never counts a hit, whatever the caller says.
  v_hits := v_old.provider_quota_hits
    + case when p_count_hit and not p_capacity then 1 else 0 end;
  v_deadline := v_old.created_at + make_interval(secs => p_max_age_seconds);
  v_give_up := case
    when p_count_hit and not p_capacity and v_hits >= p_max_hits then 'hits'
    when p_now >= v_deadline then 'age'
    when p_resume_at > v_deadline then 'age'
  end;

  if v_give_up is not null then
    update public.generation_jobs j set provider_quota_hits = v_hits where j.id = p_job_id
    returning * into v_old;
    v_job := private.end_with_refund(
      v_old, 'failed',
      case when p_capacity then 'capacity_unavailable' else 'provider_quota_exhausted' end,
      p_error, 'gave_up', p_now,
      private.with_usage(
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'by', v_give_up,
          'quota_hit', p_count_hit and not p_capacity, 'resume_at', p_resume_at), p_usage
      ),
      private.usage_cost(v_old, p_usage)
    );
    return jsonb_build_object('outcome', 'gave_up', 'by', v_give_up, 'job', private.job_json(v_job));
  end if;

  with requeued as (
    update public.generation_jobs j
    set status = 'queued',
        provider_quota_hits = v_hits,
        resume_at = greatest(p_resume_at, p_now),
        waiting_for = case when p_capacity then 'capacity' else 'provider' end,
        capacity_wait_since = case when p_capacity then coalesce(j.capacity_wait_since, p_now)
          else j.capacity_wait_since end,
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
        jsonb_build_object('attempt', p_attempt, 'hits', v_hits, 'resume_at', r.resume_at,
          'waiting_for', r.waiting_for, 'quota_hit', p_count_hit and not p_capacity), p_usage
      )
    from requeued r
  )
  select jsonb_build_object('outcome', 'requeued', 'job', to_jsonb(r) - 'request_hash') into v_result
  from requeued r;
  return v_result;
end
$function$;

create or replace function public.start_job(p_job_id uuid, p_lease_seconds integer DEFAULT 90, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $function$
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

  v_consumed := v_old.consumed + case when v_old.status = 'running'
    then private.running_cost(v_old) else 0 end;
  if v_old.meter in ('tokens', 'money') and v_consumed + v_old.hold > 2 * v_old.hold then
    update public.generation_jobs j set consumed = v_consumed where j.id = p_job_id
    returning * into v_old;
    -- The dead attempt is in consumed now: the ending attempt is none (p_own 0).
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
        waiting_for = null,
        started_at = p_now,
        partial_output = null,
        partial_tokens = 0,
        thinking = false,
        reasoning_tokens = null,
        progress_at = null,
        consumed = v_consumed,
        updated_at = p_now
    where j.id = p_job_id
      and ((j.status = 'queued' and (j.resume_at is null or j.resume_at <= p_now))
        or (j.status = 'running' and j.lease_expires_at <= p_now))
    returning j.*
  ), tier as (
    -- The plan's tier; a flex job that has waited for capacity for the plan's fallback time
    -- runs this attempt on the default tier.
    select s.id,
      case when p.service_tier = 'flex' and p.flex_fallback_after_seconds is not null
          and s.capacity_wait_since is not null
          and s.capacity_wait_since + make_interval(secs => p.flex_fallback_after_seconds) <= p_now
        then 'default' else p.service_tier end as service_tier
    from started s join public.plans p on p.id = s.plan_id
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select s.id, s.user_id, p_now,
      case when v_old.status = 'running' then 'reclaimed' else 'started' end,
      v_old.status, s.status,
      jsonb_build_object('attempt', s.attempts, 'service_tier', t.service_tier)
    from started s join tier t on t.id = s.id
  )
  select jsonb_build_object(
    'outcome', 'started',
    'job', to_jsonb(s) - 'request_hash',
    'max_output_tokens', p.max_output_tokens,
    'service_tier', t.service_tier,
    'reasoning_effort', p.reasoning_effort,
    'flex_fallback_after_seconds', p.flex_fallback_after_seconds
  ) into v_result
  from started s join public.plans p on p.id = s.plan_id join tier t on t.id = s.id;
  if v_result is null then
    raise exception 'job % could not be claimed', p_job_id using errcode = 'P0001';
  end if;
  return v_result;
end
$function$;

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
    (select k.units from public.plan_kinds k where k.plan_id = p.id and k.kind = p_kind)
  into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
    v_plan.max_output_tokens, v_plan.max_refunded_running_cancels, v_plan.meter, v_plan.model,
    v_plan.service_tier, v_plan.reasoning_effort, v_period_start, v_used, v_active, v_units
  from public.plans p
  cross join lateral (
    select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
  ) b
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

  -- The model the job runs on: the plan's, else the deployment's. From its shutdown date on, the
  -- provider no longer serves it: refused here, nothing held, rather than failed at the provider.
  v_model_id := coalesce(v_plan.model, p_model);
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
  'the plan does not offer is kind_not_in_plan; a model (the plan''s, else p_model) past its '
  'shutdown date is model_retired; holds the kind''s units (job plan), p_prompt_tokens + '
  'max_output_tokens (token plan) or that call''s worst case in micro-dollars (money plan) on the '
  'counter of the plan''s meter under the limit, checks the active-job limit and the idempotency '
  'key, inserts, in one transaction. A refusal holds nothing.';

-- the catalogue watch -------------------------------------------------------------------------------

create function public.watched_models(p_default_model text default null)
returns jsonb
language sql
stable
set search_path = ''
as $$
  with used as (
    select coalesce(p.model, p_default_model) as model, p.id as plan_id
    from public.plans p
    where coalesce(p.model, p_default_model) is not null
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
  'Every model a plan runs on (a plan naming none: p_default_model, the deployment''s '
  'OPENAI_MODEL), with the plans that use it, whether the price book has it, and the shutdown '
  'date last read from the provider.';

create function public.record_model_catalogue(p_model text, p_shutdown_date date,
  p_now timestamptz default now())
returns jsonb
language plpgsql
set search_path = ''
as $$
declare
  v_before date;
  v_found boolean;
begin
  select m.shutdown_date into v_before from public.models m where m.id = p_model for update;
  v_found := found;
  if not v_found then
    return jsonb_build_object('outcome', 'not_priced');
  end if;
  update public.models m set shutdown_date = p_shutdown_date, catalogue_checked_at = p_now
  where m.id = p_model;
  return jsonb_build_object('outcome', 'recorded',
    'changed', v_before is distinct from p_shutdown_date, 'shutdown_date', p_shutdown_date);
end
$$;
comment on function public.record_model_catalogue(text, date, timestamptz) is
  'What the provider''s catalogue says of a priced model: its shutdown date (null: none announced), '
  'and when it was read. not_priced for a model the price book does not have.';

create function public.plan_worst_case(p_default_model text default null,
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
  left join lateral private.held_prices(coalesce(p.model, p_default_model), p.service_tier) h on true
  order by p.id
$$;
comment on function public.plan_worst_case(text, integer, integer) is
  'Each plan''s worst-case provider bill per period, in micro-dollars, from the price book: a job '
  'plan''s billed calls (units / the cheapest kind + refunds after spend, × attempts per job) at '
  'their prompt (p_prompt_tokens) and output bounds; a token plan''s twice its tokens at the '
  'dearest token price; a money plan''s twice its micro-dollars. Null where the model is not '
  'priced. docs/DESIGN.md#metering-hold-and-capture says why each bound holds.';

create function public.ops_plans(p_default_model text default null, p_attempts integer default 2)
returns jsonb
language sql
stable
set search_path = ''
as $$
  select jsonb_build_object('outcome', 'listed', 'plans', coalesce(jsonb_agg(jsonb_build_object(
    'plan', w.plan_id,
    'meter', w.meter,
    'model', w.model,
    'service_tier', w.service_tier,
    'worst_case_micro_usd', w.worst_case_micro_usd,
    'shutdown_date', m.shutdown_date,
    'checked_at', m.catalogue_checked_at
  ) order by w.plan_id), '[]'::jsonb))
  from public.plan_worst_case(p_default_model, p_attempts) w
  left join public.models m on m.id = w.model
$$;
comment on function public.ops_plans(text, integer) is
  'The operator page''s plans table: each plan''s model, tier and worst-case bill per period '
  '(public.plan_worst_case) with the model''s shutdown date as the catalogue watch last read it.';

-- grants --------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but
-- the service role; said again here so the intent is in the file that makes them.

alter table public.models enable row level security;
alter table public.model_tiers enable row level security;
revoke all on table public.models, public.model_tiers from public, anon, authenticated;
grant all on table public.models, public.model_tiers to service_role;

revoke all on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb, text),
  public.watched_models(text), public.record_model_catalogue(text, date, timestamptz),
  public.plan_worst_case(text, integer, integer), public.ops_plans(text, integer),
  private.held_prices(text, text),
  private.attempt_cost(public.generation_jobs, integer, integer, integer, text, boolean),
  private.usage_cost(public.generation_jobs, jsonb), private.running_cost(public.generation_jobs),
  private.check_plan_model()
  from public, anon, authenticated;
grant execute on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb, text),
  public.watched_models(text), public.record_model_catalogue(text, date, timestamptz),
  public.plan_worst_case(text, integer, integer), public.ops_plans(text, integer),
  private.held_prices(text, text),
  private.attempt_cost(public.generation_jobs, integer, integer, integer, text, boolean),
  private.usage_cost(public.generation_jobs, jsonb), private.running_cost(public.generation_jobs),
  private.check_plan_model()
  to service_role;
