-- quota-jobs: organization jobs reserve on the pool and the member's row, and settle both.
--
-- enqueue_job gains p_organization_id (default null: a personal job, its path and its cost as
-- before). With one, the caller must be a member (not_a_member); the job runs on the
-- organization's plan; the pool (organization_usage) and the member's row
-- (organization_member_usage) are reserved under the plan's limit and the member's cap
-- (pool_exhausted, member_cap_reached) in the same transaction as the other checks; the active
-- bound is the plan's, over the member's active jobs in that organization. Every ending settles
-- both rows exactly as a personal ending settles quota_usage: private.end_with_refund (fail,
-- cancel, sweep, the failure callback, the attempt budget, the erasure) and complete_job; the
-- refunds after spend are counted on the pool under the organization's plan's bound.
-- quota_drift covers pools and members (its organization_id column); the erasure cancels a
-- member's organization jobs by the refund rules, keeps what they captured in the pool
-- (erased_units) and deletes their memberships and member rows; the export lists their
-- memberships and member rows. The lock order is the first migration's of organizations
-- (20261212000000_organizations.sql).

-- enqueue ----------------------------------------------------------------------------------------

drop function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb, text);

create function public.enqueue_job(p_user_id uuid, p_prompt text, p_idempotency_key text DEFAULT NULL::text, p_now timestamp with time zone DEFAULT now(), p_prompt_tokens integer DEFAULT NULL::integer, p_kind text DEFAULT 'document'::text, p_input jsonb DEFAULT NULL::jsonb, p_model text DEFAULT NULL::text, p_organization_id uuid DEFAULT NULL::uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET search_path TO ''
AS $$
declare
  v_plan public.plans;
  v_period_start timestamptz;
  v_hash text;
  v_job public.generation_jobs;
  v_used integer;
  v_member_used integer;
  v_cap integer;
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

  -- First of the lock order (user lock → job row → pool row → member row): one user's enqueues,
  -- personal or in any of their organizations, take turns.
  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));

  if p_organization_id is null then
    select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
      p.max_paid_refunds, p.meter, p.model, p.service_tier, p.reasoning_effort,
      b.period_start,
      (select q.units_used from public.quota_usage q
       where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p.meter),
      (select count(*) from public.generation_jobs j
       where j.user_id = p_user_id and j.status in ('queued', 'running')
         and j.organization_id is null),
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
  else
    -- The organization's plan, its pool and the member's row and cap, in one read.
    select p.id, p.name, p.period, p.units_per_period, p.max_active_jobs, p.max_output_tokens,
      p.max_paid_refunds, p.meter, p.model, p.service_tier, p.reasoning_effort,
      b.period_start,
      (select q.units_used from public.organization_usage q
       where q.organization_id = m.organization_id and q.period_start = b.period_start
         and q.meter = p.meter),
      (select u.units_used from public.organization_member_usage u
       where u.organization_id = m.organization_id and u.user_id = p_user_id
         and u.period_start = b.period_start and u.meter = p.meter),
      (select count(*) from public.generation_jobs j
       where j.user_id = p_user_id and j.status in ('queued', 'running')
         and j.organization_id = m.organization_id),
      k.units, k.model, m.cap
    into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
      v_plan.max_output_tokens, v_plan.max_paid_refunds, v_plan.meter, v_plan.model,
      v_plan.service_tier, v_plan.reasoning_effort, v_period_start, v_used, v_member_used,
      v_active, v_units, v_kind_model, v_cap
    from public.organization_members m
    join public.organizations o on o.id = m.organization_id
    join public.plans p on p.id = o.plan
    cross join lateral (
      select date_trunc(p.period, p_now at time zone 'UTC') at time zone 'UTC' as period_start
    ) b
    left join public.plan_kinds k on k.plan_id = p.id and k.kind = p_kind
    where m.organization_id = p_organization_id and m.user_id = p_user_id;
    if not found then
      -- No such organization, or not theirs: the same answer, so it tells nothing of others.
      return jsonb_build_object('outcome', 'not_a_member');
    end if;
  end if;

  if p_idempotency_key is not null then
    select * into v_job from public.generation_jobs j
    where j.user_id = p_user_id and j.idempotency_key = p_idempotency_key;
    if found then
      if v_job.request_hash <> v_hash
         or v_job.organization_id is distinct from p_organization_id then
        return jsonb_build_object('outcome', 'idempotency_key_reused', 'job_id', v_job.id);
      end if;
      return jsonb_build_object(
        'outcome', 'replayed',
        'job', private.job_json(v_job),
        'usage', case when p_organization_id is null
          then private.usage_json(p_user_id, v_plan, p_now)
          else private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now) end
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

  if p_organization_id is not null then
    -- The pool's limit, the member's cap, the member's active jobs there: refused before anything
    -- is held (the reservation's guards refuse what a race makes of these reads).
    if coalesce(v_used, 0) + v_hold > v_plan.units_per_period then
      return jsonb_build_object('outcome', 'pool_exhausted', 'hold', v_hold,
        'resets_at', private.period_end(v_plan.period, v_period_start),
        'usage', private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now));
    end if;
    if v_cap is not null and coalesce(v_member_used, 0) + v_hold > v_cap then
      return jsonb_build_object('outcome', 'member_cap_reached', 'hold', v_hold,
        'resets_at', private.period_end(v_plan.period, v_period_start),
        'usage', private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now));
    end if;
    if v_active >= v_plan.max_active_jobs then
      return jsonb_build_object('outcome', 'too_many_active_jobs',
        'usage', private.organization_usage_json(p_organization_id, p_user_id, v_plan, p_now));
    end if;
    return private.enqueue_in_organization(p_organization_id, p_user_id, v_plan, v_period_start,
      v_cap, v_active, v_hold,
      jsonb_build_object('kind', p_kind, 'prompt', p_prompt, 'input', v_input, 'hash', v_hash,
        'idempotency_key', p_idempotency_key, 'prompt_tokens', v_prompt_tokens,
        'model', v_model_id, 'reasons', v_reasons),
      p_now);
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
$$;
comment on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb, text, uuid) is
  'Starts a job of a kind (default document) for a user that exists (else user_not_found): a '
  'kind the plan does not offer is kind_not_in_plan; a model (the kind''s on the plan, else the '
  'plan''s, else p_model) past its shutdown date is model_retired; holds the kind''s units (job '
  'plan), p_prompt_tokens + max_output_tokens (token plan) or that call''s worst case in '
  'micro-dollars (money plan) on the counter of the plan''s meter under the limit, checks the '
  'active-job limit and the idempotency key, inserts, in one transaction. With '
  'p_organization_id: the caller must be a member (not_a_member), the plan is the '
  'organization''s, and the hold goes on its pool and the member''s row, under the plan''s limit '
  '(pool_exhausted) and the member''s cap (member_cap_reached) (private.enqueue_in_organization). '
  'A refusal holds nothing.';

