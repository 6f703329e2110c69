-- quota-jobs: what the organization routes read and change, each one call.
--
-- An invitation now names the address it was sent to (email, lower case, kept while it is
-- pending and nulled when accepted: the membership names the person then). accept_invitation
-- joins only the user whose address it is (wrong_recipient for anyone else): a link forwarded
-- or leaked joins no one, so no stranger draws on the team's pool. The address is Auth's
-- (auth.users.email), as strong as the project's "Confirm email" setting (Supabase's default:
-- on; with it off anyone may sign up as any address). A user's deletion removes the pending
-- invitations to their address.
--
-- public.my_organizations: the caller's memberships, each with their role, cap and usage there
-- (the page's switch). public.organization_overview: for an owner or admin, every member's role,
-- cap and what they hold and captured this period (no job, prompt or output: those stay their
-- owner's), and the pending invitations. public.set_member_cap: an owner or admin caps a member
-- (an admin never an owner).

alter table public.organization_invitations add column email text
  check (email is null or (email = lower(email) and email ~ '^[^@[:space:]]+@[^@[:space:]]+$'));
comment on column public.organization_invitations.email is
  'The address the invitation was sent to, lower case, while it is pending: only the user whose '
  'address it is can accept it. Nulled when accepted; deleted with its user.';
create index organization_invitations_email on public.organization_invitations (email)
  where email is not null;

-- auth.users is Supabase Auth's: the service role reads an address through this one function.
create function private.user_email(p_user_id uuid) returns text
language sql
stable
security definer
set search_path to ''
as $$
  select lower(u.email) from auth.users u where u.id = p_user_id
$$;
comment on function private.user_email(uuid) is
  'A user''s address as Auth has it, lower case (null: none, or no such user). Security '
  'definer: auth.users is Auth''s table, not granted to the service role.';

drop function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz);

create function public.create_invitation(p_organization_id uuid, p_by uuid, p_role text,
  p_cap integer default null, p_expires_at timestamptz default null,
  p_now timestamptz default now(), p_email text default null)
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_token text := replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
  v_email text := lower(btrim(p_email));
  v_expires timestamptz := coalesce(p_expires_at, p_now + interval '7 days');
  v_id uuid;
begin
  if p_role is null or p_role not in ('admin', 'member') or p_cap < 0
     or p_expires_at <= p_now
     or (v_email is not null and v_email !~ '^[^@[:space:]]+@[^@[:space:]]+$') then
    return jsonb_build_object('outcome', 'invalid_invitation');
  end if;
  if not exists (select from public.organization_members m
      where m.organization_id = p_organization_id and m.user_id = p_by
        and m.role in ('owner', 'admin')) then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  if v_email is not null and exists (select from public.organization_members m
      where m.organization_id = p_organization_id
        and private.user_email(m.user_id) = v_email) then
    return jsonb_build_object('outcome', 'already_member');
  end if;
  insert into public.organization_invitations (organization_id, token_hash, role, cap,
    invited_by, created_at, expires_at, email)
  values (p_organization_id, encode(sha256(convert_to(v_token, 'UTF8')), 'hex'), p_role, p_cap,
    p_by, p_now, v_expires, v_email)
  returning id into v_id;
  return jsonb_build_object('outcome', 'created', 'invitation_id', v_id, 'token', v_token,
    'expires_at', v_expires, 'email', v_email, 'role', p_role, 'cap', p_cap);
end
$$;
comment on function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz, text) is
  'An owner or admin of the organization (else forbidden) invites p_email (else anyone holding '
  'the token) as admin or member with an optional cap, valid until p_expires_at (default 7 '
  'days; invalid_invitation for a bad role, cap, expiry or address; already_member when that '
  'address is a member). Answers created with the token, once: only its SHA-256 is stored.';

create or replace function public.accept_invitation(p_token text, p_user_id uuid,
  p_now timestamptz default now())
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_inv public.organization_invitations;
  v_email text;
