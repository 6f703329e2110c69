import { createServer, type IncomingHttpHeaders } from "node:http";
import { Client, QstashError, Receiver } from "@upstash/qstash";
import { expect, onTestFinished, test } from "vitest";
import {
  DEV_SIGNING_KEYS,
  DEV_TOKEN,
  type QStashStandIn,
  startQStash,
} from "../../dev/qstash/index.ts";
import { freePort } from "../support/ports.ts";

// The stand-in is driven only through the official SDK; deliveries land on a real node:http
// receiver that checks every signature with the SDK's own Receiver against the exact URL.

interface Delivery {
  path: string;
  method: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** true, or the SignatureError message. */
  verified: boolean | string;
  at: number;
}

type Reply = { status?: number; headers?: Record<string, string>; body?: string } | "hang";

const verifier = new Receiver({
  currentSigningKey: DEV_SIGNING_KEYS.current,
  nextSigningKey: DEV_SIGNING_KEYS.next,
});

async function startReceiver(reply: (d: Delivery, nth: number) => Reply = () => ({})) {
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const deliveries: Delivery[] = [];
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks).toString("utf8");
    const verified = await verifier
      .verify({
        signature: String(req.headers["upstash-signature"]),
        body,
        url: `${base}${req.url}`,
      })
      .catch((error: Error) => error.message);
    const delivery: Delivery = {
      path: req.url ?? "",
      method: req.method ?? "",
      headers: req.headers,
      body,
      verified,
      at: Date.now(),
    };
    deliveries.push(delivery);
    const answer = reply(delivery, deliveries.filter((d) => d.path === delivery.path).length - 1);
    if (answer === "hang") return;
    res.writeHead(answer.status ?? 200, answer.headers ?? {});
    res.end(answer.body ?? "ok");
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return { base, deliveries, to: (path: string) => deliveries.filter((d) => d.path === path) };
}

async function startStandIn(options: { timeScale?: number; deliveryTimeoutMs?: number } = {}) {
  const qstash = await startQStash({
    port: await freePort(),
    timeScale: options.timeScale ?? 0.001,
    ...options,
  });
  onTestFinished(() => qstash.close());
  const client = new Client({ baseUrl: qstash.url, token: DEV_TOKEN, enableTelemetry: false });
  return { qstash, client };
}

async function until<T>(
  probe: () => T | undefined | false,
  what: string,
  timeoutMs = 5000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const idle = (qstash: QStashStandIn) => qstash.waitIdle(8000);
const decode = (base64: string) => Buffer.from(base64, "base64").toString("utf8");

test("a delivery carries the exact body, headers and a signature that verifies for the exact URL", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver();
  const url = `${receiver.base}/api/worker?job=42&x=a%20b`;
  const body = { jobId: "j-1", prompt: "héllo ✓", n: [1, 2.5] };

  const published = await client.publishJSON({
    url,
    body,
    method: "PUT",
    headers: { "X-Trace": "t-1" },
  });
  await idle(qstash);

  expect(published).toEqual({ messageId: expect.stringMatching(/^msg_/), url });
  expect(receiver.deliveries).toHaveLength(1);
  const [delivery] = receiver.deliveries;
  expect(delivery?.path).toBe("/api/worker?job=42&x=a%20b");
  expect(delivery?.method).toBe("PUT");
  expect(delivery?.verified).toBe(true);
  expect(delivery?.body).toBe(JSON.stringify(body));
  expect(delivery?.headers).toMatchObject({
    "content-type": "application/json",
    "x-trace": "t-1",
    "user-agent": "Upstash-QStash",
    "upstash-message-id": published.messageId,
    "upstash-retried": "0",
  });
  expect(delivery?.headers["upstash-forward-x-trace"]).toBeUndefined();
  expect(delivery?.headers.authorization).toBeUndefined();
  // The subject is the exact published URL: any other URL fails verification.
  const signature = String(delivery?.headers["upstash-signature"]);
  await expect(
    verifier.verify({
      signature,
      body: delivery?.body ?? "",
      url: `${receiver.base}/api/worker?job=42`,
    }),
  ).rejects.toThrow(/invalid subject/);
  await expect(verifier.verify({ signature, body: `${delivery?.body} ` })).rejects.toThrow(
    /body hash/,
  );
  // Signed with the CURRENT key: a receiver that only has the current key right still accepts it.
  const currentOnly = new Receiver({
    currentSigningKey: DEV_SIGNING_KEYS.current,
    nextSigningKey: "sig_wrong",
  });
  await expect(currentOnly.verify({ signature, body: delivery?.body ?? "", url })).resolves.toBe(
    true,
  );
  expect(qstash.stats()).toMatchObject({
    published: 1,
    delivered: 1,
    pending: 0,
    inFlight: 0,
    dlq: 0,
  });
});

