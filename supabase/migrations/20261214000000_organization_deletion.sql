-- quota-jobs: deleting an organization erases its jobs' personal data for every member.
--
-- public.delete_organization: an owner deletes the organization. Its active jobs are canceled
-- (their workers learn it at their next progress write and stop the model), what the provider
-- billed for all its jobs is added to public.erased_usage (per period, plan, kind and meter: no
-- user, no job, no organization), and then its jobs (their prompts, inputs, outputs, progress
-- chunks), their events, its pools, its members' usage rows, its memberships, its invitations
-- and the organization itself are deleted. Every member's personal jobs and plan stay.
--
-- Lock order as everywhere (20261212000000_organizations.sql): the members' enqueue locks (in
-- user id order: a member's enqueue, removal or erasure holds one and takes it first, so they
-- cannot cycle with this one), its invitations (an accept holds one, then waits on the
-- organization's row for its membership's foreign key), the organization's row (a new job or
-- membership there waits on its foreign key), its job rows by id, its pools by (period,
-- meter), then member rows. Security definer, as private.erase_user_data is: only the owner of
-- job_events may delete events (private.erasing).

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
    -- A running attempt this deletion canceled reported no usage: counted as the cancel charged
    -- it (its prompt and last recorded progress).
    cross join lateral (
      select exists (select from public.job_events x
        where x.job_id = j.id and x.event = 'canceled' and x.from_status = 'running'
          and x.detail ->> 'by' = 'organization_deletion') as canceled
    ) c
    where j.organization_id = p_organization_id
  ) t
  group by t.period_start, t.plan_id, t.kind, t.meter
  on conflict (period_start, plan_id, kind, meter) do update
    set jobs = u.jobs + excluded.jobs,
        captured = u.captured + excluded.captured,
        consumed = u.consumed + excluded.consumed,
        prompt_tokens = u.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = u.completion_tokens + excluded.completion_tokens,
        updated_at = p_now;

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
