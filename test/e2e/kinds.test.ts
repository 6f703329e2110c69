/**
 * Extractions end to end, over HTTP, on the whole local stack (the built functions, the QStash
 * stand-in delivering, the fake model answering with Structured Outputs): a success, a refusal, a
 * failure refunded by the rule, a cancel, and a token plan's extraction that holds and captures
 * like a document (docs/DESIGN.md#job-kinds).
 */
import { expect, test } from "vitest";
import { type apiAs, events, newUser, refundEvents, useStack } from "../support/stack.ts";

const fixture = useStack();

const schema = {
  type: "object",
  properties: {
    people: {
      type: "array",
      items: {
        type: "object",
        properties: { name: { type: "string" }, born: { type: ["integer", "null"] } },
        required: ["name", "born"],
        additionalProperties: false,
      },
    },
  },
  required: ["people"],
  additionalProperties: false,
};
const extraction = (text: string) => ({ kind: "extract", input: { text, schema } });

/** An extraction of `text` enqueued, then watched until it ended. */
async function extractionEnded(api: ReturnType<typeof apiAs>, text: string) {
  const created = await api.call("POST", "/api/jobs", extraction(text));
  return api.waitTerminal(created.body.job.id);
}

test("an extraction succeeds: its JSON value fits the schema, 2 units stay spent", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  const created = await api.call("POST", "/api/jobs", extraction("Ada Lovelace, born 1815."));
  expect(created.status).toBe(202);
  expect(created.body.job).toMatchObject({ kind: "extract", hold: 2 });
  const job = await api.waitTerminal(created.body.job.id);
  expect(job).toMatchObject({ status: "succeeded", kind: "extract", captured: 2 });
  expect(Array.isArray(job.output.people)).toBe(true);
  for (const person of job.output.people) {
    expect(typeof person.name).toBe("string");
    expect(person.born === null || Number.isInteger(person.born)).toBe(true);
  }
  expect((await api.usage()).body).toMatchObject({ used: 2, active: 0 });
  expect(await events(stack, job.id)).toEqual(["enqueued", "started", "completed"]);
});

test("a refusal fails model_refused and gives the 2 units back", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  const job = await extractionEnded(api, "[fake:refuse] Ada, 1815");
  expect(job).toMatchObject({
    status: "failed",
    failureReason: "model_refused",
    quotaRefunded: true,
  });
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
  expect(await refundEvents(stack, job.id)).toBe(1);
});

test("output that breaks the schema fails output_invalid, refunded once under the plan's bound", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  const calls = stack.model.calls();
  const job = await extractionEnded(api, "[fake:json_invalid] Ada, 1815");
  expect(job).toMatchObject({
    status: "failed",
    failureReason: "output_invalid",
    quotaRefunded: true,
  });
  expect(stack.model.calls() - calls).toBe(1);
  const usage = await api.usage();
  expect(usage.body).toMatchObject({ used: 0, runningCancelRefunds: { used: 1 } });
  expect(await refundEvents(stack, job.id)).toBe(1);
});

test("canceling a running extraction refunds its 2 units once", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack);
  const created = await api.call("POST", "/api/jobs", extraction("[fake:slow:5000] Ada, 1815"));
  const id = created.body.job.id;
  await api.waitFor(id, (j) => j.status === "running", "running");
  const canceled = await api.cancel(id);
  expect(canceled.body).toMatchObject({ quotaRefunded: true, job: { status: "canceled" } });
  expect((await api.usage()).body).toMatchObject({ used: 0, active: 0 });
  await stack.qstash.waitIdle(10_000);
  expect((await api.job(id)).body.job.status).toBe("canceled");
  expect(await refundEvents(stack, id)).toBe(1);
});

test("a token plan's extraction holds its input bound + the output bound and captures what it used", async () => {
  const { stack } = fixture;
  const { api } = await newUser(stack, "team");
  const created = await api.call("POST", "/api/jobs", extraction("Grace Hopper, born 1906."));
  expect(created.status).toBe(202);
  const hold = created.body.job.hold;
  expect(created.body.job.meter).toBe("tokens");
  expect(created.body.usage.used).toBe(hold);
  const job = await api.waitTerminal(created.body.job.id);
  expect(job.status).toBe("succeeded");
  expect(job.captured).toBeGreaterThan(0);
  expect(job.captured).toBeLessThan(hold);
  expect((await api.usage()).body).toMatchObject({ used: job.captured, held: 0 });
});
