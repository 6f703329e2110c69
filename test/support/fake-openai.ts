import { afterAll, beforeAll } from "vitest";
import { type FakeOpenAI, startFakeOpenAI } from "../../dev/openai/index.ts";
import { freePort } from "./ports.ts";

/**
 * The fake model (dev/openai) the calling test file shares: started on a free port before its
 * first test, closed after its last. The object is filled in when it starts, so read it inside
 * tests and hooks.
 */
export function useFakeOpenAI(options: { now?: () => Date } = {}): FakeOpenAI {
  const fake = {} as FakeOpenAI;
  let started: FakeOpenAI | undefined;
  beforeAll(async () => {
    started = await startFakeOpenAI({ port: await freePort(), ...options });
    Object.assign(fake, started);
  });
  afterAll(async () => {
    await started?.close();
  });
  return fake;
}
