-- quota-jobs: job kinds. A job was one hard-wired kind (a prompt in, markdown out); now it names
-- its kind, and a plan says which kinds it offers and what each costs.
--
-- - public.job_kinds: the kinds the code knows (lib/kinds/index.ts is the one list; the rows are
--   held to it by test/db/kinds.test.ts). `document` (a prompt in, markdown out) and `extract`
--   (a text and a JSON Schema in, a JSON value out).
-- - generation_jobs.kind (default 'document', so every existing job is one) and
--   generation_jobs.input, the whole input as the client sent it ({"prompt": …} for a document,
--   backfilled for every existing job). The prompt column stays: a document's prompt, an
--   extraction's text, under the same rules (1..8,000 characters).
-- - public.plan_kinds: which kinds a plan offers, and what each costs in units on a job plan (a
--   token plan's hold is tokens, whatever the kind). Every plan offers document at 1 unit: the
--   existing ones here, a plan inserted later by the trigger below (so a plan made as before,
--   by the seed, an operator or a test, keeps offering documents); supabase/seed.sql adds extract.
-- - enqueue_job takes p_kind and p_input: unknown_kind and kind_not_in_plan are refusals that
--   hold nothing, and a job plan's hold is the kind's units (was 1). The old signature is dropped
--   so PostgREST sees one function.
-- - Failure reasons output_invalid (an extraction's output did not parse or did not validate
--   against its schema) and output_truncated (an extraction cut at the output bound).
--
-- Why a hold of k units changes no other transition: every ending already moves the counter by
-- hold − captured, and on a job plan captures 0 (refunded) or the whole hold (succeeded, or
-- refund_withheld), so a k-unit job is held, captured or released as one quantity in one
-- transition, exactly as a 1-unit job was (docs/DESIGN.md#metering-hold-and-capture). The bound
-- of refunds after spend counts endings, not units: a refunded 2-unit extraction uses one.

-- kinds ------------------------------------------------------------------------------------------

create table public.job_kinds (
  id text primary key,
  name text not null
);
alter table public.job_kinds enable row level security;
comment on table public.job_kinds is
  'What a job does with its input: document (a prompt in, markdown out), extract (a text and a '
  'JSON Schema in, a JSON value out). lib/kinds/index.ts is the one list.';

insert into public.job_kinds (id, name) values
  ('document', 'Document'),
  ('extract', 'Extraction')
on conflict (id) do update set name = excluded.name;

create table public.plan_kinds (
  plan_id text not null references public.plans (id) on delete cascade,
  kind text not null references public.job_kinds (id),
  units integer not null check (units > 0),
  primary key (plan_id, kind)
);
alter table public.plan_kinds enable row level security;
comment on table public.plan_kinds is
  'Which kinds a plan offers; units is what a job of the kind holds on a job plan (a token plan '
  'holds tokens whatever the kind). A kind without a row is refused (kind_not_in_plan).';

insert into public.plan_kinds (plan_id, kind, units)
select p.id, 'document', 1 from public.plans p
on conflict (plan_id, kind) do nothing;

create function private.offer_documents() returns trigger
language plpgsql security invoker set search_path = ''
as $$
begin
  insert into public.plan_kinds (plan_id, kind, units) values (new.id, 'document', 1)
  on conflict (plan_id, kind) do nothing;
  return null;
end
$$;
comment on function private.offer_documents() is
  'A new plan offers documents at 1 unit, as every plan did before kinds: a plan inserted as '
  'before (seed, operator, tests) keeps working. Delete its row to make a plan without them.';
create trigger plans_offer_documents after insert on public.plans
  for each row execute function private.offer_documents();

-- the job's kind and input ------------------------------------------------------------------------

alter table public.generation_jobs
  add column kind text not null default 'document' references public.job_kinds (id),
  add column input jsonb;
-- The backfill writes finished jobs too: the final-is-final trigger would refuse it.
alter table public.generation_jobs disable trigger generation_jobs_final_is_final;
update public.generation_jobs set input = jsonb_build_object('prompt', prompt) where input is null;
alter table public.generation_jobs enable trigger generation_jobs_final_is_final;
-- A row written without an input (a document inserted as before: tests, the model's conformance
-- check, an operator's repair) gets its prompt as its input, as the backfill gave every old row.
create function private.document_input() returns trigger
language plpgsql security invoker set search_path = ''
as $$
begin
  if new.input is null and new.kind = 'document' then
    new.input := jsonb_build_object('prompt', new.prompt);
  end if;
  return new;
end
$$;
comment on function private.document_input() is
  'A document row inserted without an input gets {"prompt": prompt}; any other kind must bring its own.';
create trigger generation_jobs_document_input before insert on public.generation_jobs
  for each row execute function private.document_input();
alter table public.generation_jobs
  alter column input set not null,
  add constraint generation_jobs_input_is_object check (jsonb_typeof(input) = 'object');
comment on column public.generation_jobs.kind is
  'What the job does (public.job_kinds): document or extract.';
comment on column public.generation_jobs.input is
  'The whole input as the client sent it: {"prompt"} for a document, {"text", "schema"} for an '
  'extraction. The prompt column holds the prompt or the text.';
comment on column public.generation_jobs.request_hash is
  'sha256 of the prompt (a document) or of the kind and the input''s jsonb text (any other kind): '
  'an Idempotency-Key replay with another request is refused, not served the old job.';
comment on column public.generation_jobs.hold is
  'What enqueue added to the counter: the kind''s units on a job plan; prompt_tokens + '
  'max_output_tokens on a token plan.';

comment on table public.generation_jobs is
  'One row per requested job (a document, an extraction): its state, the quota period it reserved '
  'from, and its refund. The row is also the outbox: a queued row whose message was lost is '
  'republished or ended by the sweeper.';
comment on function public.complete_job(uuid, integer, text, timestamptz, jsonb) is
  'running under this claim → succeeded with the output; captures the whole hold (job plan: the '
  'kind''s units) or least(hold, consumed + the usage''s tokens) (token plan) and releases the '
  'rest; the usage goes in the event.';

-- A job plan's hold is the kind's units at enqueue, which a row check cannot compare with
-- plan_kinds (a plan may be repriced later); generation_jobs_hold_check (hold >= 1) stays.
alter table public.generation_jobs drop constraint generation_jobs_job_meter_holds_one;

alter table public.generation_jobs drop constraint generation_jobs_failure_reason_check;
alter table public.generation_jobs add constraint generation_jobs_failure_reason_check check (
  failure_reason in ('model_refused', 'delivery_failed', 'publish_failed',
    'provider_quota_exhausted', 'lease_expired', 'max_age_exceeded', 'never_delivered',
    'attempt_budget_exhausted', 'provider_misconfigured', 'capacity_unavailable',
    'output_invalid', 'output_truncated'));

-- usage: what the plan offers -----------------------------------------------------------------------

create function private.plan_kinds_json(p_plan_id text) returns jsonb
language sql stable security invoker set search_path = ''
as $$
  select coalesce(jsonb_agg(jsonb_build_object('kind', k.kind, 'units', k.units)
    order by k.units, k.kind), '[]'::jsonb)
  from public.plan_kinds k where k.plan_id = p_plan_id
$$;
comment on function private.plan_kinds_json(text) is
  'The kinds a plan offers and their units, cheapest first: [{"kind", "units"}].';

create or replace function private.usage_json(p_user_id uuid, p_plan public.plans, p_now timestamptz) returns jsonb
language sql stable security invoker set search_path = ''
as $$
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
$$;
comment on function private.usage_json(uuid, public.plans, timestamptz) is
  'A user''s usage in the period that contains p_now: the meter, units (jobs or tokens) used on '
  'that meter''s counter and the limit, what active jobs hold, active jobs, (job plans) the '
  'refunds after spend used and allowed, null for both on a token plan, and the kinds the plan offers.';

-- enqueue: a kind and its input -------------------------------------------------------------------
-- As in 20261201090000_paid_endings.sql, plus the kind: unknown_kind (no such kind) before the
-- lock, kind_not_in_plan (with what the plan offers) after the idempotency check (a replay is
-- served the job it made, whatever the plan offers now), and a job plan's hold = the kind's units.

drop function public.enqueue_job(uuid, text, text, timestamptz, integer);

create function public.enqueue_job(
  p_user_id uuid,
  p_prompt text,
  p_idempotency_key text default null,
  p_now timestamptz default now(),
  p_prompt_tokens integer default null,
  p_kind text default 'document',
  p_input jsonb default null
) returns jsonb
language plpgsql security invoker set search_path = ''
as $$
declare
  v_plan public.plans;
  v_period_start timestamptz;
  v_hash text;
  v_job public.generation_jobs;
  v_used integer;
  v_active integer;
  v_prompt_tokens integer;
  v_hold integer;
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
    p.max_refunded_running_cancels, p.meter, b.period_start,
    (select q.units_used from public.quota_usage q
     where q.user_id = p_user_id and q.period_start = b.period_start and q.meter = p.meter),
    (select count(*) from public.generation_jobs j
     where j.user_id = p_user_id and j.status in ('queued', 'running')),
    (select k.units from public.plan_kinds k where k.plan_id = p.id and k.kind = p_kind)
  into v_plan.id, v_plan.name, v_plan.period, v_plan.units_per_period, v_plan.max_active_jobs,
    v_plan.max_output_tokens, v_plan.max_refunded_running_cancels, v_plan.meter,
    v_period_start, v_used, v_active, v_units
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

  v_hold := case when v_plan.meter = 'tokens' then v_prompt_tokens + v_plan.max_output_tokens
    else v_units end;

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
      meter, prompt_tokens, hold, created_at, queued_at, updated_at
    )
    select p_user_id, 'queued', p_kind, p_prompt, v_input, v_hash, p_idempotency_key, v_plan.id,
      v_period_start, v_plan.meter, v_prompt_tokens, v_hold, p_now, p_now, p_now
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
comment on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb) is
  'Starts a job of a kind (default document) for a user that exists (else user_not_found): a '
  'kind the plan does not offer is kind_not_in_plan; holds the kind''s units (job plan) or '
  'p_prompt_tokens + max_output_tokens (token plan) on the counter of the plan''s meter under the '
  'limit, checks the active-job limit and the idempotency key, inserts, in one transaction. A '
  'refusal holds nothing.';

-- grants -------------------------------------------------------------------------------------------
-- Default privileges (20261201000000_closed_by_default.sql) already close these to everyone but
-- the service role; said again here so the intent is in the file that makes them. Kinds and what
-- plans offer are read by signed-in users like the plans themselves.

revoke all on table public.job_kinds, public.plan_kinds from public, anon, authenticated;
grant select on table public.job_kinds, public.plan_kinds to authenticated;
grant all on table public.job_kinds, public.plan_kinds to service_role;
create policy "job kinds are readable by signed-in users" on public.job_kinds
  for select to authenticated using (true);
create policy "plan kinds are readable by signed-in users" on public.plan_kinds
  for select to authenticated using (true);

revoke all on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb),
  private.plan_kinds_json(text), private.offer_documents(), private.document_input()
  from public, anon, authenticated;
grant execute on function public.enqueue_job(uuid, text, text, timestamptz, integer, text, jsonb),
  private.plan_kinds_json(text), private.offer_documents(), private.document_input()
  to service_role;
