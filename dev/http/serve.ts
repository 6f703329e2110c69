/**
 * The one place a dev/ or bench/ server meets node:http: a Web `(Request) → Response` handler
 * served on a port, by srvx's Node adapter (already in the tree under `vercel`, now a direct
 * devDependency). srvx writes the status, its text, every header (each `set-cookie` on its own
 * line), and streams a body as it is produced, cancelling the stream when the client leaves
 * (the fake OpenAI's SSE stops there); `request.signal` aborts then too. A HEAD answer has no
 * body (node:http drops it). A handler that throws gets `onError`'s answer, else a bare 500.
 */
import { type IncomingMessage, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { serve as srvx } from "srvx/node";

export type Handler = (request: Request, info: { ip: string }) => Promise<Response>;

export interface ServeOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  /** Names the server in the one-line error when the port is taken. */
  name?: string;
  /** The answer when the handler throws. @default an empty 500 */
  onError?: (error: unknown) => Response | Promise<Response>;
  /** node:http's keep-alive timeout, when a caller needs longer idle connections. */
  keepAliveTimeout?: number;
  /**
   * A request asking to upgrade (a WebSocket handshake), which a Web handler cannot answer:
   * given node:http's raw request and socket (the Realtime stand-in's `/realtime/v1/websocket`).
   * Without it node:http closes such a connection.
   */
  onUpgrade?: (request: IncomingMessage, socket: Duplex, head: Buffer) => void;
}

export interface Served {
  /** `http://<host>:<port>`, the port the server got (0 asks for any free one). */
  url: string;
  port: number;
  /** Stops listening and drops open connections, streams included. */
  close(): Promise<void>;
}

/** What a local receiver (alerts, traces) is started with. */
export interface ReceiverOptions {
  port: number;
  /** @default "127.0.0.1" */
  host?: string;
  log?: (line: string) => void;
}

/** A started local receiver: what it has kept, until cleared. */
export interface Receiver {
  url: string;
  clear(): void;
  close(): Promise<void>;
}

export async function serve(handler: Handler, options: ServeOptions): Promise<Served> {
  const host = options.host ?? "127.0.0.1";
  const onError = options.onError ?? (() => new Response(null, { status: 500 }));
  const server = srvx({
    port: options.port,
    hostname: host,
    silent: true,
    gracefulShutdown: false, // each caller owns its process's signals
    fetch: async (request) => {
      let response: Response;
      try {
        response = await handler(request, { ip: request.ip ?? "" });
      } catch (error) {
        response = await onError(error);
      }
      return withReason(response);
    },
  });
  const node = server.node?.server as import("node:http").Server | undefined;
  if (node && options.keepAliveTimeout) node.keepAliveTimeout = options.keepAliveTimeout;
  if (node && options.onUpgrade) node.on("upgrade", options.onUpgrade);
  try {
    await server.ready();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EADDRINUSE")
      throw new Error(
        `${options.name ?? "server"} could not listen on ${host}:${options.port}: the port is already in use`,
      );
    throw error;
  }
  const address = node?.address();
  const port = address && typeof address === "object" ? address.port : options.port;
  return {
    url: `http://${host.includes(":") ? `[${host}]` : host}:${port}`,
    port,
    close: () => server.close(true),
  };
}

/**
 * srvx writes `response.statusText` as it is, and a Response built without one has "", so
 * the status line would lose the reason phrase node:http writes ("204 No Content").
 */
function withReason(response: Response): Response {
  const reason = STATUS_CODES[response.status];
  if (response.statusText || !reason) return response;
  return new Response(response.body, {
    status: response.status,
    statusText: reason,
    headers: response.headers,
  });
}
