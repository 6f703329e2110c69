/**
 * `GET /api/organizations`: the caller's organizations, each with their role and their usage
 * there (the page's switch). `POST /api/organizations` with `{"invitation": "<token>"}`: the
 * caller joins by an invitation mailed to their address (docs/flows/organizations.md).
 */
import { type Deps, getDeps } from "../../lib/deps.ts";
import { HttpError } from "../../lib/errors.ts";
import { handle, json, readJson } from "../../lib/http.ts";
import { acceptInvitation, myOrganizations, overview } from "../../lib/organizations.ts";

function tokenOf(body: unknown): string {
  const token = (body as { invitation?: unknown } | null)?.invitation;
  if (typeof token !== "string" || !/^[0-9a-f]{64}$/.test(token))
    throw new HttpError(
      400,
      "invalid_invitation",
      '"invitation" must be the token from the invitation link.',
    );
  return token;
}

export function createHandler(deps: () => Deps) {
  return handle({
    async GET(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      return json(200, { organizations: await myOrganizations(d.rpc, userId) });
    },
    async POST(req) {
      const d = deps();
      const { userId } = await d.auth.userFromRequest(req);
      const token = tokenOf(await readJson(req, { maxBytes: 1024 }));
      const joined = await acceptInvitation(d.rpc, token, userId);
      return json(200, { organization: await overview(d.rpc, joined.organizationId, userId) });
    },
  });
}

export default { fetch: createHandler(getDeps) };
