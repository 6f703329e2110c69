/**
 * A person signs up from the page, as in a deployment: the page (the real build, under its
 * real CSP) talks to `https://demo-project.supabase.co/auth/v1` through auth-js; the browser's
 * requests to that origin, the emailed links included, are carried to the local Auth stand-in
 * (dev/auth/gotrue.ts) on the stack's own database, and the mail is read from its mailbox.
 * The access tokens it issues are real ones the app verifies.
 */
import { randomUUID } from "node:crypto";
import { cp, mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, expect, test } from "vitest";
import { type RunningGotrue, startGotrue } from "../../dev/auth/gotrue-server.ts";
import { projectKeys } from "../../dev/auth/gotrue-stack.ts";
import { SCREENSHOTS, until, useBrowserStack, userIdOf } from "../support/browser.ts";

const h = useBrowserStack();
const PROJECT = "https://demo-project.supabase.co";
const SHOTS = "/tmp/gotrue-shots";
const KEY = "sb_publishable_browser-test";
let gotrue: RunningGotrue;

beforeAll(async () => {
  const stack = h.stack();
  gotrue = await startGotrue({
    port: 0,
    db: stack.sql,
    publicUrl: PROJECT,
    siteUrl: stack.urls.app,
    apiKeys: () => new Set([KEY]),
    // the stack's project key (ES256, a project created today): the app verifies these tokens
    // against the project's JWKS, as it would a deployment's
    issuer: stack.auth.project.issuer,
    ...(await projectKeys(stack.auth.project)),
  });
  await mkdir(SHOTS, { recursive: true });
}, 60_000);
afterAll(async () => {
  await gotrue?.close();
});

/** The page in deployment mode, its Supabase project carried to the stand-in. */
async function deploymentPage(): Promise<{ page: Page; context: BrowserContext }> {
  const { page, context } = await h.open();
  await context.route("**/__dev/**", (route) =>
    route.fulfill({ status: 404, contentType: "text/plain", body: "The page could not be found" }),
  );
  await context.route("**/api/public-config", (route) =>
    route.fulfill({ json: { supabaseUrl: PROJECT, supabasePublishableKey: KEY } }),
  );
  await context.route(`${PROJECT}/**`, async (route) => {
    const url = route.request().url().replace(PROJECT, gotrue.url);
    try {
      await route.fulfill({ response: await route.fetch({ url, maxRedirects: 0 }) });
    } catch {
      // the stand-in stopped under a request still in flight as the file ends
      await route.abort().catch(() => undefined);
    }
  });
  await page.reload();
  await page.getByRole("button", { name: "Sign in", exact: true }).waitFor();
  return { page, context };
}

async function shot(page: Page, name: string) {
  await h.screenshot(page, name);
  await cp(join(SCREENSHOTS, `${name}.png`), join(SHOTS, `${name}.png`));
}

const address = () => `ada-${randomUUID().slice(0, 8)}@example.test`;

async function mailTo(to: string, subject: string): Promise<string> {
  const mail = await until(`the mail "${subject}" to ${to}`, () =>
    gotrue.mailbox.list(to).find((m) => m.subject === subject),
  );
  return mail.link;
}

async function fill(page: Page, email: string, password: string) {
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password", { exact: true }).fill(password);
}

const signedInAs = async (page: Page, email: string) => {
  await until("the usage line", async () =>
    (await page.locator("#usage").textContent())?.startsWith("Free plan: 0 of 1"),
  );
  expect(await page.locator("#who").textContent()).toBe(`Signed in as ${email}`);
};

const errorText = async (page: Page) => {
  const error = page.locator("#sign-in-error");
  await until("the sign-in error", async () => (await error.textContent()) !== "");
  return error.textContent();
};

/**
 * A new account with the password "correct horse battery", confirmed by its mail's link (which
 * signs in), then signed out: its address.
 */
async function confirmedAccount(page: Page): Promise<string> {
  const email = address();
  await fill(page, email, "correct horse battery");
  await page.getByRole("button", { name: "Create account" }).click();
  await page.goto(await mailTo(email, "Confirm Your Signup"));
  await signedInAs(page, email);
  await page.getByRole("button", { name: "Sign out" }).click();
  return email;
}

/** Asks for a mail to `email` with the button `button`; the page's notice then says `notice`. */
async function askForMail(page: Page, email: string, button: string, notice: string) {
  await page.getByLabel("Email").fill(email);
  await page.getByRole("button", { name: button }).click();
  await until(`the notice "${notice}"`, async () =>
    (await page.locator("#sign-in-notice").textContent())?.includes(notice),
  );
}

