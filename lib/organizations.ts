/**
 * What the organization routes ask of the database and how they answer it
 * (docs/flows/organizations.md): one SQL function per call, its outcomes as data, and the
 * views the API sends. A member's view never holds a job, a prompt or an output: those stay
 * their owner's.
 */
import type { Rpc } from "./db.ts";
import { HttpError } from "./errors.ts";
import type { UsageRow } from "./jobs.ts";
import { isUuid } from "./validate.ts";
import { toUsage, type Usage } from "./view.ts";

export type Role = "owner" | "admin" | "member";

interface MemberRow {
  user_id: string;
  email: string | null;
  role: Role;
  cap: number | null;
  joined_at: string;
  used: number;
  active: number;
}

interface InvitationRow {
  id: string;
  email: string | null;
  role: Role;
  cap: number | null;
  created_at: string;
  expires_at: string;
}

/** A member as an owner or admin sees them. */
export interface Member {
  userId: string;
  email: string | null;
  role: Role;
  cap: number | null;
  joinedAt: string;
  /** What their organization jobs hold and captured this period, in the plan's meter. */
  used: number;
  active: number;
}

export interface Invitation {
  id: string;
  email: string | null;
  role: Role;
  cap: number | null;
  createdAt: string;
  expiresAt: string;
}

export interface Organization {
  id: string;
  name: string;
  role: Role;
  usage: Usage;
  /** Owners and admins only: every member. */
  members?: Member[];
  /** Owners and admins only: the invitations not yet accepted nor expired. */
  invitations?: Invitation[];
}

const iso = (t: string) => new Date(t).toISOString();

export const toMember = (m: MemberRow): Member => ({
  userId: m.user_id,
  email: m.email,
  role: m.role,
  cap: m.cap,
  joinedAt: iso(m.joined_at),
  used: m.used,
  active: m.active,
});

const toInvitation = (i: InvitationRow): Invitation => ({
  id: i.id,
  email: i.email,
  role: i.role,
  cap: i.cap,
  createdAt: iso(i.created_at),
  expiresAt: iso(i.expires_at),
});

export const notFound = () => new HttpError(404, "not_found", "No such organization.");
const forbidden = () =>
  new HttpError(403, "forbidden", "Only the organization's owners and admins can do that.");

/** The caller's organizations, by name (the page's switch). */
export async function myOrganizations(rpc: Rpc, userId: string): Promise<Organization[]> {
  const r = (await rpc("my_organizations", { p_user_id: userId })) as {
    organizations: { id: string; name: string; role: Role; usage: UsageRow }[];
  };
  return r.organizations.map((o) => ({
    id: o.id,
    name: o.name,
    role: o.role,
    usage: toUsage(o.usage),
  }));
}

/** One organization as `userId` sees it; 404 for one they are not a member of. */
export async function overview(rpc: Rpc, id: string, userId: string): Promise<Organization> {
  const r = (await rpc("organization_overview", { p_organization_id: id, p_by: userId })) as {
    outcome: "overview" | "not_a_member";
    id: string;
    name: string;
    role: Role;
    usage: UsageRow;
    members: MemberRow[] | null;
    invitations: InvitationRow[] | null;
  };
  if (r.outcome !== "overview") throw notFound();
  return {
    id: r.id,
    name: r.name,
    role: r.role,
    usage: toUsage(r.usage),
    ...(r.members === null ? {} : { members: r.members.map(toMember) }),
    ...(r.invitations === null ? {} : { invitations: r.invitations.map(toInvitation) }),
  };
}

/** A new invitation and its token (sent by mail only: the API never answers it). */
export async function createInvitation(
  rpc: Rpc,
  i: {
    organizationId: string;
    by: string;
    email: string;
    role: "admin" | "member";
    cap: number | null;
  },
): Promise<{ invitation: Invitation; token: string }> {
  const r = (await rpc("create_invitation", {
    p_organization_id: i.organizationId,
    p_by: i.by,
    p_role: i.role,
    p_cap: i.cap,
    p_email: i.email,
  })) as { outcome: string; invitation_id: string; token: string; expires_at: string };
  switch (r.outcome) {
    case "created":
      return {
        token: r.token,
        invitation: {
          id: r.invitation_id,
          email: i.email.toLowerCase(),
          role: i.role,
          cap: i.cap,
          createdAt: new Date().toISOString(),
          expiresAt: iso(r.expires_at),
        },
      };
    case "forbidden":
      throw forbidden();
    case "already_member":
      throw new HttpError(409, "already_member", "That address is a member already.");
    default:
      throw new HttpError(
        400,
        "invalid_invitation",
        "The invitation's role, cap or address is not valid.",
      );
  }
}

