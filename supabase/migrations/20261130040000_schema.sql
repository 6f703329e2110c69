-- quota-jobs: tables, constraints, indexes, row level security and the drift view.
-- The job state machine and every transition live in the next migration.

create schema if not exists private;
comment on schema private is
  'Helpers for the transition functions. Not exposed through the API (PostgREST serves public only).';
revoke all on schema private from public;
grant usage on schema private to service_role;

-- plans ---------------------------------------------------------------------------------------

create table public.plans (
  id text primary key,
  name text not null,
  period text not null check (period in ('day', 'month')),
  units_per_period integer not null check (units_per_period >= 0),
  max_active_jobs integer not null check (max_active_jobs >= 1)
);
comment on table public.plans is
  'Usage plans: how many units a user may reserve per UTC period and how many jobs may be active at once.';

create table public.user_plans (
  user_id uuid primary key references auth.users (id) on delete cascade,
  plan_id text not null references public.plans (id),
  updated_at timestamptz not null default now()
);
comment on table public.user_plans is
  'Which plan a user is on. A user without a row is on the free plan.';

-- quota ---------------------------------------------------------------------------------------

create table public.quota_usage (
  user_id uuid not null,
  period_start timestamptz not null,
  units_used integer not null default 0 check (units_used >= 0),
  updated_at timestamptz not null default now(),
  primary key (user_id, period_start)
);
comment on table public.quota_usage is
  'Units reserved per user and UTC period, net of refunds. Changed only by the transition functions.';

-- jobs ----------------------------------------------------------------------------------------

create table public.generation_jobs (
  id uuid primary key default gen_random_uuid(),
  user_id uuid not null,
  status text not null default 'queued'
    check (status in ('queued', 'running', 'succeeded', 'failed', 'canceled')),
  prompt text not null check (char_length(prompt) between 1 and 8000),
  request_hash text not null,
  idempotency_key text check (char_length(idempotency_key) between 1 and 255),
  plan_id text not null references public.plans (id),
  period_start timestamptz not null,
  output text,
  failure_reason text check (failure_reason in (
    'model_refused', 'delivery_failed', 'publish_failed', 'provider_quota_exhausted',
    'lease_expired', 'max_age_exceeded', 'never_delivered'
  )),
  last_error text,
  attempts integer not null default 0 check (attempts >= 0),
  provider_quota_hits integer not null default 0 check (provider_quota_hits >= 0),
  publish_seq integer not null default 1 check (publish_seq >= 1),
  republish_count integer not null default 0 check (republish_count >= 0),
  resume_at timestamptz,
  lease_expires_at timestamptz,
  created_at timestamptz not null,
  queued_at timestamptz not null,
  started_at timestamptz,
  finished_at timestamptz,
  refunded_at timestamptz,
  updated_at timestamptz not null,
  constraint generation_jobs_idempotency_key_per_user unique (user_id, idempotency_key),
  constraint generation_jobs_finished_iff_terminal
    check ((status in ('succeeded', 'failed', 'canceled')) = (finished_at is not null)),
  constraint generation_jobs_refunded_iff_failed_or_canceled
    check ((status in ('failed', 'canceled')) = (refunded_at is not null)),
  constraint generation_jobs_output_only_when_succeeded
    check (output is null or status = 'succeeded'),
  constraint generation_jobs_reason_iff_failed
    check ((status = 'failed') = (failure_reason is not null)),
  constraint generation_jobs_lease_iff_running
    check ((status = 'running') = (lease_expires_at is not null)),
  constraint generation_jobs_resume_only_when_queued
    check (resume_at is null or status = 'queued')
);
comment on table public.generation_jobs is
  'One row per requested document: its state, the quota period it reserved from, and its refund. '
  'The row is also the outbox: a queued row whose message was lost is republished or ended by the sweeper.';
comment on column public.generation_jobs.request_hash is
  'sha256 of the prompt: an Idempotency-Key replay with another prompt is refused, not served the old job.';
comment on column public.generation_jobs.attempts is
  'How many times a worker claimed the job; the claim number guards complete/requeue/release/fail.';
comment on column public.generation_jobs.publish_seq is
  'Which QStash message currently stands for the job; the publish deduplication id is job id + this.';
