/**
 * What an attacker can send to the two routes QStash calls (POST /api/worker, POST /api/dlq),
 * in-process: a body is read only up to a cap, a signature that lacks a claim is a 401, and no
 * header the signature does not cover can make the app publish.
 */
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { SignJWT } from "jose";
import { describe, expect, test } from "vitest";
import { DEV_SIGNING_KEYS } from "../../dev/qstash/constants.ts";

import { QSTASH_MAX_BODY_BYTES } from "../../lib/queue.ts";

import { APP_URL, signAsQStash, useApi } from "../support/api.ts";

const app = useApi();
const ROUTES = [
  ["worker", `${APP_URL}/api/worker`],
  ["dlq", `${APP_URL}/api/dlq`],
] as const;

/** A body streamed in 1 MiB chunks up to `totalBytes`; `pulled()` says how much was read. */
function streamedBody(totalBytes: number) {
  const chunk = new Uint8Array(1024 * 1024).fill(0x20);
  let sent = 0;
  const stream = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (sent >= totalBytes) return controller.close();
      sent += chunk.byteLength;
      controller.enqueue(chunk);
    },
  });
  return { stream, pulled: () => sent };
}

/** A JSON POST to `route` whose body is `body`'s stream, with `headers` besides its type. */
function postStreamed(
  route: (typeof ROUTES)[number][0],
  url: string,
  body: { stream: ReadableStream<Uint8Array> },
  headers: Record<string, string>,
) {
  return app.handlers[route](
    new Request(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: body.stream,
      duplex: "half",
    } as RequestInit),
  );
}

describe("QStash routes read a capped body", () => {
  test.each(ROUTES)(
    "%s: a 32 MiB streamed body under a signature header is refused (413) after reading about the cap, not the whole",
    async (route, url) => {
      const body = streamedBody(32 * 1024 * 1024);
      const res = await postStreamed(route, url, body, {
        "upstash-signature": await signAsQStash(url, "{}"),
      });
      expect(res.status).toBe(413);
      expect((await res.json()).error.code).toBe("payload_too_large");
      expect(body.pulled()).toBeLessThanOrEqual(QSTASH_MAX_BODY_BYTES + 2 * 1024 * 1024);
    },
  );

  test.each(ROUTES)(
    "%s: a declared Content-Length over the cap is refused before reading",
    async (route, url) => {
      const body = streamedBody(4 * 1024 * 1024);
      const res = await postStreamed(route, url, body, {
        "content-length": String(4 * 1024 * 1024),
        "upstash-signature": await signAsQStash(url, "{}"),
      });
      expect(res.status).toBe(413);
      expect(body.pulled()).toBeLessThanOrEqual(1024 * 1024);
    },
  );

  test.each(ROUTES)("%s: without a signature nothing is read: 401", async (route, url) => {
    const body = streamedBody(32 * 1024 * 1024);
    const res = await postStreamed(route, url, body, {});
    expect(res.status).toBe(401);
    expect(body.pulled()).toBeLessThanOrEqual(1024 * 1024);
  });
});

describe("signatures with a claim missing or of the wrong type", () => {
  const claims = (url: string, raw: string) => ({
    iss: "Upstash",
    sub: url,
    body: createHash("sha256").update(raw).digest("base64url"),
  });
  const variants: Array<[string, (c: Record<string, unknown>) => Record<string, unknown>]> = [
    ["no body claim", ({ body: _b, ...rest }) => rest],
    ["a numeric body claim", (c) => ({ ...c, body: 42 })],
    ["a body claim that is an object", (c) => ({ ...c, body: { hash: c.body } })],
    ["no subject", ({ sub: _s, ...rest }) => rest],
  ];
  for (const [route, url] of ROUTES) {
    test.each(variants)(`${route}: %s → 401 invalid_signature, never a 500`, async (_w, edit) => {
      const raw = JSON.stringify({ jobId: randomUUID() });
      const now = Math.floor(Date.now() / 1000);
      const signature = await new SignJWT(edit(claims(url, raw)))
        .setProtectedHeader({ alg: "HS256", typ: "JWT" })
        .setIssuedAt(now)
        .setNotBefore(now)
        .setExpirationTime(now + 300)
        .sign(new TextEncoder().encode(DEV_SIGNING_KEYS.current));
      const res = await app.handlers[route](
        new Request(url, {
          method: "POST",
          headers: { "content-type": "application/json", "upstash-signature": signature },
          body: raw,
        }),
      );
      expect(res.status).toBe(401);
      expect((await res.json()).error.code).toBe("invalid_signature");
      expect(app.logs.filter((l) => JSON.parse(l).level === "error")).toEqual([]);
    });
  }
});

describe("an unsigned header cannot steer a publish", () => {
  test("one captured signed delivery replayed with 9 new Upstash-Message-Ids publishes at most one new message", async () => {
    const user = await app.newUser();
    const id = await app.enqueueOk(user);
    const first = app.qstash.latestFor(id);
    // The provider says "wait": the job is requeued with a resume time ahead, and the requeue's
    // own publish fails, so a later delivery of the first message finds the job not ready.
    app.model.failNext("rate_limit_exceeded", 1, { retryAfterSeconds: 120 });
    app.qstash.failWith("500");
    expect((await app.deliver(first)).status).toBe(503);
    app.qstash.failWith(null);
    const accepted = app.qstash.forJob(id).length;

    // The attacker captured one signed delivery of that message (signature and body) ...
    const signature = await signAsQStash(first.destination, first.body);
    const replay = (messageId: string, retried: string) =>
      app.handlers.worker(
        new Request(first.destination, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "upstash-signature": signature,
            "upstash-message-id": messageId,
            "upstash-retried": retried,
          },
          body: first.body,
        }),
      );
    // ... and replays it with message ids (and retry counts) of their own choosing.
    for (let i = 0; i < 9; i++) {
      const res = await replay(`msg_${randomBytes(20).toString("hex")}`, String(i));
      expect(res.status).toBe(200);
      expect((await res.json()).outcome).toBe("not_ready");
    }
    expect(app.qstash.forJob(id).length - accepted).toBeLessThanOrEqual(1);
    expect(app.model.calls()).toBe(1);
    expect(await app.jobRow(id)).toMatchObject({ status: "queued", provider_quota_hits: 1 });
  });
});