test("4xx and 5xx are retried with Upstash-Retried 0,1,2 on the same message until a 2xx", async () => {
  const { qstash, client } = await startStandIn();
  const statuses = [503, 400, 200];
  const receiver = await startReceiver((_, nth) => ({ status: statuses[nth] ?? 200 }));

  const { messageId } = await client.publishJSON({
    url: `${receiver.base}/flaky`,
    body: { a: 1 },
    retries: 3,
  });
  await idle(qstash);

  expect(receiver.deliveries.map((d) => d.headers["upstash-retried"])).toEqual(["0", "1", "2"]);
  expect(new Set(receiver.deliveries.map((d) => d.headers["upstash-message-id"]))).toEqual(
    new Set([messageId]),
  );
  expect(receiver.deliveries.every((d) => d.verified === true)).toBe(true);
  expect(qstash.stats()).toMatchObject({ delivered: 1, dlq: 0 });
});

test("retries exhausted: 1 + retries attempts, then the DLQ and a signed failure callback with the real payload", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver((d) =>
    d.path === "/always-fails"
      ? { status: 500, headers: { "X-Why": "boom" }, body: '{"error":"model down"}' }
      : {},
  );
  const body = { jobId: "j-2", prompt: "ünïcode" };

  const { messageId } = await client.publishJSON({
    url: `${receiver.base}/always-fails`,
    body,
    retries: 2,
    failureCallback: `${receiver.base}/on-failure`,
  });
  await idle(qstash);

  expect(receiver.to("/always-fails").map((d) => d.headers["upstash-retried"])).toEqual([
    "0",
    "1",
    "2",
  ]);
  const [callback] = receiver.to("/on-failure");
  expect(receiver.to("/on-failure")).toHaveLength(1);
  expect(callback?.verified).toBe(true); // signed for the callback URL
  expect(callback?.headers["content-type"]).toBe("application/json");
  const payload = JSON.parse(callback?.body ?? "{}");
  expect(payload).toMatchObject({
    status: 500,
    header: { "X-Why": ["boom"] },
    retried: 2,
    maxRetries: 2,
    dlqId: expect.stringMatching(/^\d{13}-\d+$/),
    sourceMessageId: messageId,
    url: `${receiver.base}/always-fails`,
    method: "POST",
    sourceHeader: { "Content-Type": ["application/json"] },
    notBefore: expect.any(Number),
    createdAt: expect.any(Number),
    callerIP: "127.0.0.1",
  });
  expect(decode(payload.body)).toBe('{"error":"model down"}');
  expect(JSON.parse(decode(payload.sourceBody))).toEqual(body);

  const { messages } = await client.dlq.listMessages({ filter: { messageId } });
  expect(messages).toHaveLength(1);
  expect(messages[0]).toMatchObject({
    dlqId: payload.dlqId,
    messageId,
    url: `${receiver.base}/always-fails`,
    method: "POST",
    body: JSON.stringify(body),
    maxRetries: 2,
    failureCallback: `${receiver.base}/on-failure`,
    responseStatus: 500,
    responseBody: '{"error":"model down"}',
  });
});