begin
  v_email := private.user_email(p_user_id);
  if not private.user_exists(p_user_id) then
    return jsonb_build_object('outcome', 'user_not_found');
  end if;
  select * into v_inv from public.organization_invitations i
  where i.token_hash = encode(sha256(convert_to(coalesce(p_token, ''), 'UTF8')), 'hex')
  for update;
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  if v_inv.accepted_at is not null then
    return jsonb_build_object('outcome', 'already_accepted');
  end if;
  if v_inv.expires_at <= p_now then
    return jsonb_build_object('outcome', 'expired');
  end if;
  if v_inv.email is not null and v_inv.email is distinct from v_email then
    return jsonb_build_object('outcome', 'wrong_recipient');
  end if;
  if exists (select from public.organization_members m
      where m.organization_id = v_inv.organization_id and m.user_id = p_user_id) then
    return jsonb_build_object('outcome', 'already_member',
      'organization_id', v_inv.organization_id);
  end if;
  insert into public.organization_members (organization_id, user_id, role, cap, created_at)
  values (v_inv.organization_id, p_user_id, v_inv.role, v_inv.cap, p_now);
  update public.organization_invitations i
  set accepted_at = p_now, accepted_by = p_user_id, email = null
  where i.id = v_inv.id;
  return jsonb_build_object('outcome', 'accepted', 'organization_id', v_inv.organization_id,
    'role', v_inv.role, 'cap', v_inv.cap);
end
$$;
comment on function public.accept_invitation(text, uuid, timestamptz) is
  'Joins the user (else user_not_found) to the invitation''s organization with its role and '
  'cap: once (already_accepted after), before it expires (expired), only the user whose '
  'address the invitation names (wrong_recipient), not twice (already_member, the '
  'invitation kept). The invitation row is locked: concurrent accepts of one token make one '
  'member. not_found for a token no invitation has.';

-- A deleted user's address leaves every pending invitation to it.
create function private.forget_invitations_to() returns trigger
language plpgsql
security definer
set search_path to ''
as $$
begin
  if old.email is not null then
    delete from public.organization_invitations i
    where i.email = lower(old.email) and i.accepted_at is null;
  end if;
  return old;
end
$$;
comment on function private.forget_invitations_to() is
  'After a user''s deletion: the pending invitations to their address go (personal data). '
  'Security definer: Auth deletes users as its own role.';
create trigger forget_invitations_to after delete on auth.users
  for each row execute function private.forget_invitations_to();

create function private.member_json(p_organization_id uuid, p_user_id uuid,
  p_start timestamptz, p_meter text)
returns jsonb
language sql
stable
set search_path to ''
as $$
  select jsonb_build_object('user_id', m.user_id, 'email', private.user_email(m.user_id),
    'role', m.role,
    'cap', m.cap, 'joined_at', m.created_at,
    'used', coalesce(mu.units_used, 0),
    'active', (select count(*) from public.generation_jobs j
      where j.user_id = m.user_id and j.organization_id = m.organization_id
        and j.status in ('queued', 'running')))
  from public.organization_members m
  left join public.organization_member_usage mu on mu.organization_id = m.organization_id
    and mu.user_id = m.user_id and mu.period_start = p_start and mu.meter = p_meter
  where m.organization_id = p_organization_id and m.user_id = p_user_id
$$;
comment on function private.member_json(uuid, uuid, timestamptz, text) is
  'One member as an owner or admin sees them: address, role, cap, what they hold and captured '
  'in the period (used) and their active jobs'' count. No job, prompt or output.';

create function public.my_organizations(p_user_id uuid, p_now timestamptz default now())
returns jsonb
language plpgsql
stable
set search_path to ''
as $$
begin
  return jsonb_build_object('outcome', 'organizations', 'organizations', coalesce((
    select jsonb_agg(jsonb_build_object('id', o.id, 'name', o.name, 'role', m.role,
        'usage', private.organization_usage_json(o.id, p_user_id, p, p_now))
      order by o.name, o.id)
    from public.organization_members m
    join public.organizations o on o.id = m.organization_id
    join public.plans p on p.id = o.plan
    where m.user_id = p_user_id), '[]'::jsonb));
end
$$;
comment on function public.my_organizations(uuid, timestamptz) is
  'The user''s organizations (outcome organizations) by name: id, name, their role, and their usage there '
  '(private.organization_usage_json: the pool''s used and limit, their cap and what they hold).';

create function public.organization_overview(p_organization_id uuid, p_by uuid,
  p_now timestamptz default now())
returns jsonb
language plpgsql
stable
set search_path to ''
as $$
declare
  v_role text;
  v_org public.organizations;
  v_plan public.plans;
  v_start timestamptz;
