import { createHash, randomUUID } from "node:crypto";
import { SignJWT } from "jose";
import { HttpResponse, http } from "msw";
import { setupServer } from "msw/node";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "vitest";
import { flowControlOf } from "../../lib/config.ts";
import { UpstreamError } from "../../lib/errors.ts";
import { createQueue, decodeFailureCallback, verifyQStashRequest } from "../../lib/queue.ts";

const appUrl = "https://jobs.example.com";
const token = "eyJVc2VySUQiOiJ0ZXN0In0=";
const server = setupServer();
beforeAll(() => server.listen({ onUnhandledRequest: "error" }));
afterEach(() => server.resetHandlers());
afterAll(() => server.close());

const publishRoute = "https://qstash.upstash.io/v2/publish/*";
const queue = createQueue({ token, appUrl, retries: 1 });

type Seen = { path: string; headers: Record<string, string>; body: string };
function capture(respond: () => Response): Seen[] {
  const seen: Seen[] = [];
  server.use(
    http.post(publishRoute, async ({ request }) => {
      const url = new URL(request.url);
      seen.push({
        path: url.pathname,
        headers: Object.fromEntries(request.headers),
        body: await request.text(),
      });
      return respond();
    }),
  );
  return seen;
}

describe("publishJob", () => {
  test("publishes {jobId, seq} to the worker with retries, failure callback, dedup id and notBefore", async () => {
    const jobId = randomUUID();
    const seen = capture(() =>
      HttpResponse.json(
        {
          messageId: "msg_26hZCxZCuWyyTWPmSVBrNC1RADwpgWdvfDwDQdp1GgZkWWz",
          url: `${appUrl}/api/worker`,
        },
        { status: 201 },
      ),
    );
    const notBefore = new Date("2030-01-01T00:00:30.200Z");
    const res = await queue.publishJob({ jobId, seq: 3, dedupId: `${jobId}-q1`, notBefore });

    expect(res).toEqual({
      messageId: "msg_26hZCxZCuWyyTWPmSVBrNC1RADwpgWdvfDwDQdp1GgZkWWz",
      deduplicated: false,
    });
    expect(seen).toHaveLength(1);
    const [req] = seen;
    expect(req?.path).toBe("/v2/publish/https://jobs.example.com/api/worker");
    expect(JSON.parse(req?.body ?? "")).toEqual({ jobId, seq: 3 });
    expect(req?.headers).toMatchObject({
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      "upstash-method": "POST",
      "upstash-retries": "1",
      "upstash-failure-callback": "https://jobs.example.com/api/dlq",
      "upstash-failure-callback-retries": "3",
      "upstash-deduplication-id": `${jobId}-q1`,
      "upstash-not-before": String(Math.ceil(notBefore.getTime() / 1000)),
    });
    // No header would be forwarded to our worker by accident.
    expect(Object.keys(req?.headers ?? {}).filter((h) => h.startsWith("upstash-forward-"))).toEqual(
      [],
    );
  });

  test("with flow control, a publish carries the model's key and the limits QStash reads", async () => {
    const limits = flowControlOf({
      qstashFlowControl: "on",
      openaiModel: "ft:gpt-4o-mini:acme::abc123",
      qstashFlowParallelism: 20,
      qstashFlowRate: 1,
      qstashFlowPeriodSeconds: 3,
    });
    // QStash takes letters, digits, "-", "_" and "." in a key; a fine-tuned model's ":" is not.
    expect(limits).toEqual({
      key: "openai.ft_gpt-4o-mini_acme__abc123",
      parallelism: 20,
      rate: 1,
      period: 3,
    });
    const seen = capture(() =>
      HttpResponse.json({ messageId: "msg_1", url: `${appUrl}/api/worker` }),
    );
    await createQueue({ token, appUrl, retries: 1, flowControl: limits }).publishJob({
      jobId: randomUUID(),
      seq: 1,
      dedupId: "d-fc",
    });
    expect(seen[0]?.headers).toMatchObject({
      "upstash-flow-control-key": "openai.ft_gpt-4o-mini_acme__abc123",
      "upstash-flow-control-value": "parallelism=20, rate=1, period=3s",
    });
    expect(
      flowControlOf({
        qstashFlowControl: "off",
        openaiModel: "gpt-4o-mini",
        qstashFlowParallelism: 20,
        qstashFlowRate: 1,
        qstashFlowPeriodSeconds: 3,
      }),
    ).toBeUndefined();
  });

  test("no notBefore header when publishing for now", async () => {
    const seen = capture(() =>
      HttpResponse.json({ messageId: "msg_1", url: `${appUrl}/api/worker` }),
    );
    await queue.publishJob({ jobId: randomUUID(), seq: 1, dedupId: "d-1" });
    expect(seen[0]?.headers["upstash-not-before"]).toBeUndefined();
  });

  test("a duplicate publish (202) reports deduplicated with the first message id", async () => {
    capture(() =>
      HttpResponse.json(
        { messageId: "msg_first", url: `${appUrl}/api/worker`, deduplicated: true },
        { status: 202 },
      ),
    );
    expect(await queue.publishJob({ jobId: randomUUID(), seq: 1, dedupId: "d-2" })).toEqual({
      messageId: "msg_first",
      deduplicated: true,
    });
  });

  test("QStash 5xx → UpstreamError with the status, not retried", async () => {
    const seen = capture(() =>
      HttpResponse.json({ error: "internal server error" }, { status: 500 }),
    );
    const err = await queue
      .publishJob({ jobId: randomUUID(), seq: 1, dedupId: "d-3" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamError);
    expect(err).toMatchObject({ service: "qstash", status: 500 });
    expect(seen).toHaveLength(1);
  });

  test("QStash 429 (daily limit) → UpstreamError", async () => {
    capture(() =>
      HttpResponse.json(
        { error: "daily request limit exceeded" },
        {
          status: 429,
          headers: {
            "RateLimit-Limit": "1000",
            "RateLimit-Remaining": "0",
            "RateLimit-Reset": "1767225600",
          },
        },
      ),
    );
    const err = await queue
      .publishJob({ jobId: randomUUID(), seq: 1, dedupId: "d-4" })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "UpstreamError", service: "qstash", status: 429 });
  });

  test("QStash 400 (bad destination) → UpstreamError", async () => {
    capture(() =>
      HttpResponse.json(
        { error: "invalid destination url: endpoint has invalid scheme, add http:// or https://" },
        { status: 400 },
      ),
    );
    const err = await queue
      .publishJob({ jobId: randomUUID(), seq: 1, dedupId: "d-5" })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "UpstreamError", service: "qstash", status: 400 });
  });

  test("network failure → retried with the same dedup id, then UpstreamError", async () => {
    const seen = capture(() => HttpResponse.error());
    const err = await queue
      .publishJob({ jobId: randomUUID(), seq: 1, dedupId: "d-6" })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "UpstreamError", service: "qstash" });
    expect(seen.length).toBe(3);
    expect(new Set(seen.map((s) => s.headers["upstash-deduplication-id"]))).toEqual(
      new Set(["d-6"]),
    );
  });
});

