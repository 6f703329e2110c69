/**
 * A team in a real (headless) Chromium against the whole local stack
 * (docs/flows/organizations.md): the owner switches to the team's pool and invites an address
 * from the page; the invitee follows the mailed link, lands signed in, and the page joins them
 * (once: the same link again is refused in words); the invitee's jobs draw on the pool under the
 * cap the admin set, and each refusal is a sentence; the owner sees what each member used, never
 * a prompt or an answer; removing the invitee cancels their running job there and the page
 * falls back to their own plan; the owner deletes the team, its jobs with it.
 */
import { randomUUID } from "node:crypto";
import type { Page } from "playwright-core";
import { describe, expect, test } from "vitest";
import {
  cardIn,
  devSignIn,
  generate,
  until,
  useBrowserStack,
  userIdOf,
} from "../support/browser.ts";
import { join, newOrganization, orgPlan } from "../support/organizations.ts";

const h = useBrowserStack();

const usageLine = (page: Page) => page.locator("#usage");

/** Waits until the usage line starts with `start`; the line. */
async function usageSays(page: Page, start: string): Promise<string> {
  return until(`the usage line "${start}…"`, async () => {
    const text = (await usageLine(page).textContent()) ?? "";
    return text.startsWith(start) ? text : null;
  });
}

/** The newest mail to `email` in the stack's mailbox. */
async function mailTo(email: string): Promise<{ link: string }> {
  const mail = h.stack().urls.mail;
  return until(`a mail to ${email}`, async () => {
    const res = await fetch(`${mail}/messages?to=${encodeURIComponent(email)}`);
    return ((await res.json()) as { messages: { link: string }[] }).messages[0];
  });
}

