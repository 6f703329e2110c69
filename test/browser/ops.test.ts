/**
 * The operator page in a browser, on the built app under its real CSP: an operator (a Supabase
 * user the service role gave `app_metadata.role = "operator"` through the Auth admin API)
 * signs in on /ops and sees each chart drawn from jobs this test ran (a success, a refusal, a
 * provider 429 then a cancel); a user without the role gets 403 and sees no data. axe-core
 * audits both pages; no CSP violation is reported. A stack of its own: the 429 closes the
 * shared provider gate.
 */

import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import type { BrowserContext, Page } from "playwright-core";
import { expect, test } from "vitest";
import { until, useBrowserStack } from "../support/browser.ts";

const h = useBrowserStack();
const AXE = readFileSync(
  new URL("../../node_modules/axe-core/axe.min.js", import.meta.url),
  "utf8",
);
const PASSWORD = "operator-password-1";

/** A confirmed GoTrue user with a password, `app_metadata` set by the service role. */
async function authUser(appMetadata: Record<string, unknown> | null): Promise<string> {
  const { app } = h.stack().urls;
  const { publishableKey, secretKey } = h.stack().auth.project;
  const email = `op-${randomUUID().slice(0, 8)}@example.test`;
  const signup = await fetch(`${app}/auth/v1/signup`, {
    method: "POST",
    headers: { apikey: publishableKey, "content-type": "application/json" },
    body: JSON.stringify({ email, password: PASSWORD }),
  });
  expect(signup.status).toBe(200);
  const { id } = (await signup.json()) as { id: string };
  // what supabase-js's auth.admin.updateUserById(id, {...}) sends with the secret key
  const admin = await fetch(`${app}/auth/v1/admin/users/${id}`, {
    method: "PUT",
    headers: {
      apikey: secretKey,
      authorization: `Bearer ${secretKey}`,
      "content-type": "application/json",
    },
    body: JSON.stringify({
      email_confirm: true,
      ...(appMetadata ? { app_metadata: appMetadata } : {}),
    }),
  });
  expect(admin.status).toBe(200);
  const user = await admin.json();
  expect(user.app_metadata).toEqual({ provider: "email", providers: ["email"], ...appMetadata });
  // a user's own token cannot do it: GoTrue's 403 not_admin
  const denied = await fetch(`${app}/auth/v1/admin/users/${id}`, {
    method: "PUT",
    headers: {
      apikey: publishableKey,
      authorization: `Bearer ${await h.stack().auth.mint({ userId: id })}`,
      "content-type": "application/json",
    },
    body: JSON.stringify({ app_metadata: { role: "operator" } }),
  });
  expect(denied.status).toBe(403);
  return email;
}