-- The organization reservation of enqueue_job, called under the user's lock once its checks
-- passed. Its outcomes are enqueue_job's (its row in DESIGN).
create function private.enqueue_in_organization(p_organization_id uuid, p_user_id uuid,
  p_plan public.plans, p_period_start timestamptz, p_cap integer, p_active integer,
  p_hold bigint, p_job jsonb, p_now timestamptz)
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_result jsonb;
begin
  -- The pool row, then the member row (the lock order); each guarded by its limit, so a race
  -- the reads above did not see is refused by the row that was changed, never overshot.
  with pool as (
    insert into public.organization_usage as q (organization_id, period_start, meter,
      units_used, updated_at)
    values (p_organization_id, p_period_start, p_plan.meter, p_hold, p_now)
    on conflict (organization_id, period_start, meter) do update
      set units_used = q.units_used + p_hold, updated_at = p_now
      where q.units_used + p_hold <= p_plan.units_per_period
    returning q.units_used
  ), member as (
    insert into public.organization_member_usage as u (organization_id, user_id, period_start,
      meter, units_used, updated_at)
    select p_organization_id, p_user_id, p_period_start, p_plan.meter, p_hold, p_now from pool
    on conflict (organization_id, user_id, period_start, meter) do update
      set units_used = u.units_used + p_hold, updated_at = p_now
      where p_cap is null or u.units_used + p_hold <= p_cap
    returning u.units_used
  ), inserted as (
    insert into public.generation_jobs (
      user_id, organization_id, status, kind, prompt, input, request_hash, idempotency_key,
      plan_id, period_start, meter, prompt_tokens, hold, model, service_tier, reasons,
      created_at, queued_at, updated_at
    )
    select p_user_id, p_organization_id, 'queued', p_job ->> 'kind', p_job ->> 'prompt',
      p_job -> 'input', p_job ->> 'hash', p_job ->> 'idempotency_key', p_plan.id,
      p_period_start, p_plan.meter, (p_job ->> 'prompt_tokens')::integer, p_hold,
      p_job ->> 'model', p_plan.service_tier, (p_job ->> 'reasons')::boolean, p_now, p_now, p_now
    from member
    returning *
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select i.id, i.user_id, p_now, 'enqueued', null, i.status,
      jsonb_build_object('plan', p_plan.id, 'kind', i.kind, 'hold', p_hold,
        'organization_id', p_organization_id)
    from inserted i
  )
  select case when i.id is null then null else jsonb_build_object(
    'outcome', 'enqueued',
    'job', to_jsonb(i) - 'request_hash',
    'usage', private.usage_object(p_plan, p_period_start, r.units_used, p_active + 1)
      || jsonb_build_object('meter', p_plan.meter, 'kinds', private.plan_kinds_json(p_plan.id),
        'organization_id', p_organization_id, 'member_used', mu.units_used, 'member_cap', p_cap)
  ) end into v_result
  from pool r left join member mu on true left join inserted i on true;
  if not found then
    -- The pool's guard refused: another member's enqueue took the room since the read above.
    return jsonb_build_object('outcome', 'pool_exhausted', 'hold', p_hold,
      'resets_at', private.period_end(p_plan.period, p_period_start),
      'usage', private.organization_usage_json(p_organization_id, p_user_id, p_plan, p_now));
  end if;
  if v_result is null then
    -- The member's guard refused after the pool was reserved: unreachable under the user's lock
    -- (only this user's enqueues raise their row); refuse the whole call rather than keep a pool
    -- hold with no job.
    raise exception 'enqueue_job: member cap guard refused after the pool reservation'
      using errcode = 'P0001';
  end if;
  return v_result;
end
$$;
comment on function private.enqueue_in_organization(uuid, uuid, public.plans, timestamptz, integer, integer, bigint, jsonb, timestamptz) is
  'enqueue_job''s organization reservation, under the user''s lock and after its checks: the '
  'pool row, then the member row, each guarded by its limit, then the job and its event. The '
  'pool''s guard refusing (another member took the room) is pool_exhausted, nothing held.';

create function private.organization_usage_json(p_organization_id uuid, p_user_id uuid,
  p_plan public.plans, p_now timestamptz)
returns jsonb
language plpgsql
stable
set search_path to ''
as $$
declare
  v_start timestamptz := private.period_start(p_plan.period, p_now);
begin
  return (
  select private.usage_object(p_plan, v_start, coalesce(q.units_used, 0), a.n)
    || jsonb_build_object(
      'meter', p_plan.meter,
      'held', a.held,
      'paid_refunds', case when p_plan.meter = 'jobs' then coalesce(q.paid_refunds, 0) end,
      'max_paid_refunds', private.refund_bound(p_plan),
      'kinds', private.plan_kinds_json(p_plan.id),
      'organization_id', p_organization_id,
      'member_used', coalesce((select u.units_used from public.organization_member_usage u
        where u.organization_id = p_organization_id and u.user_id = p_user_id
          and u.period_start = v_start and u.meter = p_plan.meter), 0),
      'member_cap', (select m.cap from public.organization_members m
        where m.organization_id = p_organization_id and m.user_id = p_user_id))
  from (select count(*) as n, coalesce(sum(j.hold), 0) as held from public.generation_jobs j
        where j.user_id = p_user_id and j.organization_id = p_organization_id
          and j.status in ('queued', 'running')) a
  left join public.organization_usage q on q.organization_id = p_organization_id
    and q.period_start = v_start and q.meter = p_plan.meter
  );
end
$$;
comment on function private.organization_usage_json(uuid, uuid, public.plans, timestamptz) is
  'A member''s usage in an organization in the period that contains p_now, in usage_json''s '
  'shape: used and limit are the pool''s; held and active the member''s jobs there; member_used '
  'and member_cap their row and cap.';

-- A personal job's usage leaves organization jobs out (they hold on their pools).
create or replace function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $$
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
      and j.organization_id is null
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
$$;

-- endings ----------------------------------------------------------------------------------------

create or replace function private.end_with_refund(p_job public.generation_jobs, p_status text, p_reason text, p_error text, p_event text, p_now timestamp with time zone, p_detail jsonb DEFAULT '{}'::jsonb, p_own integer DEFAULT NULL::integer, p_running_cancel boolean DEFAULT false)
 RETURNS public.generation_jobs
 LANGUAGE plpgsql
 SET search_path TO ''
AS $$
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
  if p_job.organization_id is null then
    update public.quota_usage q
    set units_used = q.units_used - (p_job.hold - v_capture),
        paid_refunds = q.paid_refunds + case when v_bounded then 1 else 0 end,
        updated_at = p_now
    where q.user_id = p_job.user_id and q.period_start = p_job.period_start
      and q.meter = p_job.meter
      and q.units_used >= p_job.hold - v_capture
      -- The row being updated is the one compared: two endings of one user take turns on it.
      and (not v_bounded or q.paid_refunds < (
        select private.refund_bound(p) from public.plans p where p.id = p_job.plan_id));
    v_refunded := found;
    if not v_refunded and not (v_bounded and exists (
      select from public.quota_usage q
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter
    )) then
      -- A hold with no counter to release it to is drift: refuse the whole transition (the
      -- caller sees an error and retries) rather than end the job without its release.
      raise exception 'no hold to release for job % (user %, period %)',
        p_job.id, p_job.user_id, p_job.period_start using errcode = 'P0001';
    end if;
  else
    -- The pool (after the job row, before the member row): the refund after spend is counted
    -- here, under the organization's plan's bound (the job's plan_id is the organization's).
    update public.organization_usage q
    set units_used = q.units_used - (p_job.hold - v_capture),
        paid_refunds = q.paid_refunds + case when v_bounded then 1 else 0 end,
        updated_at = p_now
    where q.organization_id = p_job.organization_id and q.period_start = p_job.period_start
      and q.meter = p_job.meter
      and q.units_used >= p_job.hold - v_capture
      and (not v_bounded or q.paid_refunds < (
        select private.refund_bound(p) from public.plans p where p.id = p_job.plan_id));
    v_refunded := found;
    if not v_refunded and not (v_bounded and exists (
      select from public.organization_usage q
      where q.organization_id = p_job.organization_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter
    )) then
      raise exception 'no hold to release for job % (organization %, period %)',
        p_job.id, p_job.organization_id, p_job.period_start using errcode = 'P0001';
    end if;
    -- The member's row gives back what the pool gave back, no more, no less.
    if v_refunded and p_job.hold > v_capture then
      update public.organization_member_usage u
      set units_used = u.units_used - (p_job.hold - v_capture), updated_at = p_now
      where u.organization_id = p_job.organization_id and u.user_id = p_job.user_id
        and u.period_start = p_job.period_start and u.meter = p_job.meter
        and u.units_used >= p_job.hold - v_capture;
      if not found then
        raise exception 'no member hold to release for job % (organization %, period %)',
          p_job.id, p_job.organization_id, p_job.period_start using errcode = 'P0001';
      end if;
    end if;
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
$$;
comment on function private.end_with_refund(public.generation_jobs, text, text, text, text, timestamptz, jsonb, integer, boolean) is
  'Ends a locked active job failed or canceled. Token plan: captures least(hold, consumed + the '
  'ending attempt''s tokens) and releases the rest. Job plan: refunds the unit; after provider '
  'spend (consumed, the ending attempt''s tokens, or a running cancel) only under the plan''s '
  'bound of refunds after spend, counted, else keeps it (refund_withheld). '
  'provider_misconfigured: captures 0, never bounded. An organization job releases on its pool '
  '(where the refund after spend is counted, under the organization''s plan''s bound), then the '
  'same amount on the member''s row. Raises if the job is no longer active or has no counter.';

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
    where c.hold > c.captured and c.organization_id is null
      and q.user_id = c.user_id and q.period_start = c.period_start and q.meter = c.meter
      and q.units_used >= c.hold - c.captured
    returning 1
  ), pool_released as (
    -- An organization job: the pool, then the member's row (the lock order).
    update public.organization_usage q
    set units_used = q.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured and c.organization_id is not null
      and q.organization_id = c.organization_id and q.period_start = c.period_start
      and q.meter = c.meter and q.units_used >= c.hold - c.captured
    returning 1
  ), member_released as (
    update public.organization_member_usage u
    set units_used = u.units_used - (c.hold - c.captured), updated_at = p_now
    from completed c
    where c.hold > c.captured and c.organization_id is not null
      and exists (select from pool_released)
      and u.organization_id = c.organization_id and u.user_id = c.user_id
      and u.period_start = c.period_start and u.meter = c.meter
      and u.units_used >= c.hold - c.captured
    returning 1
  ), logged as (
    insert into public.job_events (job_id, user_id, at, event, from_status, to_status, detail)
    select c.id, c.user_id, p_now, 'completed', 'running', c.status,
      private.with_usage(jsonb_build_object('attempt', p_attempt, 'captured', c.captured,
        'released', c.hold - c.captured), p_usage)
    from completed c
  )
  select jsonb_build_object('outcome', 'completed', 'job', private.ending_json(c::public.generation_jobs),
    'released', c.hold = c.captured or exists (select from released)
      or (exists (select from pool_released) and exists (select from member_released)))
  into v_result
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
comment on function public.complete_job(uuid, integer, text, timestamptz, jsonb) is
  'running under this claim → succeeded with the output; captures the whole hold (job plan: the '
  'kind''s units) or least(hold, consumed + the usage''s tokens) (token plan) and releases the '
  'rest (an organization job: on its pool, then on the member''s row); the usage goes in the '
  'event. Answers completed with the job''s state (private.ending_json).';

