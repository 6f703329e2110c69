/**
 * The app as Vercel serves it, on one local port: every file under `api/` on the route Vercel
 * gives it (`api/jobs/index.ts` → `/api/jobs`, `api/jobs/[id].ts` → `/api/jobs/:id` with the
 * segment also as `?id=`), each built with `createHandler(() => deps)` from the environment it
 * is handed (never this process's own), `public/` as static files, and vercel.json's headers.
 *
 * Two DEV-ONLY routes that no deployment has (they live here, not in `api/`):
 *   GET  /__dev/info     → {"mode":"dev"}  (the page shows its dev sign-in when it sees this)
 *   POST /__dev/sign-in  {"plan"?: "free"|"pro", "userId"?: uuid}
 *                        → {"userId","accessToken","plan","expiresAt"}
 *
 * Run alone (the stack does this for `appInChildProcess`): `tsx dev/app-server.ts` serves on
 * $PORT with this process's environment as the app's, DEV_DATABASE_URL for sign-in.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { extname, join, relative, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";
import pg from "pg";
import { loadConfig } from "../lib/config.ts";
import { createDeps } from "../lib/deps.ts";
import { setLogSink } from "../lib/log.ts";
import { createWorkerDeps } from "../lib/worker-deps.ts";
import { parseSignIn, signInDevUser } from "./dev-users.ts";
import { root } from "./migrate.ts";

export interface AppServerOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  /** The app's whole environment (what Vercel would set). */
  env: Record<string, string | undefined>;
  /** Admin connection for POST /__dev/sign-in; without it that route answers 501. */
  databaseUrl?: string;
  /** @default <repo>/api */
  apiDir?: string;
  /** @default <repo>/public */
  publicDir?: string;
  /** Where the app's log lines and the server's own go. @default console */
  log?: (line: string) => void;
}

export interface RunningAppServer {
  url: string;
  routes: string[];
  close(): Promise<void>;
}

type WebHandler = (req: Request) => Promise<Response>;
interface Route {
  pattern: string;
  regex: RegExp;
  params: string[];
  file: string;
  handler: WebHandler;
}

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".txt": "text/plain; charset=utf-8",
  ".webmanifest": "application/manifest+json",
};
/** Vercel refuses larger request bodies before the function runs. */
const MAX_REQUEST_BYTES = 4.5 * 1024 * 1024;

async function listFunctions(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    // Vercel skips names starting with "_" or "." (shared helpers, not functions).
    if (entry.name.startsWith("_") || entry.name.startsWith(".")) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...(await listFunctions(path)));
    else if (/\.(ts|mts|js|mjs)$/.test(entry.name) && !entry.name.endsWith(".d.ts")) out.push(path);
  }
  return out;
}

/** `api/jobs/[id].ts` → `/api/jobs/:id`; static segments sort before dynamic ones. */
export function routeFor(apiDir: string, file: string): Omit<Route, "handler" | "file"> {
  const rel = relative(apiDir, file).split(sep).join("/");
  const segments = rel.replace(/\.(ts|mts|js|mjs)$/, "").split("/");
  if (segments.at(-1) === "index") segments.pop();
  const params: string[] = [];
  const parts = segments.map((s) => {
    const dynamic = /^\[([^\]./]+)\]$/.exec(s);
    if (!dynamic?.[1]) return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    params.push(dynamic[1]);
    return "([^/]+)";
  });
  const pattern = `/api${segments.length ? "/" : ""}${segments.map((s) => s.replace(/^\[(.+)\]$/, ":$1")).join("/")}`;
  return {
    pattern,
    params,
    regex: new RegExp(`^/api${parts.length ? "/" : ""}${parts.join("/")}/?$`),
  };
}

async function vercelHeaders(): Promise<{ regex: RegExp; headers: [string, string][] }[]> {
  try {
    const config = JSON.parse(await readFile(join(root, "vercel.json"), "utf8")) as {
      headers?: { source: string; headers: { key: string; value: string }[] }[];
    };
    return (config.headers ?? []).map((h) => ({
      // Only the `(.*)` wildcard form is used in this project's vercel.json.
      regex: new RegExp(
        `^${h.source
          .split("(.*)")
          .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
          .join("(.*)")}$`,
      ),
      headers: h.headers.map((x) => [x.key, x.value] as [string, string]),
    }));
  } catch {
    return [];
  }
}