describe("a team in the browser", () => {
  test("invite from the page, join by the mailed link once, draw on the pool under a cap, see usage and no prompts, remove", async () => {
    const { sql } = h.stack();
    const plan = await orgPlan(sql, "browser_team_3", { units: 3, maxActive: 5 });
    const org = await newOrganization(sql, plan, "Acme");

    // The owner: signed in locally, made the team's owner, the page read again.
    const owner = await h.open();
    const ownerId = await devSignIn(owner.page, "free");
    await join(sql, org, ownerId, "owner");
    await owner.page.reload();
    await usageSays(owner.page, "Free plan: 0 of 1 generation used.");
    await owner.page.getByLabel("New jobs draw on").selectOption({ label: "Acme's pool" });
    await usageSays(owner.page, "Acme's pool: 0 of 3 generations used. Resets");
    await owner.page.getByRole("heading", { name: "Team: Acme" }).waitFor();

    const email = `invitee-${randomUUID().slice(0, 8)}@example.test`;
    await owner.page.getByLabel("Address to invite").fill(email);
    await owner.page.getByLabel("Cap per period, in generations (empty: no cap)").fill("1");
    await owner.page.getByRole("button", { name: "Send invitation" }).click();
    await until("the invitation's notice", async () =>
      (await owner.page.locator("#team-panel-notice").textContent())?.startsWith(
        `Invitation sent to ${email}.`,
      ),
    );
    await until("the invitation listed", async () =>
      (await owner.page.locator("#team-invitations").textContent())?.includes(
        `${email}: a member, capped at 1 generation, until`,
      ),
    );
    await h.screenshot(owner.page, "org-01-owner-invited");

    // The invitee follows the link: signed in as that address, joined, the pool chosen, and the
    // token gone from the address bar.
    const { link } = await mailTo(email);
    // In a tab beside the owner's: auth-js announces the invitee's sign-in to every tab of the
    // origin (its BroadcastChannel; this Chromium runs single-process, so contexts share it),
    // and the owner's tab must stay the owner's.
    const invitee = await h.open();
    await invitee.page.goto(link);
    const joined = await until("the joined notice", async () => {
      const text = (await invitee.page.locator("#team-notice").textContent()) ?? "";
      return text.startsWith("You joined") ? text : null;
    });
    expect(joined).toBe(
      `You joined Acme as a member. New jobs now draw on its pool; choose "My own plan" to use yours.`,
    );
    expect(await invitee.page.locator("#who").textContent()).toBe(`Signed in as ${email}`);
    expect(new URL(invitee.page.url()).searchParams.has("invitation")).toBe(false);
    await usageSays(
      invitee.page,
      "Acme's pool: 0 of 3 generations used. Your cap: 1 generation (0 generations used).",
    );
    // A member sees their role and no one's usage.
    expect(await invitee.page.locator("#team-summary").textContent()).toContain(
      "You are a member of Acme.",
    );
    expect(await invitee.page.locator("#team-admin").isHidden()).toBe(true);
    // The token is in the link's redirect (the mail's magic link is spent: sign-in is once).
    const token = new URL(new URL(link).searchParams.get("redirect_to") ?? "").searchParams.get(
      "invitation",
    );
    expect(token).toMatch(/^[0-9a-f]{64}$/);

    // The same link's token again: refused in words, nothing joined twice.
    await invitee.page.goto(`/?invitation=${token}`);
    await until("the used invitation's refusal", async () =>
      (await invitee.page.locator("#team-error").textContent())?.startsWith(
        "This invitation has already been used",
      ),
    );

    // One job on the pool, under the cap of 1; a second is refused by the cap, in words.
    const firstPrompt = `A haiku about teams ${randomUUID().slice(0, 6)}`;
    await generate(invitee.page, firstPrompt);
    await cardIn(invitee.page, "succeeded");
    await usageSays(
      invitee.page,
      "Acme's pool: 1 of 3 generations used. Your cap: 1 generation (1 generation used).",
    );
    await generate(invitee.page, "A second haiku about teams");
    const capped = await until("the cap's refusal", async () => {
      const text = (await invitee.page.locator("#document-error").textContent()) ?? "";
      return text !== "" ? text : null;
    });
    expect(capped).toMatch(
      /^You have reached the cap your admin set \(1 generation a period; you have used 1 generation\)\. It resets /,
    );
    await h.screenshot(invitee.page, "org-02-invitee-capped");

    // The owner sees the invitee's usage, and none of their prompts; still as the owner.
    await owner.page.reload();
    expect(await userIdOf(owner.page)).toBe(ownerId);
    const row = owner.page.locator("#team-members li.member", { hasText: email });
    await until("the invitee's usage", async () =>
      (await row.textContent())?.includes(
        "Used 1 generation this period (cap 1 generation); 0 active jobs.",
      ),
    );
    expect(await owner.page.locator("body").textContent()).not.toContain(firstPrompt);
    expect(await owner.page.locator("#team-invitations").textContent()).toBe(
      "No invitation is waiting.",
    );

    // The owner lifts the cap; the invitee fills the pool; the next job is refused by the pool.
    await row.getByLabel(`Cap for ${email}, in generations (empty: no cap)`).fill("");
    await row.getByRole("button", { name: "Save cap" }).click();
    await until("the cap's notice", async () =>
      (await owner.page.locator("#team-panel-notice").textContent())?.startsWith(
        `${email}: no cap now.`,
      ),
    );
    await invitee.page.reload();
    await usageSays(invitee.page, "Acme's pool: 1 of 3 generations used. Resets");
    await generate(invitee.page, "[fake:slow:30000] A long report for the team");
    await cardIn(invitee.page, "running");
    await generate(invitee.page, "A third haiku about teams");
    await cardIn(invitee.page, "succeeded");
    await usageSays(invitee.page, "Acme's pool: 3 of 3 generations used.");
    await generate(invitee.page, "One haiku too many");
    const pooled = await until("the pool's refusal", async () => {
      const text = (await invitee.page.locator("#document-error").textContent()) ?? "";
      return text.startsWith("Your team's pool") ? text : null;
    });
    expect(pooled).toMatch(
      /^Your team's pool is used up until .+: 3 of 3 generations used\. You can still use your own plan\.$/,
    );

    // Removal: the invitee's running job there is canceled and settled by the cancel's rules.
    await owner.page.reload();
    await owner.page.getByRole("button", { name: `Remove ${email}` }).click();
    const removed = await until("the removal's notice", async () => {
      const text = (await owner.page.locator("#team-panel-notice").textContent()) ?? "";
      return text.startsWith(`${email} was removed.`) ? text : null;
    });
    expect(removed).toMatch(
      / 1 active job canceled; [01] refunded to the pool by the cancel rules\.$/,
    );
    // The notice is written before the panel reads the team again: wait for the list to follow.
    const members = await until("the members list without the removed member", async () => {
      const text = (await owner.page.locator("#team-members").textContent()) ?? "";
      return text.includes(email) ? null : text;
    });
    expect(members).toContain("You: Owner");
    await h.screenshot(owner.page, "org-03-owner-removed");

    await invitee.page
      .locator('li.job[data-phase="canceled"]', { hasText: "A long report for the team" })
      .waitFor();
    await until("the invitee back on their own plan", async () =>
      (await invitee.page.locator("#team-error").textContent())?.startsWith(
        "You are not a member of this team any more.",
      ),
    );
    await usageSays(invitee.page, "Free plan: 0 of 1 generation used.");
    expect(await invitee.page.locator("#draw-on-field").isHidden()).toBe(true);

    // The pool's books after it all: what the ledger says the jobs hold, nothing drifted.
    const drift = await sql.query(
      "select count(*)::int as n from public.quota_drift where organization_id = $1",
      [org],
    );
    expect(drift.rows[0].n).toBe(0);

    // The owner deletes the team: two presses, then it is gone from the page with its jobs.
    const remove = owner.page.locator("#team-delete");
    await remove.click();
    expect(await remove.textContent()).toBe("Press again to delete Acme");
    expect(await owner.page.locator("#team-panel-notice").textContent()).toContain(
      "deletes every member's jobs in it, prompts and answers included",
    );
    await remove.click();
    await until("the deletion's notice", async () =>
      (await owner.page.locator("#team-panel-notice").textContent())?.startsWith(
        "Acme was deleted, with its 3 jobs.",
      ),
    );
    await until("the team gone from the switch", () =>
      owner.page.locator("#draw-on-field").isHidden(),
    );
    await usageSays(owner.page, "Free plan: 0 of 1 generation used.");
    const left = await sql.query(
      "select count(*)::int as n from public.generation_jobs where organization_id = $1",
      [org],
    );
    expect(left.rows[0].n).toBe(0);
    expect([...owner.errors, ...invitee.errors]).toEqual([]);
  });
});
