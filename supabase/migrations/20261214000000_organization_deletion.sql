-- quota-jobs: deleting an organization erases its jobs' personal data for every member.
--
-- public.delete_organization: an owner deletes the organization. Its active jobs are canceled
-- (their workers learn it at their next progress write and stop the model), what the provider
-- billed for all its jobs is added to public.erased_usage (per period, plan, kind and meter: no
-- user, no job, no organization), and then its jobs (their prompts, inputs, outputs, progress
-- chunks), their events, its pools, its members' usage rows, its memberships, its invitations
-- and the organization itself are deleted. Every member's personal jobs and plan stay. The
-- cost accounting a user's erasure did inline is now private.keep_erased_cost, which both call
-- (private.erase_user_data is re-created here with that one statement replaced by the call).
--
-- Lock order as everywhere (20261212000000_organizations.sql): the members' enqueue locks (in
-- user id order: a member's enqueue, removal or erasure holds one and takes it first, so they
-- cannot cycle with this one), its invitations (an accept holds one, then waits on the
-- organization's row for its membership's foreign key), the organization's row (a new job or
-- membership there waits on its foreign key), its job rows by id, its pools by (period,
-- meter), then member rows. Security definer, as private.erase_user_data is: only the owner of
-- job_events may delete events (private.erasing).

-- The cost of jobs about to be deleted, kept in public.erased_usage (per period, plan, kind and
-- meter: no user, no job, no organization): every attempt's reported usage, and for a running
-- attempt the erasure itself canceled (its cancel event's `by` is p_canceled_by) what the cancel
-- charged. A user's erasure and an organization's deletion both call it.
create function private.keep_erased_cost(p_jobs uuid[], p_canceled_by text, p_now timestamptz)
returns void
language plpgsql
set search_path to ''
as $$
begin
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
    cross join lateral (
      select
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'prompt_tokens')::bigint, 0), 0)), 0)
          as prompt_tokens,
        coalesce(sum(greatest(coalesce((e.detail -> 'usage' ->> 'completion_tokens')::bigint, 0), 0)), 0)
          as completion_tokens
      from public.job_events e where e.job_id = j.id and e.detail ? 'usage'
    ) b
    -- A running attempt this erasure canceled reported no usage: counted as the cancel charged
    -- it (its prompt and last recorded progress).
    cross join lateral (
      select exists (select from public.job_events x
        where x.job_id = j.id and x.event = 'canceled' and x.from_status = 'running'
          and x.detail ->> 'by' = p_canceled_by) as canceled
    ) c
    where j.id = any(p_jobs)
  ) t
  group by t.period_start, t.plan_id, t.kind, t.meter
  on conflict (period_start, plan_id, kind, meter) do update
    set jobs = u.jobs + excluded.jobs,
        captured = u.captured + excluded.captured,
        consumed = u.consumed + excluded.consumed,
        prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens,
        updated_at = p_now;
end
$$;
comment on function private.keep_erased_cost(uuid[], text, timestamptz) is
  'Adds the cost of jobs p_jobs (about to be deleted) to public.erased_usage: their attempts'' '
  'reported usage, and what a cancel by p_canceled_by charged a running attempt. Called by '
  'private.erase_user_data and public.delete_organization.';

-- The user's erasure, as in 20261212000100_organization_transitions.sql, its cost kept by the
-- function above.
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
  perform private.keep_erased_cost(
    array(select j.id from public.generation_jobs j where j.user_id = p_user_id), 'erasure', p_now);

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

create function public.delete_organization(p_organization_id uuid, p_by uuid,
  p_now timestamptz default now())
returns jsonb
language plpgsql
security definer
set search_path to ''
as $$
declare
  v_role text;
  v_old public.generation_jobs;
  v_canceled integer := 0;
  v_jobs integer;
  v_members integer;
begin
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  if v_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  if v_role <> 'owner' then
    return jsonb_build_object('outcome', 'forbidden');
  end if;

  perform pg_catalog.pg_advisory_xact_lock(
    pg_catalog.hashtextextended('quota_jobs.enqueue:' || m.user_id::text, 0))
  from (select m.user_id from public.organization_members m
        where m.organization_id = p_organization_id order by m.user_id) m;
  -- Its invitations before its row: an accept holds its invitation, then waits on the
  -- organization's row (its membership's foreign key).
  perform from public.organization_invitations i where i.organization_id = p_organization_id
  order by i.id for update;
  perform from public.organizations o where o.id = p_organization_id for update;
  if not found then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  perform from public.generation_jobs j where j.organization_id = p_organization_id
  order by j.id for update;
  perform from public.organization_usage q where q.organization_id = p_organization_id
  order by q.period_start, q.meter for update;

  for v_old in
    select * from public.generation_jobs j
    where j.organization_id = p_organization_id and j.status in ('queued', 'running')
    order by j.id
  loop
    perform private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('by', 'organization_deletion'), null, v_old.status = 'running');
    v_canceled := v_canceled + 1;
  end loop;

  -- What the provider billed for these jobs stays countable, without anyone (as an erasure).
  perform private.keep_erased_cost(
    array(select j.id from public.generation_jobs j where j.organization_id = p_organization_id),
    'organization_deletion', p_now);

  perform pg_catalog.set_config('quota_jobs.erasing', 'on', true);
  delete from public.job_events e
  where e.job_id in (select j.id from public.generation_jobs j
                     where j.organization_id = p_organization_id);
  -- Their progress chunks go with them (on delete cascade); superseded callbacks keep their
  -- rows without the job id (on delete set null).
  delete from public.generation_jobs j where j.organization_id = p_organization_id;
  get diagnostics v_jobs = row_count;
  perform pg_catalog.set_config('quota_jobs.erasing', 'off', true);
  -- Every job went with its hold or capture, so the counters go too (quota_drift stays empty).
  delete from public.organization_usage q where q.organization_id = p_organization_id;
  delete from public.organization_member_usage m where m.organization_id = p_organization_id;
  delete from public.organization_members m where m.organization_id = p_organization_id;
  get diagnostics v_members = row_count;
  delete from public.organization_invitations i where i.organization_id = p_organization_id;
  delete from public.organizations o where o.id = p_organization_id;

  return jsonb_build_object('outcome', 'deleted', 'jobs', v_jobs, 'canceled', v_canceled,
    'members', v_members);
end
$$;
comment on function public.delete_organization(uuid, uuid, timestamptz) is
  'Deletes an organization, by an owner (else forbidden; not_a_member for anyone else or none): '
  'cancels its active jobs, adds its jobs'' cost to public.erased_usage (no user, no '
  'organization), deletes its jobs with their events and chunks, its pools, member usage rows, '
  'memberships, invitations and the organization. Members'' personal jobs stay. Outcome deleted '
  'with jobs, canceled and members counts.';
revoke all on function public.delete_organization(uuid, uuid, timestamptz)
  from public, anon, authenticated;
grant execute on function public.delete_organization(uuid, uuid, timestamptz) to service_role;
