/**
 * The dev app server (`dev/app-server.ts`) as `npm run dev` runs it: a process of its own on
 * plain Node 22, serving the build's output, with the shared test database for its dev sign-in.
 * Requests are written with node:http so a test can send what a browser or an attacker's page
 * would (any Host, any Origin, TRACE), which fetch() refuses to send.
 *
 * The attack: a page the developer visits reaches the loopback port by a form post or no-cors
 * fetch (CSRF) or by re-pointing its own host name at 127.0.0.1 (DNS rebinding), and mints a
 * token that spends the developer's OpenAI key. The dev routes refuse both.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, test } from "vitest";
import { prepareProject, projectFilePath } from "../../dev/auth/project.ts";
import { freePort } from "../../dev/ports.ts";
import { type AppProcess, startAppProcess } from "../../dev/stack/app-process.ts";
import { databaseUrl } from "../support/db.ts";

/** Distinct values, so an answer that leaks one is caught. */
const JWT_SECRET = `jwt-${randomBytes(24).toString("hex")}`;
const OPENAI_KEY = `sk-test-${randomBytes(24).toString("hex")}`;

let app: AppProcess;
let port = 0;
let authDir = "";
let sql: pg.Pool;
const logs: string[] = [];

beforeAll(async () => {
  port = await freePort();
  sql = new pg.Pool({ connectionString: databaseUrl(), max: 2 });
  // The dev sign-in mints through the local Auth stand-in's project (its signing key).
  authDir = await mkdtemp(join(tmpdir(), "quota-jobs-app-server-"));
  await prepareProject({
    dataDir: authDir,
    shape: "new",
    issuer: "http://127.0.0.1:54321/auth/v1",
    jwtSecret: JWT_SECRET,
  });
  app = await startAppProcess(
    port,
    { SUPABASE_JWT_SECRET: JWT_SECRET, OPENAI_API_KEY: OPENAI_KEY },
    databaseUrl(),
    (line) => logs.push(line),
    projectFilePath(authDir),
  );
}, 60_000);

afterAll(async () => {
  await app?.stop("SIGTERM");
  await sql?.end();
  if (authDir) await rm(authDir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json: { error?: { code: string; message: string }; accessToken?: string; userId?: string };
}

/** One request as written, Host included (default: the server's own 127.0.0.1:port). */
function send(
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        headers: { host: `127.0.0.1:${port}`, ...headers },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => {
          text += c;
        });
        res.on("end", () => {
          let json = {};
          try {
            json = JSON.parse(text);
          } catch {}
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        });
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

const signInBody = (userId: string) => JSON.stringify({ plan: "pro", userId });

async function userExists(userId: string): Promise<boolean> {
  const { rowCount } = await sql.query("select 1 from auth.users where id = $1", [userId]);
  return rowCount === 1;
}

/** `POST /__dev/sign-in` with these headers and body. */
const devSignIn = (headers: Record<string, string>, body: string) =>
  send("POST", "/__dev/sign-in", headers, body);

/** The headers of the page's own sign-in, served from `host`: JSON, from its own origin. */
const sameOrigin = (host: string) => ({
  host,
  origin: `http://${host}`,
  "content-type": "application/json",
});

describe("the dev sign-in mints a token only for the server's own page", () => {
  test("the page's own sign-in (JSON, same origin, its own Host) and curl (no Origin) get a token", async () => {
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `[::1]:${port}`]) {
      const userId = randomUUID();
      const page = await devSignIn(sameOrigin(host), signInBody(userId));
      expect(page.status, page.text).toBe(200);
      expect(page.json.userId).toBe(userId);
      expect(page.json.accessToken).toMatch(/^ey/);
      expect(await userExists(userId)).toBe(true);
    }
    const curl = await devSignIn({ "content-type": "application/json; charset=utf-8" }, "{}");
    expect(curl.status, curl.text).toBe(200);
  });

  test("DNS rebinding: a Host that is not the server's own loopback host:port is refused, and nothing is created", async () => {
    for (const host of [
      `evil.example:${port}`,
      "evil.example",
      `127.0.0.1:${port + 1}`,
      "127.0.0.1",
      `localhost.:${port}`,
      `0.0.0.0:${port}`,
    ]) {
      const userId = randomUUID();
      const res = await devSignIn(sameOrigin(host), signInBody(userId));
      expect(res.status, `${host}: ${res.text}`).toBe(403);
      expect(res.json.error?.code).toBe("host_not_allowed");
      expect(res.json.accessToken).toBeUndefined();
      expect(await userExists(userId)).toBe(false);
    }
  });

  test("CSRF: an Origin that is not the server's own is refused, and nothing is created", async () => {
    for (const origin of [
      "http://evil.example",
      `http://127.0.0.1:${port + 1}`,
      `https://127.0.0.1:${port}`,
      "null",
    ]) {
      const userId = randomUUID();
      const res = await devSignIn(
        { origin, "content-type": "application/json" },
        signInBody(userId),
      );
      expect(res.status, `${origin}: ${res.text}`).toBe(403);
      expect(res.json.error?.code).toBe("origin_not_allowed");
      expect(await userExists(userId)).toBe(false);
    }
  });

  test("a body that is not application/json (what a form or a no-cors fetch sends) is 415, and nothing is created", async () => {
    for (const contentType of [
      "text/plain",
      "text/plain;charset=UTF-8",
      "application/x-www-form-urlencoded",
      "multipart/form-data; boundary=x",
      undefined,
    ]) {
      const userId = randomUUID();
      const res = await devSignIn(
        contentType ? { "content-type": contentType } : {},
        signInBody(userId),
      );
      expect(res.status, `${contentType}: ${res.text}`).toBe(415);
      expect(res.json.error?.code).toBe("unsupported_media_type");
      expect(await userExists(userId)).toBe(false);
    }
  });

  test("GET /__dev/info answers only at the server's own address too (no reads through a rebound name)", async () => {
    const info = (await send("GET", "/__dev/info")).json as unknown as {
      mode: string;
      plans: { id: string }[];
    };
    expect(info.mode).toBe("dev");
    // the database's plans, the one list: the page's local sign-in offers each, economy too
    const seeded = (await sql.query("select id from public.plans")).rows.map((r) => r.id);
    expect(info.plans.map((p) => p.id).sort()).toEqual(seeded.sort());
    expect(info.plans[0]).toMatchObject({ id: "free", name: "Free", period: "day", units: 1 });
    expect(seeded).toContain("economy");
    const rebound = await send("GET", "/__dev/info", { host: `evil.example:${port}` });
    expect(rebound.status).toBe(403);
    expect(rebound.json.error?.code).toBe("host_not_allowed");
    const crossSite = await send("GET", "/__dev/info", { origin: "http://evil.example" });
    expect(crossSite.status).toBe(403);
    expect(crossSite.json.error?.code).toBe("origin_not_allowed");
    const unknown = await send("GET", "/__dev/nothing", { host: `evil.example:${port}` });
    expect(unknown.status).toBe(403);
    // A Host that is no host[:port] is the client's mistake: 400, not the 500 of a crash.
    for (const path of ["/__dev/info", "/api/health", "/index.html"]) {
      const unreadable = await send("GET", path, { host: "x:99999" });
      expect(unreadable.status, `${path}: ${unreadable.text}`).toBe(400);
      expect(unreadable.json.error?.code).toBe("invalid_host");
    }
  });

  test("a dev route asked with the wrong method is 405 with Allow, as the app's routes answer", async () => {
    const get = await send("GET", "/__dev/sign-in");
    expect(get.status).toBe(405);
    expect(get.headers.allow).toBe("POST");
    expect(get.json.error?.code).toBe("method_not_allowed");
    const post = await send("POST", "/__dev/info", { "content-type": "application/json" }, "{}");
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe("GET, HEAD");
  });
});

