/**
 * Under `npm run dev` (the real stack, no routing in the browser): the page signs a person up
 * through the app's dev-only `/auth/v1` pass-through to the Auth stand-in, the mail is read
 * from the stack's mailbox over HTTP as a developer would, and its link, followed in the
 * browser, lands on the page signed in with a token the app accepts. The dev sign-in is still
 * offered beside it.
 */
import { randomUUID } from "node:crypto";
import { cp, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { expect, test } from "vitest";
import { SCREENSHOTS, until, useBrowserStack } from "../support/browser.ts";

const h = useBrowserStack();

test("npm run dev: sign up from the page, open the mailbox's link, signed in", async () => {
  const stack = h.stack();
  const { page } = await h.open();
  await page.getByRole("button", { name: "Create account" }).waitFor();
  expect(await page.getByRole("button", { name: "Sign in locally" }).isVisible()).toBe(true);
  const email = `dev-${randomUUID().slice(0, 8)}@example.test`;
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password", { exact: true }).fill("correct horse battery");
  await page.getByRole("button", { name: "Create account" }).click();
  await until("the check-your-email notice", async () =>
    (await page.locator("#sign-in-notice").textContent())?.startsWith("Check your email"),
  );

  const mail = await until("the confirmation mail", async () => {
    const res = await fetch(`${stack.urls.mail}/messages?to=${encodeURIComponent(email)}`);
    const { messages } = (await res.json()) as { messages: { link: string; subject: string }[] };
    return messages.find((m) => m.subject === "Confirm Your Signup");
  });
  expect(mail.link.startsWith(`${stack.urls.app}/auth/v1/verify?`)).toBe(true);
  const box = await h.open();
  await box.page.goto(stack.urls.mail);
  await box.page.getByRole("link", { name: mail.link }).waitFor();
  await h.screenshot(box.page, "20-dev-mailbox");

  await page.goto(mail.link);
  await until("the usage line", async () =>
    (await page.locator("#usage").textContent())?.startsWith("Free plan: 0 of 1"),
  );
  expect(await page.locator("#who").textContent()).toBe(`Signed in as ${email}`);
  await h.screenshot(page, "21-dev-confirmed-signed-in");
  const shots = "/tmp/gotrue-shots";
  await mkdir(shots, { recursive: true });
  for (const name of ["20-dev-mailbox", "21-dev-confirmed-signed-in"])
    await cp(join(SCREENSHOTS, `${name}.png`), join(shots, `${name}.png`));
});
