/**
 * The local stack's outbox: every mail the Auth stand-in (dev/auth/gotrue.ts) would send is
 * caught here instead, as the Supabase CLI catches it in Inbucket/Mailpit, so a developer can
 * open the confirmation link and a test can read it. Messages live in memory (a restart of the
 * stack empties the box, as a fresh Mailpit container does; the links they hold expire in an
 * hour anyway).
 *
 * Served by `handle` (the stack mounts it at `/__mail` beside the stand-in):
 *   GET /__mail                     an HTML list, newest first, each link clickable
 *   GET /__mail/messages[?to=addr]  JSON `{"messages": [...]}`, newest first
 * Only at the server's own loopback address: the box holds sign-in links, and a page on
 * another site must not read it through a rebound DNS name.
 */
import { randomUUID } from "node:crypto";

export interface Mail {
  id: string;
  to: string;
  subject: string;
  /** The mail's HTML body, as GoTrue's default template renders it. */
  html: string;
  /** The link the mail asks its reader to follow. */
  link: string;
  /** The six-digit code the same mail carries (GoTrue's `{{ .Token }}`). */
  otp: string;
  sentAt: string;
}

export interface Mailbox {
  send(mail: Omit<Mail, "id" | "sentAt">): Mail;
  /** Newest first; only those to `to` (case-insensitive) when given. */
  list(to?: string): Mail[];
  clear(): void;
  /** Answers `/__mail` and `/__mail/messages`; undefined for any other path. */
  handle(request: Request, ownPort: number): Response | undefined;
}

const MAX_KEPT = 500;

function escapeHtml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] ?? c,
  );
}

function loopbackHost(request: Request, port: number): boolean {
  const host = request.headers.get("host")?.toLowerCase() ?? "";
  return ["127.0.0.1", "localhost", "[::1]"].some((n) => host === `${n}:${port}`);
}

export function createMailbox(now: () => Date = () => new Date()): Mailbox {
  let mails: Mail[] = [];
  const box: Mailbox = {
    send(mail) {
      const kept: Mail = { ...mail, id: randomUUID(), sentAt: now().toISOString() };
      mails = [kept, ...mails].slice(0, MAX_KEPT);
      return kept;
    },
    list(to) {
      const want = to?.toLowerCase();
      return want ? mails.filter((m) => m.to.toLowerCase() === want) : [...mails];
    },
    clear() {
      mails = [];
    },
    handle(request, ownPort) {
      const url = new URL(request.url);
      if (url.pathname !== "/__mail" && url.pathname !== "/__mail/messages") return undefined;
      const headers = { "cache-control": "no-store", "x-content-type-options": "nosniff" };
      if (!loopbackHost(request, ownPort))
        return Response.json(
          { error: { code: "host_not_allowed", message: "The mailbox answers only on loopback." } },
          { status: 403, headers },
        );
      if (request.method !== "GET" && request.method !== "HEAD")
        return Response.json(
          { error: { code: "method_not_allowed", message: "Use GET." } },
          { status: 405, headers: { ...headers, allow: "GET, HEAD" } },
        );
      const list = box.list(url.searchParams.get("to") ?? undefined);
      if (url.pathname === "/__mail/messages")
        return Response.json({ messages: list }, { headers });
      return new Response(page(list), {
        headers: {
          ...headers,
          "content-type": "text/html; charset=utf-8",
          "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'",
        },
      });
    },
  };
  return box;
}

function page(list: Mail[]): string {
  const items = list
    .map(
      (m) => `<li><p><strong>${escapeHtml(m.subject)}</strong> to ${escapeHtml(m.to)}
  <small>${escapeHtml(m.sentAt)}</small></p>
  <p><a href="${escapeHtml(m.link)}">${escapeHtml(m.link)}</a></p>
  <p>Code: <code>${escapeHtml(m.otp)}</code></p></li>`,
    )
    .join("\n");
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">
<title>Local mailbox</title>
<style>body{font:16px/1.5 system-ui,sans-serif;margin:2rem;max-width:60rem}li{margin-bottom:1rem;word-break:break-all}</style>
</head><body><h1>Local mailbox</h1>
<p>Mail the local Auth stand-in sent (nothing leaves this machine). Newest first; reload to see new mail.</p>
${list.length ? `<ol>${items}</ol>` : "<p>No mail yet.</p>"}
</body></html>
`;
}