test("the success callback follows every attempt, carrying that attempt's status and no dlqId", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver((d, nth) =>
    d.path === "/once-fails" && nth === 0 ? { status: 502 } : {},
  );

  const { messageId } = await client.publishJSON({
    url: `${receiver.base}/once-fails`,
    body: { b: 2 },
    callback: `${receiver.base}/on-attempt`,
    headers: {
      "Upstash-Callback-Method": "PUT",
      "Upstash-Callback-Forward-X-Callback-Tag": "cb-1",
    },
  });
  await idle(qstash);
  expect(receiver.to("/on-attempt").map((d) => [d.method, d.headers["x-callback-tag"]])).toEqual([
    ["PUT", "cb-1"],
    ["PUT", "cb-1"],
  ]);

  const payloads = receiver.to("/on-attempt").map((d) => JSON.parse(d.body));
  payloads.sort((a, b) => a.retried - b.retried);
  expect(payloads.map((p) => [p.status, p.retried, p.sourceMessageId])).toEqual([
    [502, 0, messageId],
    [200, 1, messageId],
  ]);
  expect(payloads.every((p) => !("dlqId" in p))).toBe(true);
  expect(receiver.to("/on-attempt").every((d) => d.verified === true)).toBe(true);
});

test("a failing failure callback retries like its source unless Upstash-Failure-Callback-Retries says otherwise", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver(() => ({ status: 500 }));

  await client.publishJSON({
    url: `${receiver.base}/a`,
    body: {},
    retries: 1,
    failureCallback: `${receiver.base}/a-failed`,
  });
  await client.publishJSON({
    url: `${receiver.base}/b`,
    body: {},
    retries: 1,
    failureCallback: `${receiver.base}/b-failed`,
    headers: { "Upstash-Failure-Callback-Retries": "0" },
  });
  await idle(qstash);

  expect(receiver.to("/a-failed")).toHaveLength(2);
  expect(receiver.to("/b-failed")).toHaveLength(1);
});

test("a custom Upstash-Retry-Delay expression drives the retries", async () => {
  // Default backoff would wait 12 s + 2m28s + 30 min (scaled: ~1.8 s); this expression waits 1+2+4 s.
  const { qstash, client } = await startStandIn({ timeScale: 0.01 });
  const receiver = await startReceiver(() => ({ status: 500 }));

  await client.publishJSON({
    url: `${receiver.base}/x`,
    body: {},
    retries: 3,
    retryDelay: "max(1000, pow(2, retried) * 1000)",
  });
  await idle(qstash);

  const times = receiver.deliveries.map((d) => d.at);
  expect(times).toHaveLength(4);
  const gaps = times.slice(1).map((t, i) => t - (times[i] ?? 0));
  expect(gaps[0]).toBeGreaterThanOrEqual(9);
  expect(gaps[1]).toBeGreaterThanOrEqual(19);
  expect(gaps[2]).toBeGreaterThanOrEqual(39);
  expect(gaps[2]).toBeLessThan(1500);
  expect(qstash.stats().dlq).toBe(1);
});

test("489 with Upstash-NonRetryable-Error stops retries at once and dead-letters the message", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver(() => ({
    status: 489,
    headers: { "Upstash-NonRetryable-Error": "true" },
    body: "bad input",
  }));

  const { messageId } = await client.publishJSON({
    url: `${receiver.base}/reject`,
    body: {},
    retries: 3,
  });
  await idle(qstash);

  expect(receiver.deliveries).toHaveLength(1);
  const { messages } = await client.dlq.listMessages({ filter: { messageId } });
  expect(messages.map((m) => [m.responseStatus, m.responseBody])).toEqual([[489, "bad input"]]);
});

test("deduplicationId: the second publish gets 202-style deduplicated:true, the same messageId, one delivery", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver();
  const request = { url: `${receiver.base}/dedup`, body: { job: 7 }, deduplicationId: "job-7" };

  const first = await client.publishJSON(request);
  const second = await client.publishJSON(request);
  const other = await client.publishJSON({ ...request, deduplicationId: "job-8" });
  await idle(qstash);

  expect(first.deduplicated).toBeUndefined();
  expect(second).toEqual({ messageId: first.messageId, url: request.url, deduplicated: true });
  expect(other.messageId).not.toBe(first.messageId);
  expect(receiver.deliveries.map((d) => d.headers["upstash-message-id"]).sort()).toEqual(
    [first.messageId, other.messageId].sort(),
  );
});

