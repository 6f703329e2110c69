/**
 * Reads what `vercel build` wrote (`.vercel/output`, the Build Output API v3) and answers
 * requests with it the way Vercel's edge network and Node launcher do: the routes of
 * `config.json` in their phases (the headers and rewrites `vercel.json` became), the files of
 * `static/`, and each function loaded from its `.vc-config.json` handler and called through
 * its default export's `fetch(request)`.
 *
 * Only what this project's output uses is implemented; anything else in `config.json` or a
 * `.vc-config.json` is refused at load time with a message naming it, so a new Vercel feature
 * cannot be silently misserved here.
 *
 * Plain Node runs this file (type stripping, no loader hooks), so the built functions resolve
 * their imports exactly as they would on Vercel: nothing here can mend a broken import.
 */
import { readdir, readFile, stat } from "node:fs/promises";
import { extname, join, relative, resolve, sep } from "node:path";
import { pathToFileURL } from "node:url";

export type WebHandler = (request: Request) => Promise<Response>;

interface VercelRoute {
  src?: string;
  dest?: string;
  headers?: Record<string, string>;
  status?: number;
  continue?: boolean;
  check?: boolean;
  methods?: string[];
  handle?: string;
}

export interface LoadedFunction {
  /** `/api/jobs/[id]`: the function's path in the output. */
  path: string;
  runtime: string;
  handler: WebHandler;
}

export interface VercelOutput {
  functions: LoadedFunction[];
  crons: { path: string; schedule: string }[];
  /** Answers one request as the deployment would. */
  serve(request: Request): Promise<Response>;
}

/** The phases this server implements, in the order Vercel runs them. */
const PHASES = ["filesystem", "miss", "error"] as const;
const ROUTE_KEYS = new Set(["src", "dest", "headers", "status", "continue", "check", "methods"]);
const LAUNCHER_KEYS = new Set([
  "handler",
  "runtime",
  "architecture",
  "environment",
  "shouldDisableAutomaticFetchInstrumentation",
  "launcherType",
  "shouldAddHelpers",
  "shouldAddSourcemapSupport",
  "awsLambdaHandler",
  "maxDuration",
  "memory",
  "supportsResponseStreaming",
]);
/** Vercel's Node launcher unwraps `default` this many times before looking for handlers. */
const DEFAULT_UNWRAPS = 5;
/** The methods Vercel's Node launcher routes to a handler (its `HTTP_METHODS`). */
const HTTP_METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH"];

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".txt": "text/plain; charset=utf-8",
};

/** The Node major a `.vc-config.json` runtime names (`nodejs24.x` → 24). */
export function runtimeMajor(runtime: string): number | undefined {
  const match = /^nodejs(\d+)\.x$/.exec(runtime);
  return match?.[1] ? Number(match[1]) : undefined;
}

/**
 * A method no part of a deployment serves (TRACE, PROPFIND, ...: anything but the launcher's
 * seven) is refused by Vercel itself before any route, file or function: 405 with its platform
 * error `INVALID_REQUEST_METHOD`, in the plain-text form its errors take (`vercel dev` writes
 * `<title>\n\n<CODE>\n`, as for `NOT_FOUND` below). No function ever sees such a request, and
 * undici cannot even build one for TRACE (`new Request` throws), so the caller asks before it
 * makes the function's `Request`.
 */
export function refuseMethod(method: string): Response | undefined {
  if (HTTP_METHODS.includes(method)) return undefined;
  return new Response("Method not allowed\n\nINVALID_REQUEST_METHOD\n", {
    status: 405,
    headers: { "content-type": "text/plain; charset=utf-8" },
  });
}

async function findFunctions(dir: string, base = dir): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (!entry.isDirectory()) continue;
    if (entry.name.endsWith(".func")) out.push(relative(base, path));
    else out.push(...(await findFunctions(path, base)));
  }
  return out.sort();
}