create or replace function private.cancel_refunds(p_job public.generation_jobs)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE
 SET search_path TO ''
AS $$
begin
  return (
  select case
    when p_job.status not in ('queued', 'running') then false
    when p_job.meter in ('tokens', 'money') then true
    -- A job plan's queued job whose attempts consumed nothing: always.
    when p_job.status = 'queued' and p_job.consumed = 0 then true
    when p_job.organization_id is not null then coalesce((
      select q.paid_refunds < private.refund_bound(p)
      from public.organization_usage q, public.plans p
      where q.organization_id = p_job.organization_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
    else coalesce((
      select q.paid_refunds < private.refund_bound(p)
      from public.quota_usage q, public.plans p
      where q.user_id = p_job.user_id and q.period_start = p_job.period_start
        and q.meter = p_job.meter and p.id = p_job.plan_id
    ), false)
  end
  );
end
$$;
comment on function private.cancel_refunds(public.generation_jobs) is
  'Whether canceling this job now would give back what it holds: on a token plan, the rest '
  'beyond what it consumed; on a job plan, always for a queued job whose attempts consumed '
  'nothing, else while the refunds after spend of its period (an organization job: its '
  'pool''s) are under its plan''s bound.';

-- drift ------------------------------------------------------------------------------------------

drop view public.quota_drift;
drop function private.quota_drift_since(timestamptz);

create function private.quota_drift_since(p_since timestamp with time zone)
 RETURNS TABLE(user_id uuid, period_start timestamp with time zone, units_used integer, units_expected bigint, meter text, organization_id uuid)
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $$
  with reserved as (
    select j.user_id, j.period_start, j.meter, sum(coalesce(j.captured, j.hold)) as units_expected
    from public.generation_jobs j
    where j.period_start >= p_since and j.organization_id is null
    group by j.user_id, j.period_start, j.meter
  ), used as (
    select u.user_id, u.period_start, u.meter, u.units_used
    from public.quota_usage u
    where u.period_start >= p_since
  ), org_jobs as (
    select j.organization_id, j.user_id, j.period_start, j.meter,
      sum(coalesce(j.captured, j.hold)) as units_expected
    from public.generation_jobs j
    where j.organization_id is not null and j.period_start >= p_since
    group by j.organization_id, j.user_id, j.period_start, j.meter
  ), pool_reserved as (
    select o.organization_id, o.period_start, o.meter, sum(o.units_expected) as units_expected
    from org_jobs o group by o.organization_id, o.period_start, o.meter
  ), pools as (
    select q.organization_id, q.period_start, q.meter, q.units_used, q.erased_units
    from public.organization_usage q where q.period_start >= p_since
  ), members as (
    select m.organization_id, m.user_id, m.period_start, m.meter, m.units_used
    from public.organization_member_usage m where m.period_start >= p_since
  )
  select
    coalesce(u.user_id, r.user_id),
    coalesce(u.period_start, r.period_start),
    coalesce(u.units_used, 0),
    coalesce(r.units_expected, 0)::bigint,
    coalesce(u.meter, r.meter),
    null::uuid
  from used u
  full join reserved r
    on r.user_id = u.user_id and r.period_start = u.period_start and r.meter = u.meter
  where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0)
  union all
  -- A pool: its jobs' holds and captures, plus what erased members' jobs captured.
  select null::uuid, coalesce(p.period_start, r.period_start), coalesce(p.units_used, 0),
    (coalesce(r.units_expected, 0) + coalesce(p.erased_units, 0))::bigint,
    coalesce(p.meter, r.meter), coalesce(p.organization_id, r.organization_id)
  from pools p
  full join pool_reserved r on r.organization_id = p.organization_id
    and r.period_start = p.period_start and r.meter = p.meter
  where coalesce(p.units_used, 0) <> coalesce(r.units_expected, 0) + coalesce(p.erased_units, 0)
  union all
  -- A member in an organization: their jobs there.
  select coalesce(m.user_id, o.user_id), coalesce(m.period_start, o.period_start),
    coalesce(m.units_used, 0), coalesce(o.units_expected, 0)::bigint, coalesce(m.meter, o.meter),
    coalesce(m.organization_id, o.organization_id)
  from members m
  full join org_jobs o on o.organization_id = m.organization_id and o.user_id = m.user_id
    and o.period_start = m.period_start and o.meter = m.meter
  where coalesce(m.units_used, 0) <> coalesce(o.units_expected, 0)
$$;
comment on function private.quota_drift_since(timestamptz) is
  'quota_drift''s rows for the periods that start at or after p_since (-infinity: all of them, '
  'the view): users (organization_id null), organization pools (user_id null; erased members'' '
  'captures count) and members in an organization (both set).';

create view public.quota_drift with (security_invoker = true) as
  select d.user_id, d.period_start, d.units_used, d.units_expected, d.meter, d.organization_id
  from private.quota_drift_since('-infinity'::timestamptz) d;
comment on view public.quota_drift is
  'Counters that differ from their open holds plus their captures (an active job counts its '
  'hold, a final one what it captured): a user''s (organization_id null), an organization''s '
  'pool (user_id null) or a member''s row in an organization (both set). Always empty.';
revoke all on public.quota_drift from public, anon, authenticated;
grant select on public.quota_drift to service_role;

-- erasure and export -----------------------------------------------------------------------------

create or replace function private.erase_user_data(p_user_id uuid, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO ''
AS $$
declare
  v_old public.generation_jobs;
  v_canceled integer := 0;
  v_jobs integer;
  v_events integer;
begin
  -- Enqueue takes this lock for the user: no job starts while their rows go.
  perform pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));
  -- Every job of the user, locked before any counter is touched: a worker's transition waits,
  -- then finds its job gone (not_found), and no lock order can cycle with it.
  perform from public.generation_jobs j where j.user_id = p_user_id order by j.id for update;
  -- Then the pools of their organization jobs, in (organization, period, meter) order: the only
  -- transaction that holds more than one pool takes them sorted (the lock order).
  perform from public.organization_usage q
  where (q.organization_id, q.period_start, q.meter) in (
    select j.organization_id, j.period_start, j.meter from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id is not null)
  order by q.organization_id, q.period_start, q.meter
  for update;

  -- Active jobs end as the user's own cancel ends them (refund rules included); the worker of a
  -- running one learns it at its next progress write and stops the model.
  for v_old in
    select * from public.generation_jobs j
    where j.user_id = p_user_id and j.status in ('queued', 'running') order by j.id
  loop
    perform private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('by', 'erasure'), null, v_old.status = 'running');
    v_canceled := v_canceled + 1;
  end loop;

  -- What the provider billed for these jobs stays countable, without the user.
  insert into public.erased_usage as u (period_start, plan_id, kind, meter, jobs, captured,
    consumed, prompt_tokens, completion_tokens, updated_at)
  select t.period_start, t.plan_id, t.kind, t.meter, count(*), sum(t.captured), sum(t.consumed),
    sum(t.prompt_tokens), sum(t.completion_tokens), p_now
  from (
    select j.period_start, j.plan_id, j.kind, j.meter, j.captured, j.consumed,
      b.prompt_tokens + case when c.canceled then coalesce(j.prompt_tokens, 0) else 0 end
        as prompt_tokens,
      b.completion_tokens + case when c.canceled then j.partial_tokens else 0 end
        as completion_tokens
    from public.generation_jobs j
    -- Every attempt's usage as its transition (or record_attempt_usage) wrote it.
    cross join lateral (
      select
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'prompt_tokens')::bigint, 0), 0)), 0)
          as prompt_tokens,
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'completion_tokens')::bigint, 0), 0)), 0)
          as completion_tokens
      from public.job_events e where e.job_id = j.id and e.detail ? 'usage'
    ) b
    -- A running attempt this erasure canceled reported no usage: counted as the cancel charged it
    -- (its prompt and last recorded progress).
    cross join lateral (
      select exists (select from public.job_events x
        where x.job_id = j.id and x.event = 'canceled' and x.from_status = 'running'
          and x.detail ->> 'by' = 'erasure') as canceled
    ) c
    where j.user_id = p_user_id
  ) t
  group by t.period_start, t.plan_id, t.kind, t.meter
  on conflict (period_start, plan_id, kind, meter) do update
    set jobs = u.jobs + excluded.jobs,
        captured = u.captured + excluded.captured,
        consumed = u.consumed + excluded.consumed,
        prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens,
        updated_at = p_now;

  -- Their organization jobs are all final now: what they captured stays in the pool (the team
  -- paid for it), held there without them.
  update public.organization_usage q
  set erased_units = q.erased_units + s.captured, updated_at = p_now
  from (
    select j.organization_id, j.period_start, j.meter, sum(j.captured) as captured
    from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id is not null
    group by j.organization_id, j.period_start, j.meter
  ) s
  where q.organization_id = s.organization_id and q.period_start = s.period_start
    and q.meter = s.meter and s.captured > 0;

  perform pg_catalog.set_config('quota_jobs.erasing', 'on', true);
  delete from public.job_events e where e.user_id = p_user_id;
  get diagnostics v_events = row_count;
  -- Their superseded callbacks keep their rows, without the job id (on delete set null).
  delete from public.generation_jobs j where j.user_id = p_user_id;
  get diagnostics v_jobs = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  -- Every job went with its hold or capture, so the counters go too (quota_drift stays empty).
  delete from public.quota_usage q where q.user_id = p_user_id;
  delete from public.organization_member_usage m where m.user_id = p_user_id;
  delete from public.organization_members m where m.user_id = p_user_id;
  delete from public.user_plans p where p.user_id = p_user_id;
  -- A pseudonym in a kept log line now names no one.
  delete from private.user_pseudonyms s where s.user_id = p_user_id;

  return jsonb_build_object('outcome', 'erased', 'jobs', v_jobs, 'canceled', v_canceled,
    'events', v_events);