test("content-based deduplication keys on destination, body and headers", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver();
  const url = `${receiver.base}/content`;

  const a = await client.publishJSON({ url, body: { v: 1 }, contentBasedDeduplication: true });
  const b = await client.publishJSON({ url, body: { v: 1 }, contentBasedDeduplication: true });
  const c = await client.publishJSON({ url, body: { v: 2 }, contentBasedDeduplication: true });
  await idle(qstash);

  expect(b).toMatchObject({ messageId: a.messageId, deduplicated: true });
  expect(c.messageId).not.toBe(a.messageId);
  expect(receiver.deliveries).toHaveLength(2);
});

test("notBefore (unix seconds) and delay hold the delivery back, scaled by timeScale", async () => {
  const timeScale = 0.05;
  const { qstash, client } = await startStandIn({ timeScale });
  const receiver = await startReceiver();
  const notBefore = Math.floor(Date.now() / 1000) + 20; // 19–20 s away: 0.95–1 s scaled
  const start = Date.now();

  const late = await client.publishJSON({
    url: `${receiver.base}/late`,
    body: {},
    notBefore,
    delay: 1,
  });
  const delayed = await client.publishJSON({
    url: `${receiver.base}/delayed`,
    body: {},
    delay: "8s",
  });
  const pending = await client.messages.get(late.messageId);
  expect(pending).toMatchObject({ messageId: late.messageId, notBefore: notBefore * 1000 });
  await idle(qstash);

  const [lateDelivery] = receiver.to("/late");
  const [delayedDelivery] = receiver.to("/delayed");
  // notBefore wins over delay (1 s delay would be 50 ms scaled).
  expect((lateDelivery?.at ?? 0) - start).toBeGreaterThanOrEqual(900);
  expect((delayedDelivery?.at ?? 0) - start).toBeGreaterThanOrEqual(380);
  expect((delayedDelivery?.at ?? 0) - start).toBeLessThan((lateDelivery?.at ?? 0) - start);
  expect(delayed.messageId).not.toBe(late.messageId);
});

test("a pending message can be read and cancelled; it is never delivered and is then unknown", async () => {
  const { qstash, client } = await startStandIn({ timeScale: 1 });
  const receiver = await startReceiver();

  const { messageId } = await client.publishJSON({
    url: `${receiver.base}/never`,
    body: { c: 1 },
    delay: "1h",
  });
  const message = await client.messages.get(messageId);
  expect(message).toMatchObject({
    messageId,
    url: `${receiver.base}/never`,
    body: '{"c":1}',
    method: "POST",
  });
  expect(qstash.stats().pending).toBe(1);

  expect(await client.messages.cancel(messageId)).toEqual({ cancelled: 1 });
  await idle(qstash);
  await expect(client.messages.get(messageId)).rejects.toMatchObject({ status: 404 });
  await expect(client.messages.cancel(messageId)).rejects.toBeInstanceOf(QstashError);
  expect(receiver.deliveries).toHaveLength(0);
  expect(qstash.stats()).toMatchObject({ pending: 0, delivered: 0 });
});

