import { createServer, type IncomingHttpHeaders } from "node:http";
import { Client, QstashError, Receiver } from "@upstash/qstash";
import { expect, onTestFinished, test } from "vitest";
import {
  DEV_SIGNING_KEYS,
  DEV_TOKEN,
  type QStashStandIn,
  startQStash,
} from "../../dev/qstash/index.ts";
import { listenForTest } from "../support/listen.ts";
import { freePort } from "../support/ports.ts";
import { refusesItem, spans } from "../support/readme-refusals.ts";

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
  await listenForTest(server, port);
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
  options: { timeoutMs?: number; state?: () => unknown } = {},
): Promise<T> {
  const deadline = Date.now() + (options.timeoutMs ?? 5000);
  for (;;) {
    const value = probe();
    if (value) return value;
    if (Date.now() > deadline)
      throw new Error(
        `timed out waiting for ${what}${options.state ? `: ${JSON.stringify(options.state())}` : ""}`,
      );
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const idle = (qstash: QStashStandIn) => qstash.waitIdle(8000);
const decode = (base64: string) => Buffer.from(base64, "base64").toString("utf8");

// Upstash-Forward-* (the SDK's `headers` option) is kept although lib/queue.ts sends none: it is
// how W3C trace context (`traceparent`) would reach the worker, and it costs one function.
test("a delivery carries the exact body, forwarded headers and a signature that verifies for the exact URL", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver();
  const url = `${receiver.base}/api/worker?job=42&x=a%20b`;
  const body = { jobId: "j-1", prompt: "héllo ✓", n: [1, 2.5] };
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

  const published = await client.publishJSON({ url, body, headers: { traceparent } });
  await idle(qstash);

  expect(published).toEqual({ messageId: expect.stringMatching(/^msg_/), url });
  expect(receiver.deliveries).toHaveLength(1);
  const [delivery] = receiver.deliveries;
  expect(delivery?.path).toBe("/api/worker?job=42&x=a%20b");
  expect(delivery?.method).toBe("POST");
  expect(delivery?.verified).toBe(true);
  expect(delivery?.body).toBe(JSON.stringify(body));
  expect(delivery?.headers).toMatchObject({
    "content-type": "application/json",
    traceparent,
    "user-agent": "Upstash-QStash",
    "upstash-message-id": published.messageId,
    "upstash-retried": "0",
  });
  expect(delivery?.headers["upstash-forward-traceparent"]).toBeUndefined();
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

  const { messages } = await client.dlq.listMessages();
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

test("Upstash-Failure-Callback-Forward-* reaches the failure callback with the prefix stripped, and not the destination", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver((d) => (d.path === "/always-fails" ? { status: 500 } : {}));
  const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  await client.publishJSON({
    url: `${receiver.base}/always-fails`,
    body: {},
    retries: 0,
    failureCallback: `${receiver.base}/on-failure`,
    headers: { traceparent: tp, "Upstash-Failure-Callback-Forward-traceparent": tp },
  });
  await idle(qstash);
  const [delivery] = receiver.to("/always-fails");
  expect(delivery?.headers.traceparent).toBe(tp);
  expect(Object.keys(delivery?.headers ?? {}).filter((h) => h.includes("callback"))).toEqual([]);
  const [callback] = receiver.to("/on-failure");
  expect(callback?.verified).toBe(true);
  expect(callback?.headers.traceparent).toBe(tp);
  expect(JSON.parse(callback?.body ?? "{}").sourceHeader).toMatchObject({ Traceparent: [tp] });
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
  const { messages } = await client.dlq.listMessages();
  expect(messages.map((m) => [m.messageId, m.responseStatus, m.responseBody])).toEqual([
    [messageId, 489, "bad input"],
  ]);
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

test("notBefore (unix seconds) holds the delivery back, scaled by timeScale", async () => {
  const timeScale = 0.05;
  const { qstash, client } = await startStandIn({ timeScale });
  const receiver = await startReceiver();
  const notBefore = Math.floor(Date.now() / 1000) + 20; // 19–20 s away: 0.95–1 s scaled
  const start = Date.now();

  await client.publishJSON({ url: `${receiver.base}/late`, body: {}, notBefore });
  await client.publishJSON({ url: `${receiver.base}/now`, body: {} });
  await idle(qstash);

  const [late] = receiver.to("/late");
  const [now] = receiver.to("/now");
  expect((late?.at ?? 0) - start).toBeGreaterThanOrEqual(900);
  expect((now?.at ?? 0) - start).toBeLessThan(500);
});

test("the runbook's DLQ: listed and paged, one dead letter retried by its id (path or SDK), overrides refused", async () => {
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
  expect(secondPage.messages.map((m) => m.dlqId)).toEqual([all.messages[2]?.dlqId]);

  // The DLQ lists in the order the messages died, which a loaded machine can change: the
  // paths retried are read from the entries, not assumed.
  const [one, two, three] = all.messages;
  const pathOf = (m: { url: string } | undefined) => new URL(m?.url ?? "http://x/").pathname;
  // Overriding the message's settings on a retry is not served: refused, nothing retried.
  const overriding = await fetch(`${qstash.url}/v2/dlq/retry/${one?.dlqId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${DEV_TOKEN}`, "Upstash-Retries": "5" },
  });
  expect(overriding.status).toBe(501);
  expect(await overriding.json()).toEqual({
    error: "upstash-retries on a DLQ retry is not served by the local stand-in",
  });
  expect(qstash.stats().dlq).toBe(3);

  // By path, as docs/FAILURE-PATHS.md's curl does it: 201 and the new message id.
  const byPath = await fetch(`${qstash.url}/v2/dlq/retry/${one?.dlqId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${DEV_TOKEN}` },
  });
  expect(byPath.status).toBe(201);
  expect(await byPath.json()).toEqual({ messageId: expect.stringMatching(/^msg_/) });
  // By dlqIds, as the SDK's retry(id) sends it.
  expect((await client.dlq.retry(two?.dlqId ?? "")).responses).toHaveLength(1);
  // Both retries reach the destination, then the stand-in settles their failures. Waiting on
  // the deliveries themselves: on a loaded machine CI once saw the stand-in idle before the
  // second retry's delivery had started.
  // The wait is generous (the full suite loads both cores); on a timeout it says what the
  // receiver and the stand-in saw, so a lost delivery is told from a slow one.
  await until(
    () => receiver.to(pathOf(one)).length === 2 && receiver.to(pathOf(two)).length === 2,
    "both retries delivered",
    {
      timeoutMs: 20_000,
      state: () => ({
        deliveries: receiver.deliveries.map((d) => d.path),
        standIn: qstash.stats(),
      }),
    },
  );
  await idle(qstash);
  expect(receiver.to(pathOf(one))).toHaveLength(2);
  expect(receiver.to(pathOf(two))).toHaveLength(2);
  expect(receiver.to(pathOf(three))).toHaveLength(1);
  // Each failed again and is a new dead letter; the retried ones are gone.
  const after = (await client.dlq.listMessages()).messages.map((m) => m.dlqId);
  expect(after).toHaveLength(3);
  expect(after).not.toContain(one?.dlqId);
  expect(after).not.toContain(two?.dlqId);
  const gone = await fetch(`${qstash.url}/v2/dlq/retry/${one?.dlqId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${DEV_TOKEN}` },
  });
  expect(gone.status).toBe(404);
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
  await client.publishJSON({
    url: `${receiver.base}/later`,
    body: {},
    notBefore: Math.floor(Date.now() / 1000) + 86_400,
  });
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
  const { messages } = await client.dlq.listMessages();
  expect(messages.map((m) => [m.messageId, m.responseStatus])).toEqual([[messageId, 0]]);
});