test("sign up, get the mail, follow the link: signed in, and the app knows the new user", async () => {
  const { page } = await deploymentPage();
  const email = address();
  await shot(page, "01-sign-in-form");
  await fill(page, email, "correct horse battery");
  await page.getByRole("button", { name: "Create account" }).click();
  const notice = page.locator("#sign-in-notice");
  await until("the check-your-email notice", async () =>
    (await notice.textContent())?.startsWith("Check your email"),
  );
  expect(await notice.textContent()).toBe(
    `Check your email: we sent a link to ${email}. Open it to confirm your account.`,
  );
  await shot(page, "02-sign-up-check-your-email");

  // before confirming, the password alone is not enough
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  expect(await errorText(page)).toBe(
    "Confirm your email address first: open the link we sent you.",
  );
  await shot(page, "03-unconfirmed-sign-in");

  const link = await mailTo(email, "Confirm Your Signup");
  expect(link.startsWith(`${PROJECT}/auth/v1/verify?`)).toBe(true);
  await page.goto(link);
  await signedInAs(page, email);
  // auth-js took the session from the fragment and cleared it
  expect(new URL(page.url()).hash).toBe("");
  await shot(page, "04-confirmed-signed-in");
  const userId = await userIdOf(page);
  // a token of a project created today: ES256, by the project's key, which the app accepted
  const token: string = await page.evaluate(
    () => JSON.parse(sessionStorage.getItem("quota-jobs.session") ?? "{}").accessToken,
  );
  const header = JSON.parse(Buffer.from(token.split(".")[0] ?? "", "base64url").toString());
  expect(header).toMatchObject({ alg: "ES256", kid: h.stack().auth.project.signingKey?.kid });
  const { rows } = await h
    .stack()
    .sql.query("select email from auth.users where id = $1", [userId]);
  expect(rows).toEqual([{ email }]);

  // the same link again: spent
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.goto(link);
  expect(await errorText(page)).toBe(
    "That link has expired or was already used. Ask for a new one.",
  );
  await shot(page, "05-link-used-twice");
});

test("a wrong password, and an address that already has an account, are said in words", async () => {
  const { page } = await deploymentPage();
  const email = await confirmedAccount(page);
  await page.getByRole("button", { name: "Sign in", exact: true }).waitFor();

  await fill(page, email, "wrong horse battery");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  expect(await errorText(page)).toBe("That email and password do not match an account.");
  await shot(page, "06-wrong-password");

  await fill(page, email, "another horse battery");
  await page.getByRole("button", { name: "Create account" }).click();
  expect(await errorText(page)).toBe(
    "That email address already has an account. Sign in, or reset your password.",
  );
  await shot(page, "07-already-registered");

  await fill(page, email, "correct horse battery");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await signedInAs(page, email);
});

test("a magic link signs in without a password; asking twice within a minute is rate limited", async () => {
  const { page } = await deploymentPage();
  const email = await confirmedAccount(page);

  await askForMail(page, email, "Email me a sign-in link", "sign-in link");
  await shot(page, "08-magic-link-sent");
  await page.getByRole("button", { name: "Email me a sign-in link" }).click();
  expect(await errorText(page)).toBe("Too many attempts. Wait a minute and try again.");
  await shot(page, "09-rate-limited");

  await page.goto(await mailTo(email, "Your Magic Link"));
  await signedInAs(page, email);
  await shot(page, "10-magic-link-signed-in");
});

test("reset: the link asks for a new password, which then signs in; the old one no longer does", async () => {
  const { page } = await deploymentPage();
  const email = await confirmedAccount(page);

  await askForMail(page, email, "Reset password", "choose a new password");
  await page.goto(await mailTo(email, "Reset Your Password"));
  await page.getByLabel("New password").waitFor();
  await shot(page, "11-choose-new-password");
  await page.getByLabel("New password").fill("a brand new battery");
  await page.getByRole("button", { name: "Save password" }).click();
  await signedInAs(page, email);
  await shot(page, "12-new-password-signed-in");

  await page.getByRole("button", { name: "Sign out" }).click();
  await fill(page, email, "correct horse battery");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  expect(await errorText(page)).toBe("That email and password do not match an account.");
  await fill(page, email, "a brand new battery");
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
  await signedInAs(page, email);
});
