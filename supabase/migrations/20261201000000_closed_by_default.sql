-- quota-jobs: closed by default. Privileges and plan rules only; no transition changes here.
--
-- Supabase's default grants give anon and authenticated every privilege on every table,
-- sequence and function created in public, and PostgreSQL gives EXECUTE on every new function to
-- PUBLIC. The earlier migrations took those back for the objects they made, but not for the
-- identity sequence behind job_events (anyone signed in could `setval` it to 1, and every
-- transition would then fail with 23505 until an operator fixed it), and not for anything a
-- later migration adds. From here on an object is closed to anon, authenticated and PUBLIC
-- unless a migration grants it, and test/db/privileges.test.ts compares every privilege those
-- roles hold with the allowlist beside it.

-- sequences that exist today ------------------------------------------------------------------

revoke all on all sequences in schema public from public, anon, authenticated;
revoke all on all sequences in schema private from public, anon, authenticated;
grant usage, select on all sequences in schema public to service_role;
grant usage, select on all sequences in schema private to service_role;

-- objects later migrations create ----------------------------------------------------------------
-- Default privileges belong to the role that creates the objects: the role that runs the
-- migrations (postgres under `supabase db push`), the same role Supabase's own defaults are
-- set for. A per-schema revoke undoes a per-schema grant (Supabase's); the global revoke undoes
-- PostgreSQL's built-in EXECUTE for PUBLIC, which no per-schema statement can.

alter default privileges in schema public revoke all on tables from public, anon, authenticated;
alter default privileges in schema public revoke all on sequences from public, anon, authenticated;
alter default privileges in schema public revoke all on functions from public, anon, authenticated;
alter default privileges in schema private revoke all on tables from public, anon, authenticated;
alter default privileges in schema private revoke all on sequences from public, anon, authenticated;
alter default privileges in schema private revoke all on functions from public, anon, authenticated;
alter default privileges revoke execute on functions from public;

-- The server side keeps working without a grant in every migration: the service role (server
-- only, never in a browser) may use what later migrations add to public and private, as the
-- transitions call private helpers with the caller's rights.
alter default privileges in schema public grant all on tables to service_role;
alter default privileges in schema public grant all on sequences to service_role;
alter default privileges in schema public grant execute on functions to service_role;
alter default privileges in schema private grant all on tables to service_role;
alter default privileges in schema private grant all on sequences to service_role;
alter default privileges in schema private grant execute on functions to service_role;

-- plans for anonymous sign-ins ------------------------------------------------------------------
-- A Supabase anonymous sign-in is a real, signed-in user (role authenticated, is_anonymous in
-- the token and in auth.users). Left to the rule "no user_plans row means free", anyone could
-- mint free plans by the script-load. Now an anonymous user has no plan (the 'none' plan: zero
-- units, which the API answers as 403 no_plan) unless a plan row says anonymous users may have
-- it, and an explicit user_plans row still wins.

alter table public.plans
  add column for_anonymous_users boolean not null default false;
comment on column public.plans.for_anonymous_users is
  'Anonymous sign-ins without a user_plans row are on this plan. At most one plan says so; '
  'when none does, they are on ''none'' (no units).';
create unique index plans_one_for_anonymous_users on public.plans (for_anonymous_users)
  where for_anonymous_users;

insert into public.plans (id, name, period, units_per_period, max_active_jobs)
values ('none', 'No plan', 'day', 0, 1)
on conflict (id) do update set
  name = excluded.name,
  period = excluded.period,
  units_per_period = excluded.units_per_period,
  max_active_jobs = excluded.max_active_jobs;

-- Security definer: whether a user is anonymous is recorded in auth.users, which Supabase lets
-- the migration role (the owner of this function) read but not the service role the API runs
-- as. The function reads one flag and one plan; it is executable by the service role only.
create or replace function private.plan_for(p_user_id uuid) returns public.plans
language plpgsql stable security definer set search_path = ''
as $$
declare
  v_plan public.plans;
  v_plan_id text;
begin
  select up.plan_id into v_plan_id from public.user_plans up where up.user_id = p_user_id;
  if v_plan_id is null then
    if exists (select 1 from auth.users u where u.id = p_user_id and u.is_anonymous) then
      v_plan_id := coalesce(
        (select p.id from public.plans p where p.for_anonymous_users),
        'none'
      );
    else
      v_plan_id := 'free';
    end if;
  end if;
  select p.* into v_plan from public.plans p where p.id = v_plan_id;
  return v_plan;
end
$$;
comment on function private.plan_for(uuid) is
  'The plan a user is on: their user_plans row; else, for an anonymous sign-in, the plan marked '
  'for_anonymous_users or ''none'' (no units); else free.';
revoke all on function private.plan_for(uuid) from public, anon, authenticated;
grant execute on function private.plan_for(uuid) to service_role;
