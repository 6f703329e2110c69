/**
 * The app as Vercel deploys it, on one local port: the output of `npm run build`
 * (`.vercel/output`) served by `dev/vercel-output.ts`: the functions Vercel's builder made,
 * its static files, and the routes and headers `vercel.json` became. This process's
 * environment is the app's (as Vercel sets a deployment's), so the stack runs it as a child.
 *
 * Two DEV-ONLY routes that no deployment has (they live here, not in `api/`):
 *   GET  /__dev/info     → {"mode":"dev", "plans"?: [{id, name, period, units, meter}]}  (the
 *                        page shows its dev sign-in, a choice per plan, when it sees this)
 *   POST /__dev/sign-in  application/json {"plan"?: a plan's id (free), "userId"?: uuid}
 *                        → {"userId","accessToken","plan","expiresAt"}
 * They answer only at this server's own loopback host:port and, when the request has an Origin,
 * only this server's own page (dev/http/own-origin.ts): another site's page must not mint a
 * token that spends the developer's OpenAI key. Otherwise 403 host_not_allowed or
 * origin_not_allowed; a sign-in body that is not JSON is 415 unsupported_media_type.
 *
 * Run by plain Node 24 (no tsx: nothing may resolve an import the deployment could not):
 * `node dev/app-server.ts` serves on $PORT, DEV_DATABASE_URL for sign-in (DEV_SESSION_SECONDS
 * for sessions shorter than the default 8 hours).
 */
import type { IncomingMessage } from "node:http";
import { connect } from "node:net";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { fileURLToPath, pathToFileURL } from "node:url";
import pg from "pg";
import { json } from "../lib/json.ts";
import { readProject } from "./auth/index.ts";
import { devPlans, parseSignIn, signInDevUser, UnknownPlan } from "./dev-users.ts";
import { foreignCaller } from "./http/own-origin.ts";
import { serve } from "./http/serve.ts";
import { loadVercelOutput, refuseMethod } from "./vercel-output.ts";

/** Vercel refuses larger request bodies before the function runs. */
const MAX_REQUEST_BYTES = 4.5 * 1024 * 1024;
export const OUTPUT_DIR = join(fileURLToPath(new URL("..", import.meta.url)), ".vercel", "output");

/** Each dev route and the methods it answers. */
const DEV_ROUTES: Record<string, string[]> = {
  "/__dev/info": ["GET", "HEAD"],
  "/__dev/sign-in": ["POST"],
};

/** The whole body, read to its end (as Vercel does) even when it is over the cap. */
async function readBody(request: Request): Promise<Uint8Array | "too_large"> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = request.body?.getReader();
  for (let read = await reader?.read(); read && !read.done; read = await reader?.read()) {
    size += read.value.length;
    if (size <= MAX_REQUEST_BYTES) chunks.push(read.value);
  }
  return size > MAX_REQUEST_BYTES ? "too_large" : Buffer.concat(chunks);
}

/**
 * DEV ONLY: the page's Supabase Auth calls, passed to the local Auth stand-in (DEV_AUTH_URL).
 * The page's CSP lets it reach its own origin and `https://*.supabase.co`, not a loopback
 * http port, so under `npm run dev` it talks to Auth here; a redirect (an emailed link's 303)
 * goes back to the browser as it is.
 */
async function passToAuth(authUrl: string, incoming: Request, url: URL, body: Uint8Array) {
  const headers = new Headers(incoming.headers);
  headers.delete("host");
  const response = await fetch(new URL(url.pathname + url.search, authUrl), {
    method: incoming.method,
    headers,
    body: incoming.method === "GET" || incoming.method === "HEAD" ? null : new Uint8Array(body),
    redirect: "manual",
  });
  return new Response(response.body, { status: response.status, headers: response.headers });
}

