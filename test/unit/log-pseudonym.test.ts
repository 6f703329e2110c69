/**
 * How a log line names a user (lib/log-pseudonym.ts): the database's pseudonym, asked once per
 * instance; a lookup that fails gives no user and a warning that names no one, never a throw.
 */
import { randomUUID } from "node:crypto";
import { expect, test } from "vitest";
import { createRpc } from "../../lib/db.ts";
import { createJobs } from "../../lib/jobs.ts";
import { forgetPseudonym, userPseudonym } from "../../lib/log-pseudonym.ts";
import { captureLogLines } from "../support/log-lines.ts";
import { freePort } from "../support/ports.ts";

const lines = captureLogLines();

test("the database unreachable: no pseudonym, one warning without the user id, no throw", async () => {
  const jobs = createJobs(
    createRpc({ url: `http://127.0.0.1:${await freePort()}`, serverKey: "k", timeoutMs: 2000 }),
  );
  const user = randomUUID();
  expect(await userPseudonym(jobs, user)).toBeNull();
  expect(lines.filter((l) => l.includes('"event":"user_pseudonym_unavailable"'))).toHaveLength(1);
  expect(lines.join("\n")).not.toContain(user);
});

test("asked once per user and instance; forgotten at the erasure; no account, no pseudonym", async () => {
  const asked: string[] = [];
  const jobs = {
    pseudonym: async (userId: string) => {
      asked.push(userId);
      return userId === "gone"
        ? { outcome: "user_not_found" as const }
        : { outcome: "pseudonym" as const, pseudonym: `u-${asked.length}` };
    },
  };
  const user = randomUUID();
  expect(await userPseudonym(jobs, user)).toBe("u-1");
  expect(await userPseudonym(jobs, user)).toBe("u-1");
  expect(asked).toEqual([user]);
  forgetPseudonym(user);
  expect(await userPseudonym(jobs, user)).toBe("u-2");
  expect(await userPseudonym(jobs, "gone")).toBeNull();
  expect(await userPseudonym(jobs, "gone")).toBeNull();
  expect(asked).toEqual([user, user, "gone", "gone"]);
});