test("QStash APIs the stand-in does not serve (batch, queues, schedules, URL groups, global parallelism) answer 501", async () => {
  const { qstash, client } = await startStandIn();
  const receiver = await startReceiver();
  const notServed = async (call: Promise<unknown>) => {
    const error = await call.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(QstashError);
    expect(error).toMatchObject({ status: 501 });
    expect(JSON.parse((error as Error).message).error).toMatch(/not served by the local stand-in/);
  };
  await notServed(client.batchJSON([{ url: `${receiver.base}/b`, body: {} }]));
  await notServed(
    client.queue({ queueName: "q" }).enqueueJSON({ url: `${receiver.base}/q`, body: {} }),
  );
  await notServed(client.schedules.list());
  await notServed(client.urlGroups.list());
  await notServed(client.flowControl.getGlobalParallelism());
  // A destination without a scheme is a URL group's name to QStash: not served, said as such.
  await notServed(client.publishJSON({ urlGroup: "my-group", body: {} }));
  await notServed(client.publishJSON({ url: "my-group", body: {} }));
  expect(qstash.stats().published).toBe(0);
  expect(receiver.deliveries).toHaveLength(0);
});

// Cut from the stand-in because nothing in lib/, api/ or ops/ calls them (lib/queue.ts publishes
// with retries, notBefore, deduplicationId and failureCallback only; nothing reads or cancels a
// message): each answered 2xx before the cut. Refused, never ignored, so a caller who starts
// using one learns it here before production does something the local stack never did.
test("QStash features the app does not use answer 501 through the SDK, and nothing is published", async () => {
  const { qstash, client } = await startStandIn({ timeScale: 1 });
  const receiver = await startReceiver(() => ({ status: 500 }));
  const url = `${receiver.base}/x`;
  // One dead letter and one pending message, so the refused calls below have something to act on.
  await client.publishJSON({ url, body: {}, retries: 0 });
  await qstash.waitIdle(8000);
  const { messages } = await client.dlq.listMessages();
  const dlqId = messages[0]?.dlqId ?? "";
  const pending = await client.publishJSON({
    url,
    body: {},
    notBefore: Math.floor(Date.now() / 1000) + 3600,
  });
  const before = qstash.stats();

  const refusals: Array<[string, () => Promise<unknown>]> = [
    ["Upstash-Delay", () => client.publishJSON({ url, body: {}, delay: "10s" })],
    ["Upstash-Retry-Delay", () => client.publishJSON({ url, body: {}, retryDelay: "1000" })],
    ["Upstash-Callback", () => client.publishJSON({ url, body: {}, callback: url })],
    [
      "Upstash-Content-Based-Deduplication",
      () => client.publishJSON({ url, body: {}, contentBasedDeduplication: true }),
    ],
    ["Upstash-Label", () => client.publishJSON({ url, body: {}, label: "l" })],
    ["Upstash-Redact-Fields", () => client.publishJSON({ url, body: {}, redact: { body: true } })],
    ["Upstash-Method PUT", () => client.publishJSON({ url, body: {}, method: "PUT" })],
    ...Object.entries({
      Timeout: "1s",
      Method: "PUT",
      "Retry-Delay": "1000",
      Delay: "1s",
    }).map(([option, value]): [string, () => Promise<unknown>] => [
      `Upstash-Failure-Callback-${option}`,
      () =>
        client.publishJSON({
          url,
          body: {},
          failureCallback: url,
          headers: { [`Upstash-Failure-Callback-${option}`]: value },
        }),
    ]),
    ["messages.get", () => client.messages.get(pending.messageId)],
    ["messages.cancel(id)", () => client.messages.cancel(pending.messageId)],
    ["messages.cancel(all)", () => client.messages.cancel({ all: true })],
    ["messages.cancel(filter)", () => client.messages.cancel({ filter: { url } })],
    ["dlq.listMessages(filter)", () => client.dlq.listMessages({ filter: { url } })],
    ["dlq.delete(id)", () => client.dlq.delete(dlqId)],
    ["dlq.delete(all)", () => client.dlq.delete({ all: true })],
    ["dlq.retry(all)", () => client.dlq.retry({ all: true })],
    ["dlq.retry(filter)", () => client.dlq.retry({ filter: { url } })],
  ];
  // Every feature's answer, so a failure names all that were not refused at once.
  const answers: Array<[string, string]> = [];
  for (const [feature, call] of refusals) {
    const error = await call().then(
      () => undefined,
      (e: unknown) => e,
    );
    const refused =
      error instanceof QstashError &&
      error.status === 501 &&
      /not served by the local stand-in/.test(JSON.parse(error.message).error);
    answers.push([feature, refused ? "refused" : String(error ?? "answered 2xx")]);
  }
  expect(answers.filter(([, answer]) => answer !== "refused")).toEqual([]);
  expect(qstash.stats()).toEqual(before);
  expect((await client.dlq.listMessages()).messages.map((m) => m.dlqId)).toEqual([dlqId]);
});

