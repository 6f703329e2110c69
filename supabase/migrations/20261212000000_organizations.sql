-- quota-jobs: organizations. A business buys one plan for its team; its members draw on one pool,
-- and an owner or admin may cap what one member holds per period.
--
-- An organization names its plan (public.plans: meter, period, limit, active bound, refunds after
-- spend). A job enqueued for an organization (generation_jobs.organization_id) runs on that
-- plan and holds on two counters instead of the member's own quota_usage: the organization's
-- pool for the period and meter (public.organization_usage, under the plan's units_per_period)
-- and the member's row (public.organization_member_usage, under organization_members.cap when
-- set). Both are reserved in enqueue_job's one transaction, and every ending settles both in the
-- statement pair that settles a personal job's counter (private.end_with_refund, complete_job),
-- exactly once. The refunds after spend are counted on the pool, under the organization's plan's
-- bound. A personal job (organization_id null) is unchanged.
--
-- Lock order, for every transaction that touches an organization's counters:
--   the user's enqueue advisory lock → the job row → the pool row → the member row.
-- enqueue_job takes the lock, then the pool row (its guarded upsert), then the member row; its
-- job row is new, so no one waits on it. An ending holds its job row (the caller's `for update`
-- or guarded update), then updates the pool row, then the member row. The erasure takes the
-- lock, every job row of the user, then the pools of its organization jobs in
-- (organization, period, meter) order, then member rows. Every transaction takes at most one pool
-- row, except the erasure, which takes them sorted: no two transactions hold pools in opposite
-- orders. A member row is written only after its pool row, and only by the member's own
-- transactions (their enqueue, their jobs' endings, their erasure): those are ordered by the
-- advisory lock or the job row before they reach any counter. No cycle, so no deadlock
-- (docs/DESIGN.md#organizations; test/db/organizations.test.ts races them).

-- tables -----------------------------------------------------------------------------------------

create table public.organizations (
  id uuid primary key default gen_random_uuid(),
  name text not null check (char_length(name) between 1 and 200),
  plan text not null references public.plans (id),
  created_at timestamptz not null default now()
);
alter table public.organizations enable row level security;
comment on table public.organizations is
  'A team on one plan (plan): its members'' organization jobs hold on its pool '
  '(public.organization_usage) under that plan''s limit.';

create table public.organization_members (
  organization_id uuid not null references public.organizations (id) on delete cascade,
  user_id uuid not null references auth.users (id) on delete cascade,
  role text not null check (role in ('owner', 'admin', 'member')),
  cap integer check (cap >= 0),
  created_at timestamptz not null default now(),
  primary key (organization_id, user_id)
);
create index organization_members_user on public.organization_members (user_id);
alter table public.organization_members enable row level security;
comment on table public.organization_members is
  'Who belongs to an organization, as owner, admin or member.';
comment on column public.organization_members.cap is
  'The most this member may hold in one period, in the organization''s plan''s meter (jobs, '
  'tokens or micro-dollars), set by an owner or admin. Null: no cap beyond the pool.';

create table public.organization_usage (
  organization_id uuid not null references public.organizations (id) on delete cascade,
  period_start timestamptz not null,
  meter text not null check (meter in ('jobs', 'tokens', 'money')),
  units_used integer not null default 0 check (units_used >= 0),
  paid_refunds integer not null default 0 check (paid_refunds >= 0),
  erased_units bigint not null default 0 check (erased_units >= 0),
  updated_at timestamptz not null,
  primary key (organization_id, period_start, meter)
);
alter table public.organization_usage enable row level security;
comment on table public.organization_usage is
  'An organization''s pool per period and meter: what its jobs hold and captured, net of '
  'refunds. Changed only by the transition functions, locked after the job row and before the '
  'member''s row.';
comment on column public.organization_usage.paid_refunds is
  'Refunds after provider spend of the organization''s jobs in this period, under its plan''s '
  'bound (private.refund_bound).';
comment on column public.organization_usage.erased_units is
  'What the jobs of erased members captured (part of units_used): their jobs are gone, the '
  'pool''s accounting stays (quota_drift counts it).';

create table public.organization_member_usage (
  organization_id uuid not null references public.organizations (id) on delete cascade,
  user_id uuid not null,
  period_start timestamptz not null,
  meter text not null check (meter in ('jobs', 'tokens', 'money')),
  units_used integer not null default 0 check (units_used >= 0),
  updated_at timestamptz not null,
  primary key (organization_id, user_id, period_start, meter)
);
create index organization_member_usage_user on public.organization_member_usage (user_id);
alter table public.organization_member_usage enable row level security;
comment on table public.organization_member_usage is
  'What one member''s organization jobs hold and captured per period and meter, under their '
  'cap. Changed only by the transition functions, with the pool row, after it.';

alter table public.generation_jobs add column organization_id uuid
  references public.organizations (id);
comment on column public.generation_jobs.organization_id is
  'The organization whose pool the job holds on (its plan is the organization''s); null: the '
  'user''s own plan and quota_usage.';
create index generation_jobs_organization_period on public.generation_jobs
  (organization_id, period_start, meter, user_id) include (hold, captured)
  where organization_id is not null;

-- row level security -----------------------------------------------------------------------------

create function private.managed_organizations() returns setof uuid
language sql
stable
security definer
set search_path to ''
as $$
  select m.organization_id from public.organization_members m
  where m.user_id = (select auth.uid()) and m.role in ('owner', 'admin')
$$;
comment on function private.managed_organizations() is
  'The organizations the signed-in user is an owner or admin of, for the row level security '
  'policies (security definer: a policy on organization_members cannot read that table itself).';

create policy "members read their organization" on public.organizations
  for select to authenticated using (exists (select from public.organization_members m
    where m.organization_id = organizations.id and m.user_id = (select auth.uid())));
create policy "members read their own membership" on public.organization_members
  for select to authenticated using (user_id = (select auth.uid()));
create policy "owners and admins read their members" on public.organization_members
  for select to authenticated
  using (organization_id in (select private.managed_organizations()));
create policy "owners and admins read their pool" on public.organization_usage
  for select to authenticated
  using (organization_id in (select private.managed_organizations()));
create policy "members read their own usage, owners and admins their members'"
  on public.organization_member_usage for select to authenticated
  using (user_id = (select auth.uid())
    or organization_id in (select private.managed_organizations()));

revoke all on public.organizations, public.organization_members, public.organization_usage,
  public.organization_member_usage from public, anon, authenticated;
grant select on public.organizations, public.organization_members, public.organization_usage,
  public.organization_member_usage to authenticated;
revoke all on function private.managed_organizations() from public, anon, authenticated;
grant usage on schema private to authenticated;
grant execute on function private.managed_organizations() to authenticated, service_role;