export async function startAppServer(options: {
  port: number;
  host?: string;
  outputDir?: string;
  databaseUrl?: string;
}) {
  const host = options.host ?? "127.0.0.1";
  const output = await loadVercelOutput(options.outputDir ?? OUTPUT_DIR);
  const pool = options.databaseUrl
    ? new pg.Pool({ connectionString: options.databaseUrl, max: 2 })
    : undefined;
  pool?.on("error", () => {});
  /** The dev routes: only for this server's own page (or curl) at its own loopback address. */
  async function serveDev(request: Request, path: string, body: Uint8Array): Promise<Response> {
    const foreign = foreignCaller(request, port);
    if (foreign)
      return json(foreign.status, { error: { code: foreign.code, message: foreign.message } });
    const route = DEV_ROUTES[path];
    if (!route) return json(404, { error: { code: "not_found", message: "No dev route." } });
    if (!route.includes(request.method)) {
      const allow = route.join(", ");
      return json(
        405,
        { error: { code: "method_not_allowed", message: `Use ${allow}.` } },
        { allow },
      );
    }
    if (path === "/__dev/info")
      return json(200, {
        mode: "dev",
        ...(process.env.DEV_AUTH_URL ? { auth: "same-origin" } : {}),
        // the database's plans (dev/dev-users.ts): the page lists no plan of its own
        ...(pool ? { plans: await devPlans(pool).catch(() => []) } : {}),
      });
    // The local Auth stand-in's project (dev/auth/): its key signs the token.
    const projectFile = process.env.DEV_AUTH_PROJECT_FILE;
    const project = projectFile ? await readProject(projectFile).catch(() => undefined) : undefined;
    if (!pool || !project) {
      return json(501, {
        error: {
          code: "not_available",
          message: "Dev sign-in needs the local database and the local Auth stand-in.",
        },
      });
    }
    // Only JSON: a form or a text/plain body is what another site's page can send without
    // asking (no CORS preflight); the page's own sign-in sends application/json.
    const mediaType = request.headers.get("content-type")?.split(";")[0]?.trim().toLowerCase();
    if (mediaType !== "application/json") {
      return json(415, {
        error: {
          code: "unsupported_media_type",
          message: "Content-Type must be application/json.",
        },
      });
    }
    let parsed: unknown = {};
    try {
      parsed = body.length ? JSON.parse(new TextDecoder().decode(body)) : {};
    } catch {
      return json(400, { error: { code: "invalid_json", message: "Not JSON." } });
    }
    const input = parseSignIn(parsed);
    if (typeof input === "string")
      return json(400, { error: { code: "invalid_request", message: input } });
    try {
      // DEV_SESSION_SECONDS: a short-lived local session, for tests of what expiry does
      const seconds = Number(process.env.DEV_SESSION_SECONDS);
      const expires = Number.isInteger(seconds) && seconds > 0 ? { expiresInSeconds: seconds } : {};
      return json(200, await signInDevUser(pool, { ...input, project, ...expires }));
    } catch (error) {
      if (error instanceof UnknownPlan)
        return json(400, { error: { code: "invalid_request", message: error.message } });
      throw error;
    }
  }

  let origin = "";
  let port = 0;

  async function invoke(incoming: Request, ip: string): Promise<Response> {
    // The deployment's own origin, whatever Host the client sent; srvx makes the request's URL
    // from that Host, so one that is no host[:port] (`x:99999`) cannot be read at all.
    let asked: URL;
    try {
      asked = new URL(incoming.url);
    } catch {
      return json(400, {
        error: { code: "invalid_host", message: "The Host header is not a host[:port]." },
      });
    }
    const url = new URL(asked.pathname + asked.search, origin);
    const method = incoming.method;
    // Vercel refuses a method no deployment serves before anything runs (TRACE cannot even
    // become a `Request` for a function).
    const refused = refuseMethod(method);
    if (refused) return refused;
    const body = await readBody(incoming);
    if (body === "too_large") {
      return json(413, {
        error: { code: "FUNCTION_PAYLOAD_TOO_LARGE", message: "Request body over 4.5 MB." },
      });
    }
    if (url.pathname.startsWith("/__dev/")) return serveDev(incoming, url.pathname, body);
    const authUrl = process.env.DEV_AUTH_URL;
    if (authUrl && url.pathname.startsWith("/auth/v1/"))
      return passToAuth(authUrl, incoming, url, body);
    const headers = new Headers(incoming.headers);
    headers.set("x-forwarded-for", ip || "127.0.0.1");
    headers.set("x-forwarded-proto", "http");
    const request = new Request(url, {
      method,
      headers,
      body: method === "GET" || method === "HEAD" ? null : new Uint8Array(body),
    });
    // Streamed as it comes, as Vercel streams a function's response.
    return output.serve(request);
  }

  const server = await serve(
    async (request, { ip }) => {
      try {
        return await invoke(request, ip);
      } catch (error) {
        process.stdout.write(
          `${JSON.stringify({
            level: "error",
            event: "function_invocation_failed",
            path: request.url.slice(request.url.indexOf("/", "http://".length)),
            error: error instanceof Error ? error.message : String(error),
          })}\n`,
        );
        // What Vercel answers when a function throws instead of returning a response.
        return json(500, {
          error: { code: "FUNCTION_INVOCATION_FAILED", message: "A server error has occurred." },
        });
      }
    },
    {
      port: options.port,
      host,
      name: "the app",
      ...(process.env.DEV_AUTH_URL ? { onUpgrade: passRealtime(process.env.DEV_AUTH_URL) } : {}),
    },
  );
  origin = server.url;
  port = server.port;
  return {
    url: origin,
    functions: output.functions.map((f) => f.path),
    close: async () => {
      await server.close();
      await pool?.end();
    },
  };
}

/**
 * Dev only, as `/auth/v1` is passed: the page's Realtime socket (`/realtime/v1/websocket` on
 * this origin, which the page's CSP allows) carried byte for byte to the project's stand-in. A
 * deployment's page opens it to the Supabase project itself; Vercel serves no WebSocket.
 */
function passRealtime(projectUrl: string) {
  const target = new URL(projectUrl);
  return (request: IncomingMessage, socket: Duplex, head: Buffer): void => {
    if (!request.url?.startsWith("/realtime/v1/")) {
      socket.end("HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const upstream = connect(Number(target.port), target.hostname, () => {
      const lines = [`${request.method} ${request.url} HTTP/1.1`];
      for (let i = 0; i < request.rawHeaders.length; i += 2) {
        const name = request.rawHeaders[i] ?? "";
        lines.push(
          name.toLowerCase() === "host"
            ? `Host: ${target.host}`
            : `${name}: ${request.rawHeaders[i + 1]}`,
        );
      }
      upstream.write(`${lines.join("\r\n")}\r\n\r\n`);
      if (head.length > 0) upstream.write(head);
      socket.pipe(upstream).pipe(socket);
    });
    upstream.on("error", () => socket.destroy());
    socket.on("error", () => upstream.destroy());
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  try {
    const app = await startAppServer({
      port: Number(process.env.PORT ?? 3000),
      ...(process.env.DEV_DATABASE_URL ? { databaseUrl: process.env.DEV_DATABASE_URL } : {}),
    });
    process.stdout.write(`app-server ready ${app.url} ${app.functions.join(" ")}\n`);
    const stop = () => {
      void app.close().finally(() => process.exit(0));
    };
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
  } catch (error) {
    process.stderr.write(`app-server failed: ${(error as Error).message}\n`);
    process.exit(1);
  }
}