describe("methods no deployment serves", () => {
  test("TRACE and other unknown methods are 405 INVALID_REQUEST_METHOD on every kind of path, as Vercel answers, never 500", async () => {
    for (const method of ["TRACE", "PROPFIND", "MKCOL", "LOCK"]) {
      for (const path of [
        "/api/health",
        "/api/jobs",
        "/",
        "/index.html",
        "/nowhere",
        "/__dev/info",
      ]) {
        const res = await send(method, path);
        expect(res.status, `${method} ${path}: ${res.text}`).toBe(405);
        expect(res.text).toBe("Method not allowed\n\nINVALID_REQUEST_METHOD\n");
        expect(res.headers["content-type"]).toBe("text/plain; charset=utf-8");
      }
    }
    expect(logs.filter((l) => l.includes("function_invocation_failed"))).toEqual([]);
  });

  test("a method Vercel routes still reaches the function or file, which answers its own 405", async () => {
    const put = await send("PUT", "/api/health");
    expect(put.status).toBe(405);
    expect(put.headers.allow).toBe("GET");
    expect(put.json.error?.code).toBe("method_not_allowed");
    const post = await send("POST", "/index.html");
    expect(post.status).toBe(405);
    expect(post.headers.allow).toBe("GET, HEAD");
  });
});

describe("the refusals", () => {
  test("no refusal carries a secret of the app's environment or the database's URL", async () => {
    const json = { "content-type": "application/json" };
    const refusals = await Promise.all([
      send("POST", "/__dev/sign-in", { host: `evil.example:${port}`, ...json }, "{}"),
      send("POST", "/__dev/sign-in", { origin: "http://evil.example", ...json }, "{}"),
      send("POST", "/__dev/sign-in", { "content-type": "text/plain" }, "{}"),
      send("POST", "/__dev/sign-in", json, "{not json"),
      send("POST", "/__dev/sign-in", json, '{"plan":"enterprise"}'),
      send("GET", "/__dev/sign-in"),
      send("GET", "/__dev/nothing"),
      send("TRACE", "/api/health"),
    ]);
    expect(refusals.map((r) => r.status)).toEqual([403, 403, 415, 400, 400, 405, 404, 405]);
    for (const { text, headers } of refusals) {
      const all = text + JSON.stringify(headers);
      for (const secret of [JWT_SECRET, OPENAI_KEY, databaseUrl()])
        expect(all).not.toContain(secret);
    }
  });
});
