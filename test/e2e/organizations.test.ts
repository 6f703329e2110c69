/**
 * The organization routes on the built stack (docs/flows/organizations.md): an invitation mailed
 * through Supabase Auth's own mail, followed as an invitee would (the link signs them in and
 * lands on the page with the token), accepted once and by its addressee only; an admin sees each
 * member's usage and cap and nobody's prompts; a member sees none of another's jobs (404); a cap
 * set by an admin refuses; a removal cancels the member's jobs there and settles the pool.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, test } from "vitest";
import { join, newOrganization, orgPlan } from "../support/organizations.ts";
import { apiAs, expectAllSettled, type Json, until, useStack } from "../support/stack.ts";

const fixture = useStack();

async function signedIn() {
  const session = await fixture.stack.signIn({ plan: "free" });
  return { ...session, api: apiAs(fixture.stack, session.accessToken) };
}

/** An organization on a day plan of `units` jobs, with a signed-in owner. */
async function team(units = 10) {
  const { sql } = fixture.stack;
  const plan = await orgPlan(sql, `e2e_team_${units}`, { units, maxActive: 5 });
  const org = await newOrganization(sql, plan);
  const owner = await signedIn();
  await join(sql, org, owner.userId, "owner");
  return { org, owner };
}

async function member(org: string, cap: number | null = null) {
  const m = await signedIn();
  await join(fixture.stack.sql, org, m.userId, "member", cap);
  return m;
}

/** The newest mail to `email` in the stack's mailbox (it lists newest first). */
async function mailTo(email: string): Promise<{ link: string; html: string }> {
  return until(
    async () => {
      const res = await fetch(
        `${fixture.stack.urls.mail}/messages?to=${encodeURIComponent(email)}`,
      );
      return ((await res.json()) as { messages: { link: string; html: string }[] }).messages[0];
    },
    (m) => m !== undefined,
    { what: `a mail to ${email}` },
  ) as Promise<{ link: string; html: string }>;
}

/** Follows a mailed link as the browser would: where it lands, and the session it carries. */
async function follow(link: string): Promise<{ landed: URL; accessToken: string }> {
  const res = await fetch(link, { redirect: "manual" });
  expect(res.status).toBe(303);
  const landed = new URL(res.headers.get("location") ?? "");
  const fragment = new URLSearchParams(landed.hash.slice(1));
  return { landed, accessToken: fragment.get("access_token") ?? "" };
}

