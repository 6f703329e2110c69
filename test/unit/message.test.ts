/**
 * The job message's codec (lib/message.ts): what a publisher sends is what the worker route and
 * the failure callback read back, malformed bodies are refused with the codes the routes answer
 * today (400 invalid_body, 400 invalid_callback), and no other module builds, reads or names
 * the message.
 */
import { randomUUID } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import { HttpError } from "../../lib/errors.ts";
import {
  decodeDelivery,
  decodeSourceBody,
  dedupId,
  deliveryDedupId,
  encodeMessage,
  messageOf,
} from "../../lib/message.ts";
import { decodeFailureCallback } from "../../lib/queue.ts";

const job = () => ({ id: randomUUID(), publish_seq: 3 });
const b64 = (s: string) => Buffer.from(s).toString("base64");
/** A failure callback as QStash sends it, around a source body. */
const callback = (sourceBody: string) =>
  JSON.stringify({ status: 503, retried: 3, maxRetries: 3, sourceBody });

describe("the job message", () => {
  test("round trip: the published body decodes to the job's id (worker) and its id and seq (callback)", () => {
    const j = job();
    const m = messageOf(j);
    expect(m).toEqual({ jobId: j.id, seq: 3, dedupId: `job-${j.id}-3` });
    const wire = JSON.stringify(encodeMessage(m));
    expect(JSON.parse(wire)).toEqual({ jobId: j.id, seq: 3 });
    expect(decodeDelivery(wire)).toBe(j.id);
    expect(decodeSourceBody(b64(wire))).toEqual({ jobId: j.id, seq: 3 });
    expect(decodeFailureCallback(callback(b64(wire)))).toMatchObject({ jobId: j.id, seq: 3 });
  });

  test("the callback reads an upper-case id as the job's (lower-case) id; a message without seq as seq null", () => {
    const id = randomUUID();
    expect(decodeSourceBody(b64(JSON.stringify({ jobId: id.toUpperCase() })))).toEqual({
      jobId: id,
      seq: null,
    });
  });

  test("dedup ids: the job's current message, and one per delivery attempt (no ':' or spaces)", () => {
    const j = job();
    expect(dedupId(j)).toBe(`job-${j.id}-3`);
    expect(deliveryDedupId(j, "ab:c d/e")).toBe(`job-${j.id}-3-after-ab_c_d_e`);
    expect(deliveryDedupId(j, null)).toBe(`job-${j.id}-3-after-unknown`);
    expect(deliveryDedupId(j, "x")).not.toBe(dedupId(j));
  });

  test.each([
    ["not JSON", "{jobId"],
    ["no jobId", JSON.stringify({ hello: "world" })],
    ["a jobId that is not a UUID", JSON.stringify({ jobId: "job-1" })],
    ["a numeric jobId", JSON.stringify({ jobId: 42 })],
    ["null", "null"],
    ["an array", JSON.stringify([randomUUID()])],
  ])("a worker delivery of %s: 400 invalid_body (as before the codec)", (_, raw) => {
    let thrown: unknown;
    try {
      decodeDelivery(raw);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(HttpError);
    expect(thrown).toMatchObject({
      status: 400,
      code: "invalid_body",
      message: 'The delivery body must be {"jobId": "<uuid>"}.',
    });
  });

  test("a worker delivery reads only the id: a seq it cannot read does not refuse it", () => {
    const id = randomUUID();
    expect(decodeDelivery(JSON.stringify({ jobId: id, seq: "x" }))).toBe(id);
  });

  test.each([
    ["seq 0", { seq: 0 }],
    ["seq as a string", { seq: "1" }],
    ["a fractional seq", { seq: 1.5 }],
    ["a seq past 2^31-1", { seq: 2_147_483_648 }],
    ["no jobId", { jobId: undefined, seq: 1 }],
  ])("a failure callback whose message has %s: 400 invalid_callback", (_, change) => {
    const source = b64(JSON.stringify({ jobId: randomUUID(), ...change }));
    expect(decodeSourceBody(source)).toBeNull();
    expect(() => decodeFailureCallback(callback(source))).toThrowError(
      expect.objectContaining({ status: 400, code: "invalid_callback" }),
    );
  });
});

describe("one codec", () => {
  const root = new URL("../../", import.meta.url);
  const files = ["lib", "api"].flatMap((dir) =>
    readdirSync(new URL(dir, root))
      .filter((f) => f.endsWith(".ts") && f !== "message.ts")
      .map((f) => `${dir}/${f}`),
  );

  /** What building, reading or naming the message by hand looks like. */
  const BY_HAND: Array<[string, RegExp]> = [
    ["builds a dedup id", /`job-\$\{/],
    ["builds the body", /body:\s*\{\s*jobId/],
    ["reads seq off a parsed body", /\.seq\s*\?\?|"seq" in /],
    ["parses a delivery by hand", /"jobId" in /],
  ];

  test("no module but lib/message.ts builds, reads or names the job message", () => {
    const found = files.flatMap((file) => {
      const text = readFileSync(new URL(file, root), "utf8");
      return BY_HAND.filter(([, re]) => re.test(text)).map(([what]) => `${file} ${what}`);
    });
    expect(found).toEqual([]);
  });

  test("the check has teeth: the hand-written versions it replaced are caught", () => {
    const before = [
      // biome-ignore lint/suspicious/noTemplateCurlyInString: the source text being matched
      "dedupId: `${dedupId(claim.job)}-after-x`, id: `job-${job.id}-${job.publish_seq}`",
      "body: { jobId, seq },",
      "seq: source.seq ?? null,",
      'typeof body === "object" && "jobId" in body',
    ];
    for (const text of before)
      expect(
        BY_HAND.some(([, re]) => re.test(text)),
        text,
      ).toBe(true);
  });
});