test("a bulk cancel by filter cancels only the matching messages; no filter at all cancels the rest", async () => {
  const { qstash, client } = await startStandIn({ timeScale: 1 });
  const receiver = await startReceiver();
  const publish = (path: string, label?: string) =>
    client.publishJSON({
      url: `${receiver.base}${path}`,
      body: {},
      delay: "1h",
      ...(label ? { label } : {}),
    });
  const a = await publish("/a", "alpha");
  const b = await publish("/b", "beta");
  const c = await publish("/c");
  const pending = async () => {
    const alive: string[] = [];
    for (const { messageId } of [a, b, c])
      if (await client.messages.get(messageId).catch(() => undefined)) alive.push(messageId);
    return alive;
  };

  expect(await client.messages.cancel({ filter: { label: "alpha" } })).toEqual({ cancelled: 1 });
  expect(await pending()).toEqual([b.messageId, c.messageId]);
  expect(await client.messages.cancel({ filter: { label: ["nope", "alpha"] } })).toEqual({
    cancelled: 0,
  });
  expect(
    await client.messages.cancel({
      filter: { url: `${receiver.base}/b`, fromDate: Date.now() + 60_000 },
    }),
  ).toEqual({ cancelled: 0 });
  // Filters the stand-in has nothing for (URL groups, queues, schedules, flow control) match none.
  expect(await client.messages.cancel({ filter: { queueName: "q" } })).toEqual({ cancelled: 0 });
  expect(await client.messages.cancel({ filter: { url: `${receiver.base}/b` } })).toEqual({
    cancelled: 1,
  });
  expect(await pending()).toEqual([c.messageId]);
  expect(await client.messages.cancel({ all: true })).toEqual({ cancelled: 1 });
  await idle(qstash);
  expect(receiver.deliveries).toHaveLength(0);
});

test("a bulk cancel with a filter the stand-in does not implement is refused and cancels nothing", async () => {
  const { qstash, client } = await startStandIn({ timeScale: 1 });
  const receiver = await startReceiver();
  await client.publishJSON({ url: `${receiver.base}/keep`, body: {}, delay: "1h" });

  const host = await client.messages
    .cancel({ filter: { host: "127.0.0.1" } })
    .catch((e: unknown) => e);
  expect(host).toBeInstanceOf(QstashError);
  expect(host).toMatchObject({ status: 501 });
  expect(JSON.parse((host as Error).message)).toEqual({
    error: "filter host is not supported by the qstash stand-in (DELETE /v2/messages)",
  });
  const unknown = await client.messages
    .cancel({ filter: { lable: "typo" } } as unknown as Parameters<
      typeof client.messages.cancel
    >[0])
    .catch((e: unknown) => e);
  expect(unknown).toMatchObject({ status: 400 });
  expect(JSON.parse((unknown as Error).message).error).toMatch(
    /^unknown filter lable for DELETE \/v2\/messages/,
  );
  await expect(client.messages.cancel({ filter: { label: "" } })).rejects.toMatchObject({
    status: 400,
  });
  expect(qstash.stats().pending).toBe(1);
});

test("DLQ bulk delete, list and retry match only what the filter names, and refuse unknown filters", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver(() => ({ status: 500 }));
  for (const [path, label] of [
    ["/x", "red"],
    ["/y", "blue"],
    ["/z", undefined],
  ] as const)
    await client.publishJSON({
      url: `${receiver.base}${path}`,
      body: {},
      retries: 0,
      ...(label ? { label } : {}),
    });
  await idle(qstash);
  expect(qstash.stats().dlq).toBe(3);

  const bogus = { filter: { colour: "red" } } as unknown as Parameters<typeof client.dlq.delete>[0];
  await expect(client.dlq.delete(bogus)).rejects.toMatchObject({ status: 400 });
  await expect(
    client.dlq.retry(bogus as Parameters<typeof client.dlq.retry>[0]),
  ).rejects.toMatchObject({ status: 400 });
  await expect(
    client.dlq.listMessages({ filter: { host: "127.0.0.1" } } as unknown as Parameters<
      typeof client.dlq.listMessages
    >[0]),
  ).rejects.toMatchObject({ status: 400 });
  expect(qstash.stats().dlq).toBe(3);

  expect(await client.dlq.delete({ filter: { label: "red" } })).toEqual({ deleted: 1 });
  const blue = await client.dlq.listMessages({ filter: { url: `${receiver.base}/y` } });
  expect(blue.messages.map((m) => m.labels)).toEqual([["blue"]]);
  expect(await client.dlq.delete({ filter: { responseStatus: 404 } })).toEqual({ deleted: 0 });
  expect((await client.dlq.listMessages()).messages.map((m) => m.url).sort()).toEqual([
    `${receiver.base}/y`,
    `${receiver.base}/z`,
  ]);
  // Overriding the message's settings on a retry (raw HTTP: the SDK sends no such headers) is
  // not served: refused, nothing retried.
  const overriding = await fetch(`${qstash.url}/v2/dlq/retry?label=blue`, {
    method: "POST",
    headers: { authorization: `Bearer ${DEV_TOKEN}`, "Upstash-Retries": "5" },
  });
  expect(overriding.status).toBe(501);
  expect(await overriding.json()).toEqual({
    error: "upstash-retries on a DLQ retry is not supported by the qstash stand-in",
  });
  expect(qstash.stats().dlq).toBe(2);
  // A bulk retry republishes only the matching entry; it fails again and dead-letters anew.
  const retried = await client.dlq.retry({ filter: { label: "blue" } });
  expect(retried.responses).toHaveLength(1);
  await idle(qstash);
  expect(receiver.to("/y")).toHaveLength(2);
  expect(receiver.to("/z")).toHaveLength(1);
  expect(await client.dlq.delete({ all: true })).toEqual({ deleted: 2 });
});