// dev/README.md's list of what the stand-in refuses, probed entry by entry with raw HTTP (the SDK cannot
// send every header alone): a header or API it names but the stand-in serves fails here.
const refusals = refusesItem("QStash");
const listedHeaders = spans(refusals).filter((s) => /^Upstash-[A-Za-z-]+$/.test(s));
const listedApis = spans(refusals).flatMap((s) => {
  const m = /^(?:(GET|POST|DELETE) )?(\/v2\/[\w/<>]+)$/.exec(s);
  return m ? [[m[1] ?? "GET", (m[2] ?? "").replace("<dlqId>", "1-0")] as const] : [];
});
test(`dev/README.md's refusal list: every publish header (${listedHeaders.length}) and API (${listedApis.length}) it names answers 501`, async () => {
  const { qstash } = await startStandIn();
  expect(listedHeaders.length).toBeGreaterThanOrEqual(8);
  expect(listedApis.length).toBeGreaterThanOrEqual(6);
  const call = (method: string, path: string, headers: Record<string, string> = {}) =>
    fetch(`${qstash.url}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${DEV_TOKEN}`,
        "content-type": "application/json",
        ...headers,
      },
      body: method === "GET" || method === "DELETE" ? null : "{}",
    });
  const answers: Array<[string, number, string]> = [];
  for (const header of listedHeaders) {
    // `Upstash-Method` is listed as "other than POST"; the rest take any well-formed value.
    const value = header === "Upstash-Method" ? "PUT" : header.endsWith("-Delay") ? "1000" : "1s";
    const callback: Record<string, string> = header.startsWith("Upstash-Failure-Callback-")
      ? { "Upstash-Failure-Callback": "http://127.0.0.1:1/cb" }
      : {};
    const res = await call("POST", "/v2/publish/http://127.0.0.1:1/x", {
      ...callback,
      [header]: value,
    });
    answers.push([header, res.status, ((await res.json()) as { error: string }).error]);
  }
  for (const [method, path] of listedApis) {
    const res = await call(method, path);
    answers.push([
      `${method} ${path}`,
      res.status,
      ((await res.json()) as { error: string }).error,
    ]);
  }
  expect(
    answers.filter(
      ([, status, error]) => status !== 501 || !/not served by the local stand-in/.test(error),
    ),
  ).toEqual([]);
  expect(qstash.stats().published).toBe(0);
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