/** What the Node launcher finds in a module: one handler per method, or none. */
function webHandlers(mod: unknown): Partial<Record<string, WebHandler>> | undefined {
  let listener = mod as Record<string, unknown>;
  for (let i = 0; i < DEFAULT_UNWRAPS && listener.default; i++) {
    listener = listener.default as Record<string, unknown>;
  }
  if (typeof listener.fetch === "function") {
    const fetch = listener.fetch as WebHandler;
    return Object.fromEntries(HTTP_METHODS.map((m) => [m, (r: Request) => fetch(r)]));
  }
  const named = HTTP_METHODS.filter((m) => typeof listener[m] === "function");
  if (named.length === 0) return undefined;
  return Object.fromEntries(named.map((m) => [m, listener[m] as WebHandler]));
}

/**
 * Loads one function directory as the launcher would: its handler file imported in this
 * process, which must run the Node major the function was built for.
 */
export async function loadFunction(outputDir: string, funcDir: string): Promise<LoadedFunction> {
  const dir = join(outputDir, "functions", funcDir);
  const config = JSON.parse(await readFile(join(dir, ".vc-config.json"), "utf8")) as Record<
    string,
    unknown
  >;
  const unknownKeys = Object.keys(config).filter((k) => !LAUNCHER_KEYS.has(k));
  if (unknownKeys.length)
    throw new Error(
      `${funcDir}: .vc-config.json has keys this server does not implement: ${unknownKeys.join(", ")}`,
    );
  if (config.launcherType !== "Nodejs")
    throw new Error(
      `${funcDir}: launcherType ${String(config.launcherType)} is not the Node launcher`,
    );
  const runtime = String(config.runtime);
  const major = runtimeMajor(runtime);
  const running = Number(process.versions.node.split(".")[0]);
  if (major !== running) {
    throw new Error(
      `${funcDir} is built for ${runtime} but this is Node ${process.versions.node}: run it on the runtime Vercel will use`,
    );
  }
  const path = `/${funcDir.slice(0, -".func".length).split(sep).join("/")}`;
  let mod: unknown;
  try {
    mod = await import(pathToFileURL(join(dir, String(config.handler))).href);
  } catch (error) {
    throw new Error(`${funcDir} does not load: ${(error as Error).message}`);
  }
  const handlers = webHandlers(mod);
  if (!handlers)
    throw new Error(
      `${funcDir}: ${String(config.handler)} exports neither fetch() nor a method handler`,
    );
  const handler: WebHandler = async (request) => {
    const byMethod = handlers[request.method];
    return byMethod ? byMethod(request) : new Response(null, { status: 405 });
  };
  return { path, runtime, handler };
}

function splitPhases(
  routes: VercelRoute[],
): Record<"main" | (typeof PHASES)[number], VercelRoute[]> {
  const phases: Record<string, VercelRoute[]> = { main: [] };
  let current = "main";
  for (const route of routes) {
    if (route.handle !== undefined) {
      if (!(PHASES as readonly string[]).includes(route.handle))
        throw new Error(
          `config.json: route phase "handle: ${route.handle}" is refused: this server applies only ${PHASES.join(", ")} (and the routes before them), and will not guess another phase's meaning`,
        );
      current = route.handle;
      phases[current] = [];
      continue;
    }
    const unknownKeys = Object.keys(route).filter((k) => !ROUTE_KEYS.has(k));
    if (unknownKeys.length)
      throw new Error(
        `config.json: a route has keys this server does not implement: ${unknownKeys.join(", ")}`,
      );
    phases[current]?.push(route);
  }
  return {
    main: phases.main ?? [],
    filesystem: phases.filesystem ?? [],
    miss: phases.miss ?? [],
    error: phases.error ?? [],
  };
}

/** `$1`… in a route's dest, from its src match. */
function substitute(template: string, match: RegExpExecArray): string {
  return template.replace(/\$(\d+)/g, (_, n: string) => match[Number(n)] ?? "");
}

