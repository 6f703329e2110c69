import { createServer } from "node:http";
import { Client, QstashError } from "@upstash/qstash";
import { expect, onTestFinished, test } from "vitest";
import { DEV_TOKEN, startQStash } from "../../dev/qstash/index.ts";
import { listenForTest } from "../support/listen.ts";
import { freePort } from "../support/ports.ts";

// QStash Flow Control in the stand-in, driven only through the official SDK (@upstash/qstash
// 2.12: `flowControl` on publish, `client.flowControl.*`), measured at a real node:http
// destination: how many calls are open at once, when each started, in which order.

interface Call {
  n: number;
  retried: number;
  at: number;
}

/** `gate`: the call is held open until it settles (then `holdMs` more). */
type Answer = { status: number; holdMs?: number; gate?: Promise<void> } | "hang";

async function destination(answer: (call: Call) => Answer = () => ({ status: 200 })) {
  const port = await freePort();
  const calls: Call[] = [];
  let open = 0;
  let maxOpen = 0;
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const call: Call = {
      n: (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { n: number }).n,
      retried: Number(req.headers["upstash-retried"]),
      at: Date.now(),
    };
    calls.push(call);
    open++;
    maxOpen = Math.max(maxOpen, open);
    const a = answer(call);
    if (a === "hang") {
      req.socket.once("close", () => open--);
      return;
    }
    await a.gate;
    await new Promise((resolve) => setTimeout(resolve, a.holdMs ?? 0));
    open--;
    res.writeHead(a.status);
    res.end("ok");
  });
  await listenForTest(server, port);
  return {
    url: `http://127.0.0.1:${port}/work`,
    calls,
    maxOpen: () => maxOpen,
  };
}

async function standIn() {
  const qstash = await startQStash({ port: await freePort(), timeScale: 0.001 });
  onTestFinished(() => qstash.close());
  const client = new Client({ baseUrl: qstash.url, token: DEV_TOKEN, enableTelemetry: false });
  return { qstash, client };
}