describe("invitations", () => {
  test("mailed by Auth, the link signs the invitee in on the page; accepted once, by its addressee", async () => {
    const { org, owner } = await team();
    const email = `invitee-${randomUUID().slice(0, 8)}@example.test`;
    const sent = await owner.api.call("POST", `/api/organizations/${org}/invitations`, {
      email: email.toUpperCase(),
      role: "member",
      cap: 2,
    });
    expect(sent.status).toBe(201);
    expect(sent.body.invitation).toMatchObject({ email, role: "member", cap: 2 });
    // The token goes to the address only: the answer never holds it.
    expect(JSON.stringify(sent.body)).not.toMatch(/[0-9a-f]{64}/);

    const mail = await mailTo(email);
    const { landed, accessToken } = await follow(mail.link);
    expect(landed.origin).toBe(new URL(fixture.stack.urls.app).origin);
    const token = landed.searchParams.get("invitation") ?? "";
    expect(token).toMatch(/^[0-9a-f]{64}$/);
    expect(accessToken).not.toBe("");

    // Someone else holding the link (forwarded, leaked) joins nothing.
    const stranger = await signedIn();
    const refused = await stranger.api.call("POST", "/api/organizations", { invitation: token });
    expect(refused.status).toBe(403);
    expect(refused.body.error.code).toBe("wrong_recipient");

    const invitee = apiAs(fixture.stack, accessToken);
    const joined = await invitee.call("POST", "/api/organizations", { invitation: token });
    expect(joined.status).toBe(200);
    expect(joined.body.organization).toMatchObject({ id: org, role: "member" });
    expect(joined.body.organization.usage).toMatchObject({ memberCap: 2, used: 0, limit: 10 });
    expect(joined.body.organization.members).toBeUndefined();

    const again = await invitee.call("POST", "/api/organizations", { invitation: token });
    expect(again.status).toBe(409);
    expect(again.body.error.code).toBe("invitation_used");

    const mine = await invitee.call("GET", "/api/organizations");
    expect(mine.body.organizations.map((o: Json) => o.id)).toEqual([org]);
    const seen = await owner.api.call("GET", `/api/organizations/${org}`);
    expect(seen.body.organization.invitations).toEqual([]);
    expect(seen.body.organization.members.map((m: Json) => m.email)).toContain(email);
  });

  test("refusals: a member cannot invite, a stranger sees no organization, bad bodies are 400", async () => {
    const { org, owner } = await team();
    const m = await member(org);
    const byMember = await m.api.call("POST", `/api/organizations/${org}/invitations`, {
      email: "someone@example.test",
    });
    expect([byMember.status, byMember.body.error.code]).toEqual([403, "forbidden"]);
    const stranger = await signedIn();
    for (const [method, path, body] of [
      ["GET", `/api/organizations/${org}`, undefined],
      ["POST", `/api/organizations/${org}/invitations`, { email: "someone@example.test" }],
      ["DELETE", `/api/organizations/${org}/members/${m.userId}`, undefined],
      ["PATCH", `/api/organizations/${org}/members/${m.userId}`, { cap: 0 }],
    ] as const) {
      const r = await stranger.api.call(method, path, body);
      expect([method, path, r.status, r.body.error.code]).toEqual([method, path, 404, "not_found"]);
    }
    for (const body of [
      {},
      { email: "not an address" },
      { email: "a@b.test", role: "owner" },
      { email: "a@b.test", cap: -1 },
      { email: "a@b.test", extra: 1 },
    ]) {
      const r = await owner.api.call("POST", `/api/organizations/${org}/invitations`, body);
      expect([r.status, r.body.error.code]).toEqual([400, "invalid_invitation"]);
    }
    for (const invitation of ["", "x".repeat(64), 42, null])
      expect((await owner.api.call("POST", "/api/organizations", { invitation })).status).toBe(400);
    const unknown = await owner.api.call("POST", "/api/organizations", {
      invitation: "a".repeat(64),
    });
    expect([unknown.status, unknown.body.error.code]).toEqual([404, "invitation_not_found"]);
    expect((await owner.api.call("GET", `/api/organizations/${org}/nothing`)).status).toBe(404);
    expect((await owner.api.call("GET", "/api/organizations/not-a-uuid")).status).toBe(404);
    expect((await owner.api.call("PUT", `/api/organizations/${org}`)).status).toBe(405);
    const anonymous = await fetch(`${fixture.stack.urls.app}/api/organizations`);
    expect(anonymous.status).toBe(401);
    expect(await owner.api.call("GET", `/api/organizations/${org}`)).toMatchObject({ status: 200 });
  });
});

