/**
 * The guard in front of a dev server's own routes (the app server's `/__dev/*`), which no
 * deployment has and which act for whoever runs `npm run dev`: the dev sign-in mints a token,
 * and with a real `OPENAI_API_KEY` that token spends the developer's key. Any web page the
 * developer visits can send requests to a loopback port, two ways this refuses:
 *
 * - DNS rebinding: the page's own host name is re-pointed at 127.0.0.1, so the browser treats
 *   the server as the page's origin and lets the page read the answers; the request still says
 *   `Host: <that name>:<port>`. Only the server's own loopback host:port is accepted
 *   (`127.0.0.1`, `localhost` or `[::1]`, with its port), as Vite's dev server checks
 *   `server.allowedHosts`.
 * - Cross-site requests (CSRF): a form post or a `no-cors` fetch from another origin, which the
 *   browser sends without asking. Browsers send `Origin` on every cross-origin request and on
 *   every POST; when it is there it must be this server's own origin (`null`, sent by sandboxed
 *   frames and `file:` pages, is not).
 *
 * curl, the tests and the page itself pass: the right Host, and no Origin or their own.
 * The answer never echoes what the caller sent.
 */

export interface Refusal {
  status: 403;
  code: "host_not_allowed" | "origin_not_allowed";
  message: string;
}

/** Why a request is not from this server's own loopback origin, or undefined when it is. */
export function foreignCaller(request: Request, port: number): Refusal | undefined {
  const host = request.headers.get("host")?.toLowerCase() ?? "";
  const names = ["127.0.0.1", "localhost", "[::1]"];
  // A Host without a port names port 80.
  const own = names.flatMap((n) => (port === 80 ? [`${n}:80`, n] : [`${n}:${port}`]));
  if (!own.includes(host)) {
    return {
      status: 403,
      code: "host_not_allowed",
      message: `Dev routes answer only at this server's own address: http://${own[0]} (or localhost, [::1] on the same port).`,
    };
  }
  const origin = request.headers.get("origin");
  if (origin !== null && origin.toLowerCase() !== `http://${host}`) {
    return {
      status: 403,
      code: "origin_not_allowed",
      message: "Dev routes answer only the page this server serves (another site's Origin).",
    };
  }
  return undefined;
}