test("DLQ entries can be listed, read in pages, deleted one by one and in bulk", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver(() => ({ status: 500 }));

  for (const n of [1, 2, 3])
    await client.publishJSON({ url: `${receiver.base}/dead-${n}`, body: { n }, retries: 0 });
  await idle(qstash);

  const all = await client.dlq.listMessages();
  expect(all.messages.map((m) => m.url).sort()).toEqual(
    [1, 2, 3].map((n) => `${receiver.base}/dead-${n}`),
  );
  expect(all.cursor).toBeUndefined();
  const firstPage = await client.dlq.listMessages({ count: 2 } as Parameters<
    typeof client.dlq.listMessages
  >[0]);
  expect(firstPage.messages).toHaveLength(2);
  const secondPage = await client.dlq.listMessages({ cursor: firstPage.cursor });
  expect(secondPage.messages).toHaveLength(1);

  const [one, two, three] = all.messages;
  expect(await client.dlq.delete(one?.dlqId ?? "")).toEqual({ deleted: 1 });
  await expect(client.dlq.delete(one?.dlqId ?? "")).rejects.toMatchObject({ status: 404 });
  expect(await client.dlq.delete([two?.dlqId ?? "", three?.dlqId ?? ""])).toMatchObject({
    deleted: 2,
  });
  expect((await client.dlq.listMessages()).messages).toHaveLength(0);
  expect(qstash.stats().dlq).toBe(0);
});

test("connection refused and a destination that never answers both fail and dead-letter", async () => {
  const { qstash, client } = await startStandIn({ deliveryTimeoutMs: 200 });
  const receiver = await startReceiver(() => "hang");
  const nobody = `http://127.0.0.1:${await freePort()}/gone`;

  const refused = await client.publishJSON({ url: nobody, body: {}, retries: 0 });
  const hung = await client.publishJSON({ url: `${receiver.base}/hang`, body: {}, retries: 1 });
  await idle(qstash);

  expect(receiver.deliveries).toHaveLength(2);
  const { messages } = await client.dlq.listMessages();
  expect(messages.map((m) => m.messageId).sort()).toEqual(
    [refused.messageId, hung.messageId].sort(),
  );
});

test("close() cancels timers and an in-flight delivery promptly", async () => {
  const qstash = await startQStash({ port: await freePort(), timeScale: 1 });
  const client = new Client({ baseUrl: qstash.url, token: DEV_TOKEN, enableTelemetry: false });
  const receiver = await startReceiver(() => "hang");
  await client.publishJSON({ url: `${receiver.base}/stuck`, body: {} });
  await client.publishJSON({ url: `${receiver.base}/later`, body: {}, delay: "1d" });
  await until(() => qstash.stats().inFlight === 1, "the delivery to start");

  const start = Date.now();
  await qstash.close();
  expect(Date.now() - start).toBeLessThan(1000);
  await expect(fetch(`${qstash.url}/v2/keys`)).rejects.toThrow();
});