/** Loads `.vercel/output` (every function imported now, so one that cannot load fails here). */
export async function loadVercelOutput(outputDir: string): Promise<VercelOutput> {
  const config = JSON.parse(await readFile(join(outputDir, "config.json"), "utf8")) as {
    version: number;
    routes?: VercelRoute[];
    crons?: { path: string; schedule: string }[];
  };
  if (config.version !== 3) throw new Error(`config.json: version ${config.version}, expected 3`);
  const phases = splitPhases(config.routes ?? []);
  const functions = await Promise.all(
    (await findFunctions(join(outputDir, "functions"))).map((dir) => loadFunction(outputDir, dir)),
  );
  const byPath = new Map(functions.map((f) => [f.path, f]));
  const staticDir = resolve(outputDir, "static");

  async function staticFile(path: string): Promise<string | undefined> {
    let file = resolve(staticDir, `.${path}`);
    if (file !== staticDir && !file.startsWith(staticDir + sep)) return undefined;
    if ((await stat(file).catch(() => undefined))?.isDirectory()) file = join(file, "index.html");
    return (await stat(file).catch(() => undefined))?.isFile() ? file : undefined;
  }

  /** The filesystem check: a function (or a folder's index function), then a static file. */
  async function lookup(path: string): Promise<LoadedFunction | string | undefined> {
    return byPath.get(path) ?? byPath.get(`${path.replace(/\/$/, "")}/index`) ?? staticFile(path);
  }

  async function invoke(
    target: LoadedFunction | string,
    request: Request,
    url: URL,
    status?: number,
  ): Promise<Response> {
    if (typeof target !== "string") {
      return target.handler(new Request(url, request));
    }
    if (request.method !== "GET" && request.method !== "HEAD")
      return new Response(null, { status: 405, headers: { allow: "GET, HEAD" } });
    const body = request.method === "HEAD" ? null : await readFile(target);
    return new Response(body, {
      status: status ?? 200,
      headers: {
        "content-type": CONTENT_TYPES[extname(target)] ?? "application/octet-stream",
        "cache-control": "public, max-age=0, must-revalidate",
      },
    });
  }

  function matches(route: VercelRoute, path: string, method: string): RegExpExecArray | null {
    if (route.methods && !route.methods.includes(method)) return null;
    return new RegExp(route.src ?? "^.*$").exec(path);
  }

  async function serve(request: Request): Promise<Response> {
    const refused = refuseMethod(request.method);
    if (refused) return refused;
    const url = new URL(request.url);
    const headers = new Headers();
    const method = request.method;
    let path = decodeURIComponent(url.pathname);

    const respond = async (response: Response) => {
      const out = new Response(response.body, response);
      for (const [k, v] of headers) if (!out.headers.has(k)) out.headers.set(k, v);
      return out;
    };
    const rewrite = (dest: string) => {
      const next = new URL(dest, url);
      path = decodeURIComponent(next.pathname);
      // The function still sees the path that was asked for; a rewrite only adds its query.
      for (const [k, v] of next.searchParams) url.searchParams.set(k, v);
    };
    const errorPage = async (status: number) => {
      for (const route of phases.error) {
        const match = matches(route, path, method);
        if (!match) continue;
        const page = route.dest ? await staticFile(substitute(route.dest, match)) : undefined;
        if (page) return respond(await invoke(page, request, url, route.status ?? status));
      }
      return respond(
        new Response(status === 404 ? "The page could not be found.\n\nNOT_FOUND\n" : "", {
          status,
          headers: { "content-type": "text/plain; charset=utf-8" },
        }),
      );
    };

    for (const route of phases.main) {
      const match = matches(route, path, method);
      if (!match) continue;
      for (const [k, v] of Object.entries(route.headers ?? {}))
        headers.set(k, substitute(v, match));
      if (route.status && !route.dest) return errorPage(route.status);
      if (route.dest) rewrite(substitute(route.dest, match));
      if (!route.continue) break;
    }

    const found = await lookup(path);
    if (found) return respond(await invoke(found, request, url));

    for (const route of phases.filesystem) {
      const match = matches(route, path, method);
      if (!match) continue;
      for (const [k, v] of Object.entries(route.headers ?? {}))
        headers.set(k, substitute(v, match));
      if (route.dest) {
        rewrite(substitute(route.dest, match));
        const target = await lookup(path);
        if (target) return respond(await invoke(target, request, url, route.status));
        if (route.check) {
          for (const miss of phases.miss) {
            const m = matches(miss, path, method);
            if (!m || !miss.dest) continue;
            rewrite(substitute(miss.dest, m));
            const retried = await lookup(path);
            if (retried) return respond(await invoke(retried, request, url));
          }
        }
        continue;
      }
      if (route.status) return errorPage(route.status);
      if (!route.continue) break;
    }
    return errorPage(404);
  }

  return { functions, crons: config.crons ?? [], serve };
}