end
$$;
comment on function private.erase_user_data(uuid, timestamptz) is
  'A user''s erasure: cancels their active jobs (cancel_job''s refund rule), adds their jobs'' '
  'cost to public.erased_usage (no user) and their organization jobs'' captures to their pools'' '
  'erased_units, deletes their job_events, generation_jobs (their superseded_callbacks rows keep '
  'no job id), quota_usage, organization_member_usage, organization_members, user_plans and '
  'user_pseudonyms rows. Serialized per user with enqueue (its advisory lock); locks their jobs, '
  'then their pools in order. A second call finds nothing and erases 0. Security definer: '
  'deleting events is allowed only to the owner (private.erasing).';

create or replace function public.export_user(p_user_id uuid, p_after_created_at timestamp with time zone DEFAULT NULL::timestamp with time zone, p_after_id uuid DEFAULT NULL::uuid, p_limit integer DEFAULT 100)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
 SET search_path TO ''
AS $$
  with lim as (
    select least(greatest(coalesce(p_limit, 100), 1), 500) as n
  ), page as (
    select j from public.generation_jobs j
    where j.user_id = p_user_id
      and (p_after_created_at is null or (j.created_at, j.id) > (p_after_created_at, p_after_id))
    order by j.created_at, j.id
    limit (select n + 1 from lim)
  ), shown as (
    select p.j from page p order by (p.j).created_at, (p.j).id limit (select n from lim)
  )
  select jsonb_build_object(
    'outcome', 'exported',
    'jobs', coalesce((
      select jsonb_agg(private.job_json(s.j) || jsonb_build_object('events', coalesce((
        select jsonb_agg(to_jsonb(e) - 'user_id' - 'job_id' order by e.at, e.id)
        from public.job_events e where e.job_id = (s.j).id and e.user_id = p_user_id
      ), '[]'::jsonb)) order by (s.j).created_at, (s.j).id)
      from shown s
    ), '[]'::jsonb),
    'has_more', (select count(*) from page) > (select n from lim)
  ) || case when p_after_created_at is not null then '{}'::jsonb else jsonb_build_object(
    'plan', (select to_jsonb(up) - 'user_id' from public.user_plans up where up.user_id = p_user_id),
    'log_pseudonym', (select s.pseudonym from private.user_pseudonyms s where s.user_id = p_user_id),
    'usage', coalesce((
      select jsonb_agg(to_jsonb(q) - 'user_id' order by q.period_start, q.meter)
      from public.quota_usage q where q.user_id = p_user_id
    ), '[]'::jsonb),
    -- Their memberships and what they held in each organization (not the pool: the team's).
    'organizations', coalesce((
      select jsonb_agg(jsonb_build_object('organization_id', m.organization_id, 'name', o.name,
        'role', m.role, 'cap', m.cap, 'joined_at', m.created_at, 'usage', coalesce((
          select jsonb_agg(to_jsonb(u) - 'user_id' - 'organization_id'
            order by u.period_start, u.meter)
          from public.organization_member_usage u
          where u.user_id = p_user_id and u.organization_id = m.organization_id
        ), '[]'::jsonb)) order by m.created_at, m.organization_id)
      from public.organization_members m join public.organizations o on o.id = m.organization_id
      where m.user_id = p_user_id
    ), '[]'::jsonb)
  ) end
$$;
comment on function public.export_user(uuid, timestamptz, uuid, integer) is
  'GET /api/me/export, one page: the user''s jobs oldest first, their organization jobs '
  'included (every column but the prompt hash, each with its events), keyset-paginated on '
  '(created_at, id), at most 500 a page; the first page (no cursor) also carries their '
  'user_plans row, quota_usage rows, log pseudonym (null when no log line named them yet) and '
  'their organizations (membership, cap and their own usage rows there).';