describe("verifyQStashRequest", () => {
  const keys = {
    currentSigningKey: "sig_7kYjw48mhY7kAjqNGcy6cr29RJ6r",
    nextSigningKey: "sig_5ZB6DVzB1wjE8S6rZ7eenA8Pdnhs",
  };
  const url = `${appUrl}/api/worker`;
  const body = JSON.stringify({ jobId: randomUUID() });

  /** A signature built exactly as QStash builds one (features/security.mdx). */
  async function sign(
    o: { key?: string; sub?: string; body?: string; iat?: number; padded?: boolean } = {},
  ) {
    const iat = o.iat ?? Math.floor(Date.now() / 1000);
    let hash = createHash("sha256")
      .update(o.body ?? body)
      .digest("base64url");
    if (o.padded)
      hash = createHash("sha256")
        .update(o.body ?? body)
        .digest("base64")
        .replace(/\+/g, "-")
        .replace(/\//g, "_");
    return new SignJWT({ body: hash })
      .setProtectedHeader({ alg: "HS256", typ: "JWT" })
      .setIssuer("Upstash")
      .setSubject(o.sub ?? url)
      .setIssuedAt(iat)
      .setNotBefore(iat)
      .setExpirationTime(iat + 300)
      .setJti(`jwt_${randomUUID().replace(/-/g, "")}`)
      .sign(new TextEncoder().encode(o.key ?? keys.currentSigningKey));
  }

  const delivery = (signature: string | null, raw = body) =>
    new Request(url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "user-agent": "Upstash-QStash",
        "upstash-message-id": "msg_1",
        "upstash-retried": "0",
        ...(signature ? { "upstash-signature": signature } : {}),
      },
      body: raw,
    });

  const rejected = async (req: Request) =>
    expect(await verifyQStashRequest(req, { ...keys, url }).catch((e: unknown) => e)).toMatchObject(
      {
        status: 401,
        code: "invalid_signature",
      },
    );

  test("a valid signature returns the raw body, byte for byte", async () => {
    const raw = `{ "jobId" : "${randomUUID()}" }`; // not what JSON.stringify would produce
    expect(
      await verifyQStashRequest(delivery(await sign({ body: raw }), raw), { ...keys, url }),
    ).toBe(raw);
  });

  test("the padded body hash from the docs is accepted too", async () => {
    expect(
      await verifyQStashRequest(delivery(await sign({ padded: true })), { ...keys, url }),
    ).toBe(body);
  });

  test("a signature with the next key (during rotation) is accepted", async () => {
    expect(
      await verifyQStashRequest(delivery(await sign({ key: keys.nextSigningKey })), {
        ...keys,
        url,
      }),
    ).toBe(body);
  });

  test("signed for another URL → 401", async () => {
    await rejected(delivery(await sign({ sub: `${appUrl}/api/dlq` })));
    await rejected(delivery(await sign({ sub: `${appUrl}/api/worker/` })));
  });

  test("a tampered body → 401", async () => {
    await rejected(delivery(await sign(), JSON.stringify({ jobId: randomUUID() })));
  });

  test("an expired signature → 401", async () => {
    await rejected(delivery(await sign({ iat: Math.floor(Date.now() / 1000) - 600 })));
  });

  test("another key, a missing header, or garbage → 401", async () => {
    await rejected(delivery(await sign({ key: "sig_not_ours_at_all_000000000" })));
    await rejected(delivery(null));
    await rejected(delivery("not-a-jwt"));
  });
});

