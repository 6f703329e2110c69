/**
 * The Auth stand-in on a port of its own: GoTrue (gotrue.ts) under `/auth/v1`, and the mailbox
 * (mailbox.ts) at `/__mail`, the way `supabase start` serves Auth behind its gateway and the
 * caught mail in Inbucket/Mailpit beside it. Tests start it directly; the stack starts it for
 * `npm run dev`.
 */
import { serve } from "../http/serve.ts";
import { createGotrue, type GotrueOptions } from "./gotrue.ts";
import { createMailbox, type Mailbox } from "./mailbox.ts";

export interface RunningGotrue {
  /** `http://127.0.0.1:<port>`: the project URL the stand-in answers at. */
  url: string;
  port: number;
  /** Where a person reads the caught mail. */
  mailUrl: string;
  mailbox: Mailbox;
  close(): Promise<void>;
}

export async function startGotrue(
  options: Omit<GotrueOptions, "mailbox" | "publicUrl"> & {
    port: number;
    /** The URL links and `iss` use. @default this server's own URL */
    publicUrl?: string;
  },
): Promise<RunningGotrue> {
  const mailbox = createMailbox(options.now);
  let gotrue: ReturnType<typeof createGotrue> | undefined;
  let ownPort = options.port;
  const served = await serve(
    async (request) => {
      const { pathname } = new URL(request.url);
      const mail = mailbox.handle(request, ownPort);
      if (mail) return mail;
      if (gotrue && (pathname === "/auth/v1" || pathname.startsWith("/auth/v1/")))
        return gotrue.handle(request);
      return new Response("404 page not found\n", {
        status: 404,
        headers: { "content-type": "text/plain; charset=utf-8" },
      });
    },
    {
      port: options.port,
      name: "Auth (GoTrue) stand-in",
      onError: () =>
        Response.json(
          {
            code: 500,
            error_code: "unexpected_failure",
            msg: "Unexpected failure, please check server logs for more information",
          },
          { status: 500 },
        ),
    },
  );
  ownPort = served.port;
  gotrue = createGotrue({ ...options, mailbox, publicUrl: options.publicUrl ?? served.url });
  await gotrue.ready();
  return {
    url: served.url,
    port: served.port,
    mailUrl: `${served.url}/__mail`,
    mailbox,
    close: () => served.close(),
  };
}