comment on column public.generation_jobs.refunded_at is
  'When the reserved unit came back. Set by the same statement that ends the job failed or canceled.';

create index generation_jobs_user_created on public.generation_jobs (user_id, created_at desc, id desc);
create index generation_jobs_user_active on public.generation_jobs (user_id)
  where status in ('queued', 'running');
create index generation_jobs_running_lease on public.generation_jobs (lease_expires_at)
  where status = 'running';
create index generation_jobs_queued_since on public.generation_jobs ((coalesce(resume_at, queued_at)))
  where status = 'queued';
create index generation_jobs_active_created on public.generation_jobs (created_at)
  where status in ('queued', 'running');

create function private.forbid_changing_final_jobs() returns trigger
language plpgsql security invoker set search_path = ''
as $$
begin
  if old.status in ('succeeded', 'failed', 'canceled') then
    raise exception 'job % is % and final', old.id, old.status using errcode = 'P0001';
  end if;
  return new;
end
$$;
comment on function private.forbid_changing_final_jobs() is
  'A final job never changes again: no second refund, no completion over a cancel, whatever the caller.';

create trigger generation_jobs_final_is_final
  before update on public.generation_jobs
  for each row execute function private.forbid_changing_final_jobs();

-- events --------------------------------------------------------------------------------------

create table public.job_events (
  id bigint generated always as identity primary key,
  job_id uuid not null references public.generation_jobs (id),
  user_id uuid not null,
  at timestamptz not null,
  event text not null,
  from_status text,
  to_status text not null,
  detail jsonb not null default '{}'::jsonb
);
comment on table public.job_events is
  'Append-only log of every transition, written in the transition''s own transaction.';
create index job_events_job on public.job_events (job_id, id);
create index job_events_user on public.job_events (user_id, id);

create function private.forbid_changing_events() returns trigger
language plpgsql security invoker set search_path = ''
as $$
begin
  raise exception 'job_events is append-only' using errcode = 'P0001';
end
$$;
comment on function private.forbid_changing_events() is 'Keeps job_events append-only.';

create trigger job_events_append_only
  before update or delete on public.job_events
  for each row execute function private.forbid_changing_events();

-- drift (docs/DESIGN.md#invariant-1-no-drift) ---------------------------------------------------

create view public.quota_drift with (security_invoker = true) as
with reserved as (
  select user_id, period_start, count(*) filter (where refunded_at is null) as units_expected
  from public.generation_jobs
  group by user_id, period_start
)
select
  coalesce(u.user_id, r.user_id) as user_id,
  coalesce(u.period_start, r.period_start) as period_start,
  coalesce(u.units_used, 0) as units_used,
  coalesce(r.units_expected, 0) as units_expected
from public.quota_usage u
full join reserved r on r.user_id = u.user_id and r.period_start = u.period_start
where coalesce(u.units_used, 0) <> coalesce(r.units_expected, 0);
comment on view public.quota_drift is
  'Users and periods whose counter differs from their jobs reserved and not refunded. Always empty.';

-- row level security --------------------------------------------------------------------------
-- A signed-in user reads only their own rows; nobody but the service role writes (no write
-- policies, and the write grants Supabase gives by default are taken back).

alter table public.plans enable row level security;
alter table public.user_plans enable row level security;
alter table public.quota_usage enable row level security;
alter table public.generation_jobs enable row level security;
alter table public.job_events enable row level security;

revoke all on public.plans, public.user_plans, public.quota_usage, public.generation_jobs,
  public.job_events, public.quota_drift from anon, authenticated;
grant select on public.plans, public.user_plans, public.quota_usage, public.generation_jobs,
  public.job_events to authenticated;
grant all on public.plans, public.user_plans, public.quota_usage, public.generation_jobs,
  public.job_events, public.quota_drift to service_role;

create policy "plans are readable by signed-in users" on public.plans
  for select to authenticated using (true);
create policy "users read their own plan" on public.user_plans
  for select to authenticated using (user_id = (select auth.uid()));
create policy "users read their own usage" on public.quota_usage
  for select to authenticated using (user_id = (select auth.uid()));
create policy "users read their own jobs" on public.generation_jobs
  for select to authenticated using (user_id = (select auth.uid()));
create policy "users read their own job events" on public.job_events
  for select to authenticated using (user_id = (select auth.uid()));