describe("members", () => {
  test("an admin sees each member's usage and cap and no one's prompts; another member's job is a 404", async () => {
    const { org, owner } = await team();
    const a = await member(org, 3);
    const b = await member(org);
    const marker = `private-marker-${randomUUID()}`;
    const job = await a.api.call("POST", "/api/jobs", { prompt: marker, organization_id: org });
    expect(job.status).toBe(202);
    await a.api.waitTerminal(job.body.job.id);

    const seen = await owner.api.call("GET", `/api/organizations/${org}`);
    expect(seen.status).toBe(200);
    const rows = Object.fromEntries(seen.body.organization.members.map((m: Json) => [m.userId, m]));
    expect(rows[a.userId]).toMatchObject({ role: "member", cap: 3, used: 1, active: 0 });
    expect(rows[b.userId]).toMatchObject({ cap: null, used: 0 });
    expect(seen.body.organization.usage).toMatchObject({ used: 1, limit: 10 });
    expect(JSON.stringify(seen.body)).not.toContain(marker);

    for (const other of [owner, b]) {
      const r = await other.api.job(job.body.job.id);
      expect([r.status, r.body.error.code]).toEqual([404, "not_found"]);
      expect(JSON.stringify((await other.api.list()).body)).not.toContain(marker);
    }
    // A member's own view has their usage, not the others'.
    const own = await b.api.call("GET", `/api/organizations/${org}`);
    expect(own.body.organization.members).toBeUndefined();
    expect(own.body.organization.invitations).toBeUndefined();
  });

  test("a cap an admin sets refuses the member's next job in words; bad caps are 400", async () => {
    const { org, owner } = await team();
    const m = await member(org);
    const set = await owner.api.call("PATCH", `/api/organizations/${org}/members/${m.userId}`, {
      cap: 1,
    });
    expect(set.status).toBe(200);
    expect(set.body.member).toMatchObject({ userId: m.userId, cap: 1 });
    const first = await m.api.call("POST", "/api/jobs", { prompt: "one", organization_id: org });
    expect(first.status).toBe(202);
    const second = await m.api.call("POST", "/api/jobs", { prompt: "two", organization_id: org });
    expect([second.status, second.body.error.code]).toEqual([429, "member_cap_reached"]);
    for (const cap of [-1, 1.5, "2", undefined])
      expect(
        (await owner.api.call("PATCH", `/api/organizations/${org}/members/${m.userId}`, { cap }))
          .status,
      ).toBe(400);
    const byMember = await m.api.call("PATCH", `/api/organizations/${org}/members/${m.userId}`, {
      cap: 99,
    });
    expect([byMember.status, byMember.body.error.code]).toEqual([403, "forbidden"]);
    await m.api.waitTerminal(first.body.job.id);
  });

  test("removal cancels the member's running job there, refunds the pool, and ends their access", async () => {
    const { org, owner } = await team(5);
    const m = await member(org);
    const job = await m.api.call("POST", "/api/jobs", {
      prompt: "[fake:chunk_ms:200] [fake:tokens:400] a long one",
      organization_id: org,
    });
    expect(job.status).toBe(202);
    await m.api.waitRunning(job.body.job.id);
    const gone = await owner.api.call("DELETE", `/api/organizations/${org}/members/${m.userId}`);
    expect(gone.status).toBe(200);
    // A running cancel on a job plan refunds within the plan's bound (here the 5 a day).
    expect(gone.body).toMatchObject({ removed: true, canceledJobs: 1, refundedJobs: 1 });
    const ended = await m.api.waitTerminal(job.body.job.id);
    expect(ended.status).toBe("canceled");
    expect((await m.api.call("GET", `/api/organizations/${org}`)).status).toBe(404);
    const again = await m.api.call("POST", "/api/jobs", { prompt: "after", organization_id: org });
    expect([again.status, again.body.error.code]).toEqual([403, "not_a_member"]);
    const pool = await owner.api.call("GET", `/api/organizations/${org}`);
    expect(pool.body.organization.usage.used).toBe(0);
    const last = await owner.api.call(
      "DELETE",
      `/api/organizations/${org}/members/${owner.userId}`,
    );
    expect([last.status, last.body.error.code]).toEqual([409, "last_owner"]);
    await expectAllSettled(fixture.stack);
  });

  test("an owner deletes the organization: a running job there is canceled, every member's jobs there are gone, their own stay", async () => {
    const { org, owner } = await team(5);
    const m = await member(org);
    await join(fixture.stack.sql, org, (await signedIn()).userId, "admin");
    const anAdmin = await signedIn();
    await join(fixture.stack.sql, org, anAdmin.userId, "admin");
    const marker = `team-secret-${randomUUID()}`;
    const running = await m.api.call("POST", "/api/jobs", {
      prompt: `[fake:chunk_ms:200] [fake:tokens:400] ${marker}`,
      organization_id: org,
    });
    expect(running.status).toBe(202);
    const personal = await m.api.call("POST", "/api/jobs", { prompt: "my own" });
    expect(personal.status).toBe(202);
    await m.api.waitRunning(running.body.job.id);

    const byAdmin = await anAdmin.api.call("DELETE", `/api/organizations/${org}`);
    expect([byAdmin.status, byAdmin.body.error.code]).toEqual([403, "forbidden"]);
    const byStranger = await (await signedIn()).api.call("DELETE", `/api/organizations/${org}`);
    expect([byStranger.status, byStranger.body.error.code]).toEqual([404, "not_found"]);

    const deleted = await owner.api.call("DELETE", `/api/organizations/${org}`);
    expect(deleted.status).toBe(200);
    expect(deleted.body).toEqual({
      deleted: true,
      erasedJobs: 1,
      canceledJobs: 1,
      removedMembers: 4,
    });
    for (const who of [owner, m]) {
      expect((await who.api.call("GET", `/api/organizations/${org}`)).status).toBe(404);
      expect((await who.api.call("GET", "/api/organizations")).body.organizations).toEqual([]);
    }
    const gone = await m.api.job(running.body.job.id);
    expect([gone.status, gone.body.error.code]).toEqual([404, "not_found"]);
    expect(JSON.stringify((await m.api.list()).body)).not.toContain(marker);
    expect((await m.api.waitTerminal(personal.body.job.id)).status).toBe("succeeded");
    await expectAllSettled(fixture.stack);
  });
});