async function api(method: string, path: string, token: string, body?: unknown) {
  const res = await fetch(`${h.stack().urls.app}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  // The fields these tests read of an enqueue's answer; any other answer leaves `job` unset.
  return { status: res.status, body: (await res.json()) as { job?: { id: string } } };
}

async function jobIn(id: string, where: string): Promise<void> {
  await until(
    `job ${id}: ${where}`,
    async () => {
      const { rows } = await h
        .stack()
        .sql.query(`select 1 from public.generation_jobs where id = $1 and ${where}`, [id]);
      return rows.length === 1;
    },
    30_000,
  );
}

function jobId(answer: { status: number; body: { job?: { id: string } } }): string {
  expect(answer.status).toBe(202);
  return answer.body.job?.id ?? "";
}

/** A success, a refusal, and a provider 429 that is then canceled, through the real API. */
async function runJobs(): Promise<void> {
  const { accessToken } = await h.stack().signIn({ plan: "pro" });
  const ok = await api("POST", "/api/jobs", accessToken, { prompt: "A haiku about queues" });
  expect(ok.status).toBe(202);
  await jobIn(jobId(ok), "status = 'succeeded'");
  const refused = await api("POST", "/api/jobs", accessToken, {
    prompt: "[fake:refuse] Something",
  });
  await jobIn(jobId(refused), "status = 'failed'");
  const limited = await api("POST", "/api/jobs", accessToken, {
    prompt: "[fake:rate_limit_exceeded:900] Summarise the news",
  });
  await jobIn(jobId(limited), "status = 'queued' and provider_quota_hits = 1");
  expect((await api("DELETE", `/api/jobs/${jobId(limited)}`, accessToken)).status).toBe(200);
}

async function openOps(): Promise<{
  page: Page;
  context: BrowserContext;
  csp: () => Promise<string[]>;
}> {
  const { page, context } = await h.open();
  await context.addInitScript(() => {
    const seen: string[] = [];
    (window as unknown as { cspViolations: string[] }).cspViolations = seen;
    document.addEventListener("securitypolicyviolation", (e) =>
      seen.push(`${e.violatedDirective} ${e.blockedURI}`),
    );
  });
  await page.goto("/ops");
  return {
    page,
    context,
    csp: () =>
      page.evaluate(() => (window as unknown as { cspViolations: string[] }).cspViolations),
  };
}

async function signIn(page: Page, email: string) {
  await page.getByLabel("Email").fill(email);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
}

async function axeViolations(page: Page): Promise<string[]> {
  await page.evaluate(AXE);
  return page.evaluate(async () => {
    const axe = (
      window as unknown as {
        axe: { run(c: Document): Promise<{ violations: Array<{ id: string; nodes: unknown[] }> }> };
      }
    ).axe;
    const r = await axe.run(document);
    return r.violations.map((v) => `${v.id} (${v.nodes.length})`);
  });
}

test("an operator sees each chart drawn from the jobs this test ran; axe finds nothing; no CSP violation", async () => {
  await runJobs();
  const email = await authUser({ role: "operator" });
  const { page, csp } = await openOps();
  await signIn(page, email);
  await page.getByRole("heading", { name: "The system" }).waitFor();
  await page.getByLabel("Last hour").check();
  await until("the hour's charts", async () =>
    (await page.locator("#range").textContent())?.includes("one point per 1 min"),
  );
  for (const id of [
    "jobs",
    "failures",
    "refunds",
    "tokens",
    "provider-429s",
    "provider-gate",
    "queue-latency",
    "run-time",
  ]) {
    const chart = page.locator(`section#${id}`);
    await chart.locator(".uplot").waitFor();
    expect(await chart.locator(".empty").count(), id).toBe(0);
  }
  // no failure callback ran: that chart says so instead of drawing zeros
  expect(await page.locator("section#failure-callbacks .empty").textContent()).toBe(
    "No data in this window.",
  );
  expect(await page.locator("#stuck-value").textContent()).toBe("0");
  expect(await page.locator("#drift-value").textContent()).toBe("0");
  expect(await page.locator("#drift-detail").textContent()).toMatch(
    /^quota periods from \S.* \(UTC\), the ones that can still change;/,
  );
  expect(await page.locator("section#failures").getAttribute("aria-label")).toBeNull();
  expect(await page.locator("section#failures .plot").getAttribute("aria-label")).toContain(
    "model_refused 1",
  );
  expect(await page.locator("section#provider-429s .plot").getAttribute("aria-label")).toContain(
    "429s counted by jobs 1",
  );
  await h.screenshot(page, "ops-01-operator");
  expect(await axeViolations(page)).toEqual([]);
  expect(await csp()).toEqual([]);
});

test("a signed-in user without the operator role gets 403 and sees no data", async () => {
  const email = await authUser(null);
  const { page, csp } = await openOps();
  const answers: number[] = [];
  page.on("response", (r) => {
    if (r.url().includes("/api/ops/metrics")) answers.push(r.status());
  });
  await signIn(page, email);
  await page.getByRole("heading", { name: "Not an operator" }).waitFor();
  expect(answers).toEqual([403]);
  expect(await page.locator("#dashboard").isHidden()).toBe(true);
  expect(await page.locator("section.chart").count()).toBe(0);
  await h.screenshot(page, "ops-02-forbidden");
  expect(await axeViolations(page)).toEqual([]);
  expect(await csp()).toEqual([]);
});

test("the main page passes axe-core too", async () => {
  const { page } = await h.open();
  await page.getByRole("button", { name: "Sign in locally" }).waitFor();
  expect(await axeViolations(page)).toEqual([]);
});