async function until(done: () => boolean | Promise<boolean>, what: string, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const key = () => `test.${Math.random().toString(36).slice(2)}`;

test("parallelism: at most N calls open at once; the rest wait in order, accepted, not retried", async () => {
  const { qstash, client } = await standIn();
  // The first calls are held open until the busy key has been looked at: however slowly the
  // publishes go, the waitlist is still there to be seen.
  let release = () => {};
  const gate = new Promise<void>((resolve) => {
    release = resolve;
  });
  const dest = await destination(() => ({ status: 200, holdMs: 80, gate }));
  const k = key();
  for (let n = 0; n < 8; n++) {
    // Over the limit is not refused: every publish is accepted with a message id.
    const res = await client.publishJSON({
      url: dest.url,
      body: { n },
      flowControl: { key: k, parallelism: 2 },
    });
    expect(res.messageId).toMatch(/^msg_/);
  }
  await until(async () => (await client.flowControl.get(k)).parallelismCount === 2, "2 in flight");
  const busy = await client.flowControl.get(k);
  expect(busy).toMatchObject({ flowControlKey: k, parallelismMax: 2, parallelismCount: 2 });
  expect(busy.waitListSize).toBe(6);
  release();
  await qstash.waitIdle(8000);
  // Two calls start together whenever both slots free up at once, each on a connection of its
  // own, so they may reach the destination in either order. What the waitlist's order does
  // guarantee: a message starts only once all but one (parallelism − 1) of those published
  // before it have ended, so at most one of them reaches the destination after it.
  const order = dest.calls.map((c) => c.n);
  expect([...order].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  for (const [i, n] of order.entries())
    expect(order.slice(0, i).filter((m) => m < n).length, `${order}`).toBeGreaterThanOrEqual(n - 1);
  expect(dest.calls.every((c) => c.retried === 0)).toBe(true);
  expect(dest.maxOpen()).toBe(2);
  expect(await client.flowControl.get(k)).toMatchObject({ waitListSize: 0, parallelismCount: 0 });
});

test("rate per period: at most `rate` deliveries start in a period, the next ones in the next", async () => {
  const { qstash, client } = await standIn();
  const dest = await destination();
  const k = key();
  const publish = (n: number) =>
    client.publishJSON({
      url: dest.url,
      body: { n },
      flowControl: { key: k, rate: 3, period: "1s" },
    });
  // The key exists once a message named it: one delivery, then the key paused while 7 more
  // arrive, so all 7 are due at the same moment.
  await publish(-1);
  await qstash.waitIdle(8000);
  await client.flowControl.pause(k);
  for (let n = 0; n < 7; n++) await publish(n);
  await until(async () => (await client.flowControl.get(k)).waitListSize === 7, "7 waiting");
  // The period starts at the reset: no earlier than this, on the stand-in's own clock.
  const resetAt = Date.now();
  await client.flowControl.resetRate(k);
  expect(await client.flowControl.get(k)).toMatchObject({
    rateMax: 3,
    rateCount: 0,
    ratePeriod: 1,
  });
  dest.calls.length = 0;
  await client.flowControl.resume(k);
  await until(() => dest.calls.length === 3, "the first period's 3");
  expect((await client.flowControl.get(k)).waitListSize).toBe(4);
  await qstash.waitIdle(8000);
  // A period's deliveries start together, on connections of their own, so they may reach the
  // destination in any order: the groups are compared as sets, in order of the periods.
  const n = dest.calls.map((c) => c.n);
  const group = (from: number, to: number) => n.slice(from, to).sort((a, b) => a - b);
  expect([group(0, 3), group(3, 6), group(6, 7)]).toEqual([[0, 1, 2], [3, 4, 5], [6]]);
  // Three groups, one after the other. The first starts at the resume, which comes a few round
  // trips (more on a loaded machine) into the period the reset began; the second no earlier
  // than that period's end, the third a whole period after the second began. A destination's
  // clock reads each call after it started, so these lower bounds hold however late a call
  // arrives (a gap measured between two groups' arrivals would not).
  const at = dest.calls.map((c) => c.at);
  const first = (from: number, to: number) => Math.min(...at.slice(from, to));
  const last = (from: number, to: number) => Math.max(...at.slice(from, to));
  expect(last(0, 3)).toBeLessThan(first(3, 6));
  expect(first(3, 6) - resetAt).toBeGreaterThanOrEqual(1000);
  expect(last(3, 6)).toBeLessThan(first(6, 7));
  expect(first(6, 7) - resetAt).toBeGreaterThanOrEqual(2000);
});

test("a retry passes the key again; waiting is not an attempt; the DLQ and failure callback keep working", async () => {
  const { qstash, client } = await standIn();
  const dest = await destination((c) => ({ status: c.n === 0 ? 500 : 200, holdMs: 20 }));
  const callback = await destination();
  const k = key();
  for (let n = 0; n < 4; n++)
    await client.publishJSON({
      url: dest.url,
      body: { n },
      retries: 1,
      failureCallback: callback.url,
      flowControl: { key: k, parallelism: 1 },
    });
  await qstash.waitIdle(8000);
  // Message 0 failed twice (1 + 1 retry); the others waited behind it, each delivered once.
  expect(dest.calls.filter((c) => c.n === 0).map((c) => c.retried)).toEqual([0, 1]);
  for (const n of [1, 2, 3])
    expect(dest.calls.filter((c) => c.n === n).map((c) => c.retried)).toEqual([0]);
  expect(dest.maxOpen()).toBe(1);
  const { messages } = await client.dlq.listMessages();
  expect(messages).toHaveLength(1);
  expect(messages[0]?.flowControlKey).toBe(k);
  expect(callback.calls).toHaveLength(1);
});

test("a delivery that times out frees its slot", async () => {
  const { qstash, client } = await standIn();
  const dest = await destination((c) => (c.n === 0 ? "hang" : { status: 200 }));
  const k = key();
  const publishedAt = Date.now();
  for (let n = 0; n < 2; n++)
    await client.publishJSON({
      url: dest.url,
      body: { n },
      retries: 0,
      timeout: "1s",
      flowControl: { key: k, parallelism: 1 },
    });
  await qstash.waitIdle(8000);
  const [first, second] = dest.calls;
  expect([first?.n, second?.n]).toEqual([0, 1]);
  // The slot frees when the first delivery times out, 1 s after it started, itself after the
  // publish: the second starts no earlier. (Measured from the publish, not from the first call's
  // arrival, whose travel a loaded machine lengthens; 10 ms for the timer's and the clock's
  // whole milliseconds.)
  expect((second?.at ?? 0) - publishedAt).toBeGreaterThanOrEqual(990);
  expect(qstash.stats().dlq).toBe(1);
});

test("pause holds every delivery of the key in its waitlist; resume delivers them in order", async () => {
  const { qstash, client } = await standIn();
  const dest = await destination();
  const k = key();
  const publish = (n: number) =>
    client.publishJSON({ url: dest.url, body: { n }, flowControl: { key: k, parallelism: 1 } });
  // A key exists once a message named it; before, QStash has nothing to pause (404).
  await expect(client.flowControl.pause(k)).rejects.toMatchObject({ status: 404 });
  await publish(0);
  await qstash.waitIdle(8000);
  await client.flowControl.pause(k);
  for (const n of [1, 2, 3]) await publish(n);
  await until(async () => (await client.flowControl.get(k)).waitListSize === 3, "3 waiting");
  await new Promise((resolve) => setTimeout(resolve, 200));
  expect(dest.calls.map((c) => c.n)).toEqual([0]);
  expect(await client.flowControl.get(k)).toMatchObject({ isPaused: true, waitListSize: 3 });
  const listed = (await fetch(`${qstash.url}/v2/flowControl`, {
    headers: { authorization: `Bearer ${DEV_TOKEN}` },
  }).then((res) => res.json())) as Array<{ flowControlKey: string; waitListSize: number }>;
  expect(listed).toEqual([expect.objectContaining({ flowControlKey: k, waitListSize: 3 })]);
  await client.flowControl.resume(k);
  await qstash.waitIdle(8000);
  expect(dest.calls.map((c) => c.n)).toEqual([0, 1, 2, 3]);
  expect(await client.flowControl.get(k)).toMatchObject({ isPaused: false, waitListSize: 0 });
});

test("the key follows the latest publish's values unless pinned; unpinned, the pin stays until a publish changes it", async () => {
  const { qstash, client } = await standIn();
  const dest = await destination();
  const k = key();
  const publish = (parallelism: number) =>
    client.publishJSON({ url: dest.url, body: { n: 0 }, flowControl: { key: k, parallelism } });
  await publish(1);
  await publish(3);
  expect((await client.flowControl.get(k)).parallelismMax).toBe(3);
  await client.flowControl.pin(k, { parallelism: 1, rate: 20, period: 120 });
  await publish(5);
  expect(await client.flowControl.get(k)).toMatchObject({
    parallelismMax: 1,
    rateMax: 20,
    ratePeriod: 120,
    isPinnedParallelism: true,
    isPinnedRate: true,
  });
  await client.flowControl.unpin(k, { parallelism: true });
  expect(await client.flowControl.get(k)).toMatchObject({
    parallelismMax: 1,
    isPinnedParallelism: false,
    isPinnedRate: true,
  });
  await publish(4);
  expect(await client.flowControl.get(k)).toMatchObject({ parallelismMax: 4, rateMax: 20 });
  await client.flowControl.resetRate(k);
  expect((await client.flowControl.get(k)).rateCount).toBe(0);
  await qstash.waitIdle(8000);
});

test("invalid values, keys outside QStash's charset and a half-given pair are refused with a 400; nothing is published", async () => {
  const { qstash, client } = await standIn();
  const publish = (headers: Record<string, string>) =>
    fetch(`${qstash.url}/v2/publish/http://127.0.0.1:1/x`, {
      method: "POST",
      headers: { authorization: `Bearer ${DEV_TOKEN}`, ...headers },
      body: "{}",
    }).then(async (res) => [res.status, ((await res.json()) as { error: string }).error]);
  const invalidValue =
    "Upstash-Flow-Control-Value should be either rate=X or parallelism=Y, or both as comma-separated values";
  const fc = (value: string, k = "ok.key_1-a") => ({
    "Upstash-Flow-Control-Key": k,
    "Upstash-Flow-Control-Value": value,
  });
  for (const value of [
    "parallelism=0",
    "rate=-1",
    "rate=1.5",
    "period=1m",
    "parallelism=2, burst=3",
    "parallelism=2, parallelism=3",
    "rate=2, period=8d",
    "rate=2, period=soon",
    "",
  ])
    expect([value, ...(await publish(fc(value)))]).toEqual([value, 400, invalidValue]);
  expect(await publish(fc("parallelism=1", "openai:gpt-4o"))).toEqual([
    400,
    expect.stringMatching(/invalid Upstash-Flow-Control-Key/),
  ]);
  expect(await publish({ "Upstash-Flow-Control-Key": "k" })).toEqual([400, invalidValue]);
  expect(await publish({ "Upstash-Flow-Control-Value": "parallelism=1" })).toEqual([
    400,
    expect.stringMatching(/Upstash-Flow-Control-Key is required/),
  ]);
  // What the docs write is read: names in any case, with or without spaces.
  for (const value of [
    "Rate=20,Parallelism=10",
    "parallelism=5, rate=10, period=1m",
    "rate=2,period=30",
  ])
    expect(await publish(fc(value))).toEqual([200, undefined]);
  const error = await client.flowControl.get("never.named").catch((e: unknown) => e);
  expect(error).toBeInstanceOf(QstashError);
  expect(error).toMatchObject({ status: 404 });
  expect(qstash.stats().published).toBe(3);
});
