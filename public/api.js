// @ts-check
/**
 * The HTTP API as the page uses it (docs/DESIGN.md#http-api): the page's calls over the typed
 * client (public/client.js), which is kept free of the page's habits (a prompt as a string, a
 * list of 20, an ended job's cancel read as that job) so it can stand alone as a package. Every
 * refusal is the client's `ApiError` carrying a `Problem` for `errorSentence`; a request that
 * got no answer at all is `code: "network"`.
 */
import { ApiError, createClient } from "./client.js";

export { ApiError };

/** @typedef {import("./client.js").Job} Job */
/** @typedef {import("./client.js").Usage} Usage */
/** @typedef {import("./client.js").ClientOptions} ApiOptions */
/** @typedef {import("../lib/organizations.ts").Organization} Organization */

/** @param {string} id */
const orgPath = (id) => `/api/organizations/${encodeURIComponent(id)}`;

/** @param {ApiOptions} options */
export function createApi(options) {
  const client = createClient(options);
  return {
    client,
    /**
     * Start a job: a document from a prompt (the string), or any kind with its input.
     * `replayed` is true when the server recognised the key and returned the job it already
     * had (nothing reserved again).
     * `organizationId`: drawn on that team's pool (and the caller's cap there); null: their own plan.
     * @param {string | { kind: string, input: Record<string, unknown> }} job
     * @param {string} idempotencyKey
     * @param {string | null} [organizationId]
     * @returns {Promise<{ job: Job, usage: Usage, replayed: boolean }>}
     */
    async submit(job, idempotencyKey, organizationId = null) {
      const body = typeof job === "string" ? { prompt: job } : job;
      const r = await client.request("POST", "/api/jobs", {
        body: organizationId ? { ...body, organization_id: organizationId } : body,
        headers: { "idempotency-key": idempotencyKey },
      });
      return { job: r.body.job, usage: r.body.usage, replayed: r.status === 200 };
    },
    /**
     * @param {string | null} [cursor]
     * @returns {Promise<{ jobs: Job[], nextCursor: string | null }>}
     */
    listJobs: (cursor = null) => client.list({ limit: 20, cursor }),
    /**
     * @param {string} id
     * @returns {Promise<Job>}
     */
    getJob: (id) => client.get(id),
    /**
     * Cancel; a job that already ended comes back as it is (409 `already_finished`). Whether
     * this cancel refunded is the returned job's `quotaRefunded`.
     * @param {string} id
     * @returns {Promise<Job>}
     */
    async cancelJob(id) {
      try {
        return (await client.cancel(id)).job;
      } catch (e) {
        if (e instanceof ApiError && e.code === "already_finished" && e.problem.job) {
          return e.problem.job;
        }
        throw e;
      }
    },
    /** @returns {Promise<Usage>} */
    usage: () => client.usage(),
    /** The caller's organizations (docs/flows/organizations.md), by name. */
    async organizations() {
      /** @type {Organization[]} */
      const list = (await client.request("GET", "/api/organizations")).body.organizations;
      return list;
    },
    /**
     * One organization as the caller sees it (owners and admins: its members and invitations).
     * @param {string} id
     * @returns {Promise<Organization>}
     */
    async organization(id) {
      return (await client.request("GET", orgPath(id))).body.organization;
    },
    /**
     * Joins by the token of a mailed invitation; the organization joined.
     * @param {string} token
     * @returns {Promise<Organization>}
     */
    async acceptInvitation(token) {
      const r = await client.request("POST", "/api/organizations", { body: { invitation: token } });
      return r.body.organization;
    },
    /**
     * @param {string} id
     * @param {{ email: string, role: "admin" | "member", cap: number | null }} invitation
     */
    async invite(id, invitation) {
      return (await client.request("POST", `${orgPath(id)}/invitations`, { body: invitation })).body
        .invitation;
    },
    /**
     * @param {string} id
     * @param {string} userId
     * @param {number | null} cap
     */
    async setCap(id, userId, cap) {
      const path = `${orgPath(id)}/members/${encodeURIComponent(userId)}`;
      return (await client.request("PATCH", path, { body: { cap } })).body.member;
    },
    /**
     * An owner deletes the organization: its active jobs canceled, its jobs gone for every member.
     * @param {string} id
     * @returns {Promise<{ erasedJobs: number, canceledJobs: number, removedMembers: number }>}
     */
    async deleteOrganization(id) {
      return (await client.request("DELETE", orgPath(id))).body;
    },
    /**
     * A member leaves, or an owner or admin removes them: their active jobs there are canceled.
     * @param {string} id
     * @param {string} userId
     * @returns {Promise<{ canceledJobs: number, refundedJobs: number }>}
     */
    async removeMember(id, userId) {
      const path = `${orgPath(id)}/members/${encodeURIComponent(userId)}`;
      return (await client.request("DELETE", path)).body;
    },
  };
}

/** @typedef {ReturnType<typeof createApi>} Api */