/** `userId` joins by an invitation's token: once, before it expires, only its addressee. */
export async function acceptInvitation(
  rpc: Rpc,
  token: string,
  userId: string,
): Promise<{ organizationId: string; role: Role }> {
  const r = (await rpc("accept_invitation", { p_token: token, p_user_id: userId })) as {
    outcome: string;
    organization_id: string;
    role: Role;
  };
  switch (r.outcome) {
    case "accepted":
      return { organizationId: r.organization_id, role: r.role };
    case "already_accepted":
      throw new HttpError(409, "invitation_used", "This invitation has been used already.");
    case "expired":
      throw new HttpError(
        410,
        "invitation_expired",
        "This invitation has expired. Ask for a new one.",
      );
    case "wrong_recipient":
      throw new HttpError(
        403,
        "wrong_recipient",
        "This invitation was sent to another address. Sign in with the address it was sent to.",
      );
    case "already_member":
      throw new HttpError(409, "already_member", "You are a member of this organization already.");
    default:
      throw new HttpError(404, "invitation_not_found", "No such invitation.");
  }
}

/** An owner or admin sets a member's cap (null: none). */
export async function setCap(
  rpc: Rpc,
  i: { organizationId: string; userId: string; by: string; cap: number | null },
): Promise<Member> {
  const r = (await rpc("set_member_cap", {
    p_organization_id: i.organizationId,
    p_user_id: i.userId,
    p_by: i.by,
    p_cap: i.cap,
  })) as { outcome: string; member: MemberRow };
  switch (r.outcome) {
    case "updated":
      return toMember(r.member);
    case "not_a_member":
      throw notFound();
    case "forbidden":
      throw forbidden();
    case "no_such_member":
      throw new HttpError(404, "no_such_member", "No such member in this organization.");
    default:
      throw new HttpError(400, "invalid_cap", '"cap" must be a whole number ≥ 0, or null.');
  }
}

/** A member leaves, or an owner or admin removes them: their active jobs there are canceled. */
export async function removeMember(
  rpc: Rpc,
  i: { organizationId: string; userId: string; by: string },
): Promise<{ canceled: number; refunded: number }> {
  const r = (await rpc("remove_member", {
    p_organization_id: i.organizationId,
    p_user_id: i.userId,
    p_by: i.by,
  })) as { outcome: string; canceled: number; refunded: number };
  switch (r.outcome) {
    case "removed":
      return { canceled: r.canceled, refunded: r.refunded };
    case "forbidden":
      throw forbidden();
    case "last_owner":
      throw new HttpError(
        409,
        "last_owner",
        "An organization keeps at least one owner: make someone else owner first.",
      );
    default:
      throw new HttpError(404, "no_such_member", "No such member in this organization.");
  }
}

/**
 * Deletes the organization, by an owner: its active jobs canceled, its jobs' text and events,
 * pools, memberships and invitations deleted (docs/flows/organizations.md). 404 for a caller who
 * is not a member; 403 for an admin or member.
 */
export async function deleteOrganization(
  rpc: Rpc,
  i: { organizationId: string; by: string },
): Promise<{ jobs: number; canceled: number; members: number }> {
  const r = (await rpc("delete_organization", {
    p_organization_id: i.organizationId,
    p_by: i.by,
  })) as { outcome: string; jobs: number; canceled: number; members: number };
  switch (r.outcome) {
    case "deleted":
      return { jobs: r.jobs, canceled: r.canceled, members: r.members };
    case "forbidden":
      throw new HttpError(403, "forbidden", "Only the organization's owners can delete it.");
    default:
      throw notFound();
  }
}

/**
 * The route's parts after `/api/organizations/`: the organization's id, then nothing,
 * `invitations`, or `members/<user id>`. 404 for any other path.
 */
export function organizationPath(url: URL): {
  id: string;
  part: { kind: "self" } | { kind: "invitations" } | { kind: "member"; userId: string };
} {
  const [, , , id = "", ...rest] = url.pathname.split("/");
  if (!isUuid(id)) throw notFound();
  const lower = id.toLowerCase();
  if (rest.length === 0 || (rest.length === 1 && rest[0] === ""))
    return { id: lower, part: { kind: "self" } };
  if (rest.length === 1 && rest[0] === "invitations")
    return { id: lower, part: { kind: "invitations" } };
  if (rest.length === 2 && rest[0] === "members" && isUuid(rest[1] ?? ""))
    return { id: lower, part: { kind: "member", userId: (rest[1] ?? "").toLowerCase() } };
  throw new HttpError(404, "not_found", "No such route.");
}
