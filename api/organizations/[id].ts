/**
 * One organization (docs/flows/organizations.md). `GET /api/organizations/:id`: its name, the
 * caller's role and usage; for an owner or admin also every member's usage and cap and the
 * pending invitations (never a job, a prompt or an output). `POST …/:id/invitations`
 * `{email, role, cap}`: an owner or admin invites an address (mailed by Supabase Auth).
 * `PATCH …/:id/members/:userId` `{cap}`: an owner or admin sets a cap. `DELETE
 * …/:id/members/:userId`: a member leaves, or an owner or admin removes them; their active jobs
 * there are canceled by the cancel's refund rules. `DELETE …/:id`: an owner deletes the
 * organization and its jobs' text for every member. An organization the caller is not in is 404.
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { HttpError } from "../../lib/errors.ts";
import { handle, json, readJson } from "../../lib/http.ts";
import { mailInvitation } from "../../lib/invitation-mail.ts";
import { log } from "../../lib/log.ts";
import {
  createInvitation,
  deleteOrganization,
  organizationPath,
  overview,
  removeMember,
  setCap,
} from "../../lib/organizations.ts";
import { parseCap, parseInvitation } from "../../lib/validate-organizations.ts";

const noRoute = () => new HttpError(404, "not_found", "No such route.");

/** Who asks (401 for no one) and what the path names. */
async function callerAndPath(d: Deps, req: Request) {
  const { userId } = await d.auth.userFromRequest(req);
  return { userId, ...organizationPath(new URL(req.url)) };
}

async function invite(d: Deps, req: Request): Promise<Response> {
  const { userId, id, part } = await callerAndPath(d, req);
  if (part.kind !== "invitations") throw noRoute();
  const asked = parseInvitation(await readJson(req, { maxBytes: 4096 }));
  const r = await createInvitation(d.rpc, { organizationId: id, by: userId, ...asked }).catch(
    async (error: unknown) => {
      // Not a member at all reads as no such organization, as everywhere.
      if (error instanceof HttpError && error.code === "forbidden")
        await overview(d.rpc, id, userId);
      throw error;
    },
  );
  try {
    await mailInvitation(d.config, asked.email, r.token);
  } catch (error) {
    // Nobody received the token: the invitation is withdrawn, so the list shows only sent ones.
    await d.rpc("revoke_invitation", { p_invitation_id: r.invitation.id, p_by: userId });
    throw error;
  }
  log.info("invitation_sent", { organizationId: id, invitationId: r.invitation.id });
  return json(201, { invitation: r.invitation });
}

async function dissolve(d: Deps, id: string, userId: string): Promise<Response> {
  const r = await deleteOrganization(d.rpc, { organizationId: id, by: userId });
  log.info("organization_deleted", { organizationId: id, jobs: r.jobs, canceled: r.canceled });
  return json(200, {
    deleted: true,
    erasedJobs: r.jobs,
    canceledJobs: r.canceled,
    removedMembers: r.members,
  });
}

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const { userId, id, part } = await callerAndPath(d, req);
      if (part.kind !== "self") throw noRoute();
      return json(200, { organization: await overview(d.rpc, id, userId) });
    },
    POST: (req) => invite(deps(), req),
    async PATCH(req) {
      const d = deps();
      const { userId, id, part } = await callerAndPath(d, req);
      if (part.kind !== "member") throw noRoute();
      const cap = parseCap(await readJson(req, { maxBytes: 1024 }));
      const member = await setCap(d.rpc, {
        organizationId: id,
        userId: part.userId,
        by: userId,
        cap,
      });
      return json(200, { member });
    },
    async DELETE(req) {
      const d = deps();
      const { userId, id, part } = await callerAndPath(d, req);
      if (part.kind === "self") return dissolve(d, id, userId);
      if (part.kind !== "member") throw noRoute();
      const r = await removeMember(d.rpc, {
        organizationId: id,
        userId: part.userId,
        by: userId,
      }).catch(async (error: unknown) => {
        if (error instanceof HttpError && error.code === "forbidden")
          await overview(d.rpc, id, userId);
        throw error;
      });
      log.info("member_removed", {
        organizationId: id,
        canceled: r.canceled,
        refunded: r.refunded,
      });
      return json(200, { removed: true, canceledJobs: r.canceled, refundedJobs: r.refunded });
    },
  });
}

export default { fetch: createHandler(getDeps) };