export async function startAppServer(options: AppServerOptions): Promise<RunningAppServer> {
  const host = options.host ?? "127.0.0.1";
  const apiDir = options.apiDir ?? join(root, "api");
  const publicDir = resolve(options.publicDir ?? join(root, "public"));
  const print = options.log ?? ((line: string) => console.log(line));

  // The app's own log lines (lib/log.ts) go where the stack says.
  setLogSink((line) => print(line));
  const config = loadConfig(options.env); // throws ConfigError naming every bad variable
  const base = createDeps(config);
  // Worker deps are a superset of Deps; every handler gets the same object, as one Fluid
  // instance would share module state.
  const deps = { ...base, ...createWorkerDeps(base) };

  const routes: Route[] = [];
  for (const file of await listFunctions(apiDir)) {
    const mod = (await import(pathToFileURL(file).href)) as {
      createHandler?: (deps: () => unknown) => WebHandler;
    };
    if (typeof mod.createHandler !== "function") {
      throw new Error(
        `${relative(root, file)} exports no createHandler(deps): the dev server cannot hand it the stack's environment`,
      );
    }
    routes.push({ ...routeFor(apiDir, file), file, handler: mod.createHandler(() => deps) });
  }
  routes.sort((a, b) => a.params.length - b.params.length || b.pattern.length - a.pattern.length);
  const extraHeaders = await vercelHeaders();

  const pool = options.databaseUrl
    ? new pg.Pool({ connectionString: options.databaseUrl, max: 2 })
    : undefined;
  pool?.on("error", () => {});

  const origin = `http://${host}:${options.port}`;

  async function serveApi(req: IncomingMessage, res: ServerResponse, url: URL, body: Buffer) {
    const route = routes.find((r) => r.regex.test(url.pathname));
    if (!route) return sendJson(res, 404, { error: { code: "not_found", message: "No route." } });
    const match = route.regex.exec(url.pathname);
    route.params.forEach((name, i) => {
      url.searchParams.set(name, decodeURIComponent(match?.[i + 1] ?? ""));
    });
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (Array.isArray(value)) for (const v of value) headers.append(name, v);
      else if (value !== undefined) headers.set(name, value);
    }
    headers.set("x-forwarded-for", req.socket.remoteAddress ?? "127.0.0.1");
    headers.set("x-forwarded-proto", "http");
    const method = req.method ?? "GET";
    const request = new Request(url, {
      method,
      headers,
      body: method === "GET" || method === "HEAD" ? null : new Uint8Array(body),
    });
    const response = await route.handler(request);
    for (const h of extraHeaders) {
      if (!h.regex.test(url.pathname)) continue;
      for (const [k, v] of h.headers) if (!response.headers.has(k)) response.headers.set(k, v);
    }
    res.statusCode = response.status;
    for (const [name, value] of response.headers) res.setHeader(name, value);
    res.end(Buffer.from(await response.arrayBuffer()));
  }

  async function serveDev(res: ServerResponse, method: string, path: string, body: Buffer) {
    if (path === "/__dev/info" && method === "GET") return sendJson(res, 200, { mode: "dev" });
    if (path === "/__dev/sign-in" && method === "POST") {
      const secret = options.env.SUPABASE_JWT_SECRET;
      if (!pool || !secret) {
        return sendJson(res, 501, {
          error: {
            code: "not_available",
            message: "Dev sign-in needs the local database and SUPABASE_JWT_SECRET.",
          },
        });
      }
      let parsed: unknown = {};
      try {
        parsed = body.length ? JSON.parse(body.toString("utf8")) : {};
      } catch {
        return sendJson(res, 400, { error: { code: "invalid_json", message: "Not JSON." } });
      }
      const input = parseSignIn(parsed);
      if (typeof input === "string")
        return sendJson(res, 400, { error: { code: "invalid_request", message: input } });
      return sendJson(res, 200, await signInDevUser(pool, { ...input, jwtSecret: secret }));
    }
    return sendJson(res, 404, { error: { code: "not_found", message: "No dev route." } });
  }

  async function serveStatic(req: IncomingMessage, res: ServerResponse, path: string) {
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD" }).end();
      return;
    }
    let file = resolve(publicDir, `.${decodeURIComponent(path)}`);
    if (file !== publicDir && !file.startsWith(publicDir + sep)) {
      res.writeHead(404).end("not found");
      return;
    }
    const info = await stat(file).catch(() => undefined);
    if (info?.isDirectory()) file = join(file, "index.html");
    const content = await readFile(file).catch(() => undefined);
    if (!content) {
      res.writeHead(404, { "content-type": "text/plain; charset=utf-8" }).end("not found");
      return;
    }
    res.writeHead(200, {
      "content-type": CONTENT_TYPES[extname(file)] ?? "application/octet-stream",
      "cache-control": "no-cache",
    });
    res.end(req.method === "HEAD" ? undefined : content);
  }

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size <= MAX_REQUEST_BYTES) chunks.push(c);
    });
    req.on("end", () => {
      const url = new URL(req.url ?? "/", origin);
      const body = Buffer.concat(chunks);
      const work = async () => {
        if (size > MAX_REQUEST_BYTES) {
          return sendJson(res, 413, {
            error: { code: "FUNCTION_PAYLOAD_TOO_LARGE", message: "Request body over 4.5 MB." },
          });
        }
        if (url.pathname === "/api" || url.pathname.startsWith("/api/"))
          return serveApi(req, res, url, body);
        if (url.pathname.startsWith("/__dev/"))
          return serveDev(res, req.method ?? "GET", url.pathname, body);
        return serveStatic(req, res, url.pathname);
      };
      work().catch((error: unknown) => {
        print(
          JSON.stringify({
            level: "error",
            event: "dev_server_error",
            path: url.pathname,
            error: error instanceof Error ? error.message : String(error),
          }),
        );
        if (!res.headersSent)
          sendJson(res, 500, { error: { code: "internal", message: "dev server error" } });
        else res.end();
      });
    });
  });

  await new Promise<void>((resolvePromise, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        error.code === "EADDRINUSE"
          ? new Error(`the app could not listen on ${host}:${options.port}: the port is in use`)
          : error,
      ),
    );
    server.listen(options.port, host, () => resolvePromise());
  });

  return {
    url: origin,
    routes: routes.map((r) => r.pattern),
    close: async () => {
      await new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      });
      await pool?.end();
    },
  };
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "cache-control": "no-store",
  });
  res.end(JSON.stringify(body));
}

// `tsx dev/app-server.ts`: the app in a process of its own (the stack kills it in tests).
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const port = Number(process.env.PORT ?? 3000);
  try {
    const app = await startAppServer({
      port,
      env: { ...process.env },
      ...(process.env.DEV_DATABASE_URL ? { databaseUrl: process.env.DEV_DATABASE_URL } : {}),
      log: (line) => process.stdout.write(`${line}\n`),
    });
    process.stdout.write(`app-server ready ${app.url}\n`);
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
