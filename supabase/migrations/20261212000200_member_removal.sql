-- quota-jobs: removing a member from an organization ends their organization jobs there.
--
-- public.remove_member: an owner or admin removes a member (or a member leaves). Their active
-- jobs in that organization are canceled by the refund rules a cancel follows
-- (private.end_with_refund: the pool gives back what a cancel refunds, the member's row the
-- same), then the membership goes. Their finished jobs stay theirs (a job is its owner's; the
-- pool's accounting keeps their captures), and so does their usage row, which those jobs still
-- account for (quota_drift stays empty). The last owner cannot be removed: an organization keeps
-- someone who can manage it. Lock order as everywhere (20261212000000_organizations.sql): the
-- removed user's enqueue lock, their job rows, the organization's pool rows by (period, meter),
-- then their member rows; the removal holds one organization's pools only, taken sorted.

create function public.remove_member(p_organization_id uuid, p_user_id uuid, p_by uuid,
  p_now timestamptz default now())
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_by_role text;
  v_role text;
  v_old public.generation_jobs;
  v_canceled integer := 0;
  v_refunded integer := 0;
  v_job public.generation_jobs;
begin
  -- The removed member's enqueues wait: none starts a job in this organization meanwhile.
  perform pg_advisory_xact_lock(hashtextextended('quota_jobs.enqueue:' || p_user_id::text, 0));
  select m.role into v_by_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_user_id
  for update;
  if v_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  -- A member may leave; only an owner or admin removes someone else, and only an owner an owner.
  if p_by is distinct from p_user_id and (v_by_role is null or v_by_role = 'member'
     or (v_role = 'owner' and v_by_role <> 'owner')) then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  if v_role = 'owner' and not exists (select from public.organization_members m
      where m.organization_id = p_organization_id and m.role = 'owner'
        and m.user_id <> p_user_id) then
    return jsonb_build_object('outcome', 'last_owner');
  end if;

  perform from public.generation_jobs j
  where j.user_id = p_user_id and j.organization_id = p_organization_id
    and j.status in ('queued', 'running')
  order by j.id for update;
  perform from public.organization_usage q
  where q.organization_id = p_organization_id and (q.period_start, q.meter) in (
    select j.period_start, j.meter from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id = p_organization_id
      and j.status in ('queued', 'running'))
  order by q.period_start, q.meter
  for update;
  for v_old in
    select * from public.generation_jobs j
    where j.user_id = p_user_id and j.organization_id = p_organization_id
      and j.status in ('queued', 'running')
    order by j.id
  loop
    v_job := private.end_with_refund(v_old, 'canceled', null, null, 'canceled', p_now,
      jsonb_build_object('by', 'member_removal'), null, v_old.status = 'running');
    v_canceled := v_canceled + 1;
    v_refunded := v_refunded + case when v_job.refunded_at is not null then 1 else 0 end;
  end loop;

  delete from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_user_id;
  return jsonb_build_object('outcome', 'removed', 'canceled', v_canceled,
    'refunded', v_refunded);
end
$$;
comment on function public.remove_member(uuid, uuid, uuid, timestamptz) is
  'Removes p_user_id from an organization, by p_by: the member themselves, an owner or admin (an '
  'owner only by an owner; never the last owner: last_owner). Their active jobs there are '
  'canceled by a cancel''s refund rule (private.end_with_refund) and the membership deleted; '
  'their finished jobs and usage row stay. not_a_member, forbidden, last_owner, or removed (with '
  'canceled and refunded counts).';
revoke all on function public.remove_member(uuid, uuid, uuid, timestamptz)
  from public, anon, authenticated;
grant execute on function public.remove_member(uuid, uuid, uuid, timestamptz) to service_role;