test("Upstash-Timeout shortens the wait for an answer: a hung destination fails after it", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver(() => "hang");
  const start = Date.now();
  const { messageId } = await client.publishJSON({
    url: `${receiver.base}/slow`,
    body: {},
    retries: 0,
    timeout: "1s",
  });
  await idle(qstash);
  expect(Date.now() - start).toBeGreaterThanOrEqual(1000);
  const { messages } = await client.dlq.listMessages({ filter: { messageId } });
  expect(messages.map((m) => m.responseStatus)).toEqual([0]);
});

test("QStash APIs the stand-in does not serve (batch, queues, schedules, URL groups, flow control, global parallelism) answer 501", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver();
  const notServed = async (call: Promise<unknown>) => {
    const error = await call.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(QstashError);
    expect(error).toMatchObject({ status: 501 });
    expect(JSON.parse((error as Error).message).error).toMatch(/does not serve|not supported/);
  };
  await notServed(client.batchJSON([{ url: `${receiver.base}/b`, body: {} }]));
  await notServed(
    client.queue({ queueName: "q" }).enqueueJSON({ url: `${receiver.base}/q`, body: {} }),
  );
  await notServed(client.schedules.list());
  await notServed(client.urlGroups.list());
  await notServed(
    client.publishJSON({
      url: `${receiver.base}/f`,
      body: {},
      flowControl: { key: "k", parallelism: 1 },
    }),
  );
  await notServed(client.flowControl.getGlobalParallelism());
  // A destination without a scheme is a URL group's name to QStash: not served, said as such.
  await notServed(client.publishJSON({ urlGroup: "my-group", body: {} }));
  await notServed(client.publishJSON({ url: "my-group", body: {} }));
  expect(qstash.stats().published).toBe(0);
  expect(receiver.deliveries).toHaveLength(0);
});

test("a wrong token is refused with 401 and a bad destination scheme with QStash's 400", async () => {
  const { qstash, client } = await startStandIn();
  const stranger = new Client({
    baseUrl: qstash.url,
    token: "not-the-dev-token",
    enableTelemetry: false,
  });

  await expect(
    stranger.publishJSON({ url: "http://127.0.0.1:1/x", body: {} }),
  ).rejects.toMatchObject({
    status: 401,
  });
  await expect(stranger.dlq.listMessages()).rejects.toMatchObject({ status: 401 });
  const bad = await client
    .publishJSON({ url: "localhost:3000/api/x", body: {} })
    .catch((e: unknown) => e);
  expect(bad).toBeInstanceOf(QstashError);
  expect(bad).toMatchObject({ status: 400 });
  expect(JSON.parse((bad as Error).message)).toEqual({
    error: "invalid destination url: endpoint has invalid scheme, add http:// or https://",
  });
  expect(qstash.stats().published).toBe(0);
});

test("SDK dev mode finds the stand-in through GET /v2/keys and downloads nothing", async () => {
  const { qstash } = await startStandIn();
  const receiver = await startReceiver();
  const previous = process.env.QSTASH_DEV_PORT;
  process.env.QSTASH_DEV_PORT = new URL(qstash.url).port;
  onTestFinished(() => {
    if (previous === undefined) delete process.env.QSTASH_DEV_PORT;
    else process.env.QSTASH_DEV_PORT = previous;
  });

  // devMode ignores baseUrl/token and probes 127.0.0.1:$QSTASH_DEV_PORT/v2/keys for the dev keys;
  // had the probe failed it would try to download the qstash binary and this would fail offline.
  const devClient = new Client({ devMode: true, enableTelemetry: false });
  const { messageId } = await devClient.publishJSON({
    url: `${receiver.base}/dev-mode`,
    body: { ok: true },
  });
  await idle(qstash);

  expect(receiver.to("/dev-mode").map((d) => d.headers["upstash-message-id"])).toEqual([messageId]);
  await expect(
    new Receiver({ devMode: true }).verify({
      signature: String(receiver.deliveries[0]?.headers["upstash-signature"]),
      body: receiver.deliveries[0]?.body ?? "",
    }),
  ).resolves.toBe(true);
});
