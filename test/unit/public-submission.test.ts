import { describe, expect, test } from "vitest";
import { createSubmission } from "../../public/submission.js";

const counter = () => {
  let n = 0;
  return () => `key-${++n}`;
};

describe("one Idempotency-Key per intended submission", () => {
  test("a double click or a retry after a lost answer sends the same key", () => {
    const s = createSubmission(counter());
    expect(s.keyFor("write a haiku")).toBe("key-1");
    expect(s.keyFor("write a haiku")).toBe("key-1");
  });

  test("a new key after a success: the next Generate is a new intention", () => {
    const s = createSubmission(counter());
    s.keyFor("write a haiku");
    s.succeeded();
    expect(s.keyFor("write a haiku")).toBe("key-2");
  });

  test("a new key after an edit (the old key with a new body would be refused)", () => {
    const s = createSubmission(counter());
    s.keyFor("write a haiku");
    s.edited("write a sonnet");
    expect(s.keyFor("write a sonnet")).toBe("key-2");
  });

  test("an edit that comes back to the same text keeps the key", () => {
    const s = createSubmission(counter());
    s.keyFor("write a haiku");
    s.edited("write a haiku");
    expect(s.keyFor("write a haiku")).toBe("key-1");
  });

  test("by default the key is a random UUID", () => {
    const s = createSubmission();
    expect(s.keyFor("x")).toMatch(/^[0-9a-f-]{36}$/);
  });
});
