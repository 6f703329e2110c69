-- quota-jobs: invitations to an organization, accepted once, before they expire.
--
-- An owner or admin invites (public.create_invitation): the answer carries a random token once;
-- the table keeps only its SHA-256, so a read of the table cannot accept anything. Whoever holds
-- the token accepts it (public.accept_invitation) once, before expires_at, and joins with the
-- role (admin or member, never owner) and cap the invitation names. The row locks for the
-- accept: two accepts of one token race on it and exactly one joins. No policy: only the service
-- role reads invitations. The inviter and the accepter are kept as ids that an erasure of either
-- sets null (the invitation stays, naming no one).

create table public.organization_invitations (
  id uuid primary key default gen_random_uuid(),
  organization_id uuid not null references public.organizations (id) on delete cascade,
  token_hash text not null unique,
  role text not null check (role in ('admin', 'member')),
  cap integer check (cap >= 0),
  invited_by uuid references auth.users (id) on delete set null,
  created_at timestamptz not null,
  expires_at timestamptz not null,
  accepted_at timestamptz,
  accepted_by uuid references auth.users (id) on delete set null,
  constraint organization_invitations_expires_after_created check (expires_at > created_at),
  -- Whoever accepted it is set then (and nulled by their erasure, the time kept).
  constraint organization_invitations_accepted_by_when_accepted
    check (accepted_by is null or accepted_at is not null)
);
create index organization_invitations_organization on public.organization_invitations
  (organization_id);
alter table public.organization_invitations enable row level security;
comment on table public.organization_invitations is
  'An invitation to join an organization as admin or member (with a cap), accepted at most once '
  'and only before expires_at. token_hash is the SHA-256 of the token create_invitation answered '
  'once. No policy: the service role reads it.';

create function public.create_invitation(p_organization_id uuid, p_by uuid, p_role text,
  p_cap integer default null, p_expires_at timestamptz default null,
  p_now timestamptz default now())
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_token text := replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', '');
  v_id uuid;
begin
  if p_role is null or p_role not in ('admin', 'member') or p_cap < 0
     or p_expires_at <= p_now then
    return jsonb_build_object('outcome', 'invalid_invitation');
  end if;
  if not exists (select from public.organization_members m
      where m.organization_id = p_organization_id and m.user_id = p_by
        and m.role in ('owner', 'admin')) then
    return jsonb_build_object('outcome', 'forbidden');
  end if;
  insert into public.organization_invitations (organization_id, token_hash, role, cap,
    invited_by, created_at, expires_at)
  values (p_organization_id, encode(sha256(convert_to(v_token, 'UTF8')), 'hex'), p_role, p_cap,
    p_by, p_now, coalesce(p_expires_at, p_now + interval '7 days'))
  returning id into v_id;
  return jsonb_build_object('outcome', 'created', 'invitation_id', v_id, 'token', v_token,
    'expires_at', coalesce(p_expires_at, p_now + interval '7 days'));
end
$$;
comment on function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz) is
  'An owner or admin of the organization (else forbidden) invites as admin or member with an '
  'optional cap, valid until p_expires_at (default 7 days; invalid_invitation for a bad role, '
  'cap or expiry). Answers created with the token, once: only its SHA-256 is stored.';

create function public.accept_invitation(p_token text, p_user_id uuid,
  p_now timestamptz default now())
returns jsonb
language plpgsql
set search_path to ''
as $$
declare
  v_inv public.organization_invitations;
begin
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
  if exists (select from public.organization_members m
      where m.organization_id = v_inv.organization_id and m.user_id = p_user_id) then
    return jsonb_build_object('outcome', 'already_member',
      'organization_id', v_inv.organization_id);
  end if;
  insert into public.organization_members (organization_id, user_id, role, cap, created_at)
  values (v_inv.organization_id, p_user_id, v_inv.role, v_inv.cap, p_now);
  update public.organization_invitations i
  set accepted_at = p_now, accepted_by = p_user_id
  where i.id = v_inv.id;
  return jsonb_build_object('outcome', 'accepted', 'organization_id', v_inv.organization_id,
    'role', v_inv.role, 'cap', v_inv.cap);
end
$$;
comment on function public.accept_invitation(text, uuid, timestamptz) is
  'Joins the user (else user_not_found) to the invitation''s organization with its role and '
  'cap: once (already_accepted after), before it expires (expired), not twice (already_member, '
  'the invitation kept). The invitation row is locked: concurrent accepts of one token make one '
  'member. not_found for a token no invitation has.';

revoke all on public.organization_invitations from public, anon, authenticated;
revoke all on function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz),
  public.accept_invitation(text, uuid, timestamptz) from public, anon, authenticated;
grant execute on function public.create_invitation(uuid, uuid, text, integer, timestamptz, timestamptz),
  public.accept_invitation(text, uuid, timestamptz) to service_role;
