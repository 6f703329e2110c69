-- quota-jobs: the hot path's SQL helpers in plpgsql, so their plans are cached.
--
-- A LANGUAGE sql function with a SET clause (every function here sets search_path = '') is
-- never inlined into its caller, and PostgreSQL plans a non-inlined SQL function's body again on
-- every call. Measured on the job's life (enqueue_job -> start_job -> complete_job, one connection,
-- pg_stat_user_functions): private.plan_kinds_json took 119 us a job of which its query was 22 us,
-- private.with_usage 42 us for a 2 us expression. A plpgsql function plans each statement once a
-- session and reuses it, which PostgREST's long-lived connections keep. The bodies are unchanged,
-- each now `return <expression>`, `return (<query>)` or `return query`; signatures, volatility,
-- grants and comments stay as they were. The transitions, the status read (get_job) and the usage read call
-- them on every request.

create or replace function private.job_json(j public.generation_jobs)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return to_jsonb(j) - 'request_hash';
end
$function$;

create or replace function private.with_usage(p_detail jsonb, p_usage jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_usage is null then p_detail else p_detail || jsonb_build_object('usage', p_usage) end;
end
$function$;

create or replace function private.plan_kinds_json(p_plan_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select coalesce(jsonb_agg(jsonb_build_object('kind', k.kind, 'units', k.units)
    order by k.units, k.kind), '[]'::jsonb)
  from public.plan_kinds k where k.plan_id = p_plan_id
  );
end
$function$;

create or replace function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamp with time zone)
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
    select q.units_used, q.refunded_running_cancels from public.quota_usage q, bounds b
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
    'refunded_running_cancels', case when p_plan.meter = 'jobs'
      then coalesce((select c.refunded_running_cancels from counter c), 0) end,
    'max_refunded_running_cancels', private.refund_bound(p_plan),
    'kinds', private.plan_kinds_json(p_plan.id)
  )
  from bounds b, active a
  );
end
$function$;

create or replace function private.usage_object(p_plan public.plans, p_period_start timestamp with time zone, p_used integer, p_active bigint)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return jsonb_build_object(
    'plan', p_plan.id,
    'used', p_used,
    'limit', p_plan.units_per_period,
    'period_start', p_period_start,
    'resets_at', private.period_end(p_plan.period, p_period_start),
    'active', p_active,
    'max_active', p_plan.max_active_jobs
  );
end
$function$;

create or replace function private.usage_tokens(p_usage jsonb)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_usage is null then 0 else
    greatest(coalesce((p_usage ->> 'prompt_tokens')::integer, 0), 0)
    + greatest(coalesce((p_usage ->> 'completion_tokens')::integer, 0), 0) end;
end
$function$;

create or replace function private.period_start(p_period text, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return date_trunc(p_period, p_now at time zone 'UTC') at time zone 'UTC';
end
$function$;

create or replace function private.period_end(p_period text, p_start timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return ((p_start at time zone 'UTC') + ('1 ' || p_period)::interval) at time zone 'UTC';
end
$function$;

create or replace function private.refund_bound(p_plan public.plans)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
 SET search_path TO ''
AS $function$
begin
  return case when p_plan.meter = 'jobs'
    then coalesce(p_plan.max_refunded_running_cancels, p_plan.units_per_period) end;
end
$function$;

create or replace function private.cancel_refunds(p_job public.generation_jobs)
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
      select q.refunded_running_cancels < private.refund_bound(p)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
  );
end
$function$;

create or replace function private.held_prices(p_model text, p_tier text)
 RETURNS TABLE(input_per_mtok bigint, cached_input_per_mtok bigint, output_per_mtok bigint)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return query
  select max(t.input_per_mtok), max(t.cached_input_per_mtok), max(t.output_per_mtok)
  from public.model_tiers t
  where t.model_id = p_model and t.tier in (coalesce(p_tier, 'default'), 'default')
  having count(*) > 0;
end
$function$;

create or replace function public.get_job(p_job_id uuid, p_user_id uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return (
  select coalesce(
    (select jsonb_build_object('outcome', 'found',
       'job', private.job_json(j) || jsonb_build_object('cancel_refunds', private.cancel_refunds(j)))
     from public.generation_jobs j where j.id = p_job_id and j.user_id = p_user_id),
    jsonb_build_object('outcome', 'not_found')
  )
  );
end
$function$;

create or replace function public.get_usage(p_user_id uuid, p_now timestamp with time zone DEFAULT now())
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $function$
begin
  return jsonb_build_object('outcome', 'usage', 'usage', private.usage_json(p_user_id, private.plan_for(p_user_id), p_now));
end
$function$;