begin
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  if v_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  select * into v_org from public.organizations o where o.id = p_organization_id;
  select * into v_plan from public.plans p where p.id = v_org.plan;
  v_start := private.period_start(v_plan.period, p_now);
  return jsonb_build_object('outcome', 'overview', 'id', v_org.id, 'name', v_org.name,
    'role', v_role, 'plan', v_plan.id,
    'usage', private.organization_usage_json(v_org.id, p_by, v_plan, p_now),
    'members', case when v_role in ('owner', 'admin') then (
      select jsonb_agg(private.member_json(v_org.id, m.user_id, v_start, v_plan.meter)
        order by m.created_at, m.user_id)
      from public.organization_members m where m.organization_id = v_org.id) end,
    'invitations', case when v_role in ('owner', 'admin') then coalesce((
      select jsonb_agg(jsonb_build_object('id', i.id, 'email', i.email, 'role', i.role,
          'cap', i.cap, 'created_at', i.created_at, 'expires_at', i.expires_at)
        order by i.created_at, i.id)
      from public.organization_invitations i
      where i.organization_id = v_org.id and i.accepted_at is null
        and i.expires_at > p_now), '[]'::jsonb) end);
end
$$;
comment on function public.organization_overview(uuid, uuid, timestamptz) is
  'An organization as p_by sees it (not_a_member when they are not one): its name, their role '
  'and usage; for an owner or admin also every member (private.member_json) and the pending '
  'invitations. Never a job, a prompt or an output.';

create function public.set_member_cap(p_organization_id uuid, p_user_id uuid, p_by uuid,
  p_cap integer, p_now timestamptz default now())
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_by_role text;
  v_role text;
  v_plan public.plans;
begin
  if p_cap < 0 then
    return jsonb_build_object('outcome', 'invalid_cap');
  end if;
  select m.role into v_by_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_by;
  if v_by_role is null then
    return jsonb_build_object('outcome', 'not_a_member');
  end if;
  if v_by_role = 'member' then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  select m.role into v_role from public.organization_members m
  where m.organization_id = p_organization_id and m.user_id = p_user_id
  for update;
  if v_role is null then
    return jsonb_build_object('outcome', 'no_such_member');
  end if;
  if v_role = 'owner' and v_by_role <> 'owner' then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  update public.organization_members m set cap = p_cap
  where m.organization_id = p_organization_id and m.user_id = p_user_id;
  select p.* into v_plan from public.organizations o join public.plans p on p.id = o.plan
  where o.id = p_organization_id;
  return jsonb_build_object('outcome', 'updated', 'member',
    private.member_json(p_organization_id, p_user_id,
      private.period_start(v_plan.period, p_now), v_plan.meter));
end
$$;
comment on function public.set_member_cap(uuid, uuid, uuid, integer, timestamptz) is
  'An owner or admin (else forbidden; not_a_member for someone outside) sets a member''s cap '
  '(null: none; invalid_cap below 0); an admin never an owner''s. A cap below what the member '
  'holds refuses their next enqueues, and ends nothing. Answers the member as the overview does.';

create function public.revoke_invitation(p_invitation_id uuid, p_by uuid)
returns jsonb
language plpgsql
set search_path to ''
as $$
begin
  delete from public.organization_invitations i
  where i.id = p_invitation_id and i.accepted_at is null
    and exists (select from public.organization_members m
      where m.organization_id = i.organization_id and m.user_id = p_by
        and m.role in ('owner', 'admin'));
  if not found then
    return jsonb_build_object('outcome', 'not_found');
  end if;
  return jsonb_build_object('outcome', 'revoked');
end
$$;
comment on function public.revoke_invitation(uuid, uuid) is
  'An owner or admin withdraws an invitation not yet accepted (its token then joins no one); '
  'not_found for one accepted, gone, or not theirs to revoke. The invitation route revokes one '
  'whose mail could not be sent.';

revoke all on function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz, text),
  public.my_organizations(uuid, timestamptz),
  public.organization_overview(uuid, uuid, timestamptz),
  public.set_member_cap(uuid, uuid, uuid, integer, timestamptz),
  public.revoke_invitation(uuid, uuid),
  private.member_json(uuid, uuid, timestamptz, text),
  private.user_email(uuid),
  private.forget_invitations_to() from public, anon, authenticated;
grant execute on function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz, text),
  public.my_organizations(uuid, timestamptz),
  public.organization_overview(uuid, uuid, timestamptz),
  public.set_member_cap(uuid, uuid, uuid, integer, timestamptz),
  public.revoke_invitation(uuid, uuid),
  private.member_json(uuid, uuid, timestamptz, text),
  private.user_email(uuid) to service_role;