describe("decodeFailureCallback", () => {
  const jobId = randomUUID();
  const payload = {
    status: 503,
    header: { "Content-Type": ["application/json"], "Retry-After": ["5"] },
    body: Buffer.from('{"error":{"code":"unavailable"}}').toString("base64"),
    retried: 1,
    maxRetries: 1,
    dlqId: "1725323658779-0",
    sourceMessageId: "msg_26hZCxZCuWyyTWPmSVBrNC1RADwpgWdvfDwDQdp1GgZkWWz",
    topicName: "",
    endpointName: "",
    url: `${appUrl}/api/worker`,
    method: "POST",
    sourceHeader: { "Content-Type": ["application/json"], "Upstash-Retries": ["1"] },
    sourceBody: Buffer.from(JSON.stringify({ jobId })).toString("base64"),
    notBefore: "1701198458025",
    createdAt: "1701198447054",
    callerIP: "178.247.74.179",
  };

  test("decodes the job id from the base64 source body and the delivery facts", () => {
    expect(decodeFailureCallback(JSON.stringify(payload))).toEqual({
      jobId,
      // A message published before messages carried their seq: treated as the current one.
      seq: null,
      status: 503,
      retried: 1,
      maxRetries: 1,
      dlqId: "1725323658779-0",
      sourceMessageId: "msg_26hZCxZCuWyyTWPmSVBrNC1RADwpgWdvfDwDQdp1GgZkWWz",
    });
  });

  test("decodes the message's seq (the job's publish_seq when it was published)", () => {
    const withSeq = (seq: unknown) =>
      JSON.stringify({
        ...payload,
        sourceBody: Buffer.from(JSON.stringify({ jobId, seq })).toString("base64"),
      });
    expect(decodeFailureCallback(withSeq(1))).toMatchObject({ jobId, seq: 1 });
    expect(decodeFailureCallback(withSeq(2_147_483_647))).toMatchObject({ seq: 2_147_483_647 });
  });

  test("a seq that is present but not a publish_seq → 400 invalid_callback, never a guess", () => {
    for (const seq of [0, -1, 1.5, "2", null, 2_147_483_648, true, {}]) {
      const raw = JSON.stringify({
        ...payload,
        sourceBody: Buffer.from(JSON.stringify({ jobId, seq })).toString("base64"),
      });
      expect(() => decodeFailureCallback(raw), JSON.stringify(seq)).toThrowError(
        expect.objectContaining({ status: 400, code: "invalid_callback" }),
      );
    }
  });

  test("malformed callbacks → 400 invalid_callback", () => {
    const bad = [
      "not json",
      JSON.stringify({ ...payload, sourceBody: undefined }),
      JSON.stringify({ ...payload, sourceBody: Buffer.from("plain text").toString("base64") }),
      JSON.stringify({
        ...payload,
        sourceBody: Buffer.from('{"jobId":"../etc"}').toString("base64"),
      }),
      JSON.stringify([payload]),
    ];
    for (const raw of bad) {
      expect(() => decodeFailureCallback(raw)).toThrowError(
        expect.objectContaining({ status: 400, code: "invalid_callback" }),
      );
    }
  });
});
