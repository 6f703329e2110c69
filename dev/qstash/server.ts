import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type WebHandler = (request: Request, callerIp: string) => Promise<Response>;

async function toRequest(req: IncomingMessage, origin: string): Promise<Request> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (Array.isArray(value)) for (const v of value) headers.append(name, v);
    else if (value !== undefined) headers.set(name, value);
  }
  const hasBody = req.method !== "GET" && req.method !== "HEAD";
  // req.url is the raw request target, so a destination like /v2/publish/http://h/p?a=1 survives.
  return new Request(`${origin}${req.url ?? "/"}`, {
    method: req.method ?? "GET",
    headers,
    body: hasBody ? Buffer.concat(chunks) : null,
  });
}

async function writeResponse(res: ServerResponse, response: Response): Promise<void> {
  res.statusCode = response.status;
  for (const [name, value] of response.headers) res.setHeader(name, value);
  res.end(Buffer.from(await response.arrayBuffer()));
}

/** Serves a Web `(Request) → Response` handler on node:http. */
export function listen(handler: WebHandler, port: number, host: string): Promise<Server> {
  const origin = `http://${host.includes(":") ? `[${host}]` : host}:${port}`;
  const server = createServer((req, res) => {
    void (async () => {
      try {
        const request = await toRequest(req, origin);
        await writeResponse(res, await handler(request, req.socket.remoteAddress ?? ""));
      } catch (error) {
        if (!res.headersSent) res.statusCode = 500;
        res.end(JSON.stringify({ error: error instanceof Error ? error.message : String(error) }));
      }
    })();
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve(server);
    });
  });
}

export function boundPort(server: Server): number {
  return (server.address() as AddressInfo).port;
}

export function stop(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}
