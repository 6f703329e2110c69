/**
 * The app as Vercel deploys it, on one local port: the output of `npm run build`
 * (`.vercel/output`) served by `dev/vercel-output.ts`: the functions Vercel's builder made,
 * its static files, and the routes and headers `vercel.json` became. This process's
 * environment is the app's (as Vercel sets a deployment's), so the stack runs it as a child.
 *
 * Two DEV-ONLY routes that no deployment has (they live here, not in `api/`):
 *   GET  /__dev/info     → {"mode":"dev"}  (the page shows its dev sign-in when it sees this)
 *   POST /__dev/sign-in  {"plan"?: "free"|"pro", "userId"?: uuid}
 *                        → {"userId","accessToken","plan","expiresAt"}
 *
 * Run by plain Node 22 (no tsx: nothing may resolve an import the deployment could not):
 * `node dev/app-server.ts` serves on $PORT, DEV_DATABASE_URL for sign-in.
 */
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { join } from "node:path";
import { Readable } from "node:stream";
import { fileURLToPath, pathToFileURL } from "node:url";
import pg from "pg";
import { parseSignIn, signInDevUser } from "./dev-users.ts";
import { loadVercelOutput } from "./vercel-output.ts";

/** Vercel refuses larger request bodies before the function runs. */
const MAX_REQUEST_BYTES = 4.5 * 1024 * 1024;
export const OUTPUT_DIR = join(fileURLToPath(new URL("..", import.meta.url)), ".vercel", "output");

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, {
    "content-type": "application/json; charset=utf-8",
    "cache-control": "no-store",
  });
  res.end(JSON.stringify(body));
}

async function readBody(req: IncomingMessage): Promise<Buffer | "too_large"> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size <= MAX_REQUEST_BYTES) chunks.push(chunk);
  }
  return size > MAX_REQUEST_BYTES ? "too_large" : Buffer.concat(chunks);
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
  const origin = `http://${host}:${options.port}`;

  async function serveDev(res: ServerResponse, method: string, path: string, body: Buffer) {
    if (path === "/__dev/info" && method === "GET") return sendJson(res, 200, { mode: "dev" });
    if (path === "/__dev/sign-in" && method === "POST") {
      const secret = process.env.SUPABASE_JWT_SECRET;
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

  async function serve(req: IncomingMessage, res: ServerResponse) {
    const url = new URL(req.url ?? "/", origin);
    const method = req.method ?? "GET";
    const body = await readBody(req);
    if (body === "too_large") {
      return sendJson(res, 413, {
        error: { code: "FUNCTION_PAYLOAD_TOO_LARGE", message: "Request body over 4.5 MB." },
      });
    }
    if (url.pathname.startsWith("/__dev/")) return serveDev(res, method, url.pathname, body);
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (Array.isArray(value)) for (const v of value) headers.append(name, v);
      else if (value !== undefined) headers.set(name, value);
    }
    headers.set("x-forwarded-for", req.socket.remoteAddress ?? "127.0.0.1");
    headers.set("x-forwarded-proto", "http");
    const request = new Request(url, {
      method,
      headers,
      body: method === "GET" || method === "HEAD" ? null : new Uint8Array(body),
    });
    const response = await output.serve(request);
    res.statusCode = response.status;
    for (const [name, value] of response.headers) res.setHeader(name, value);
    if (!response.body) return void res.end();
    // Streamed as it comes, as Vercel streams a function's response.
    Readable.fromWeb(response.body as import("node:stream/web").ReadableStream).pipe(res);
  }

  const server = createServer((req, res) => {
    serve(req, res).catch((error: unknown) => {
      process.stdout.write(
        `${JSON.stringify({
          level: "error",
          event: "function_invocation_failed",
          path: req.url,
          error: error instanceof Error ? error.message : String(error),
        })}\n`,
      );
      // What Vercel answers when a function throws instead of returning a response.
      if (!res.headersSent)
        sendJson(res, 500, {
          error: { code: "FUNCTION_INVOCATION_FAILED", message: "A server error has occurred." },
        });
      else res.end();
    });
  });
  await new Promise<void>((done, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) =>
      reject(
        error.code === "EADDRINUSE"
          ? new Error(`the app could not listen on ${host}:${options.port}: the port is in use`)
          : error,
      ),
    );
    server.listen(options.port, host, () => done());
  });
  return {
    url: origin,
    functions: output.functions.map((f) => f.path),
    close: async () => {
      await new Promise<void>((done) => {
        server.close(() => done());
        server.closeAllConnections();
      });
      await pool?.end();
    },
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
