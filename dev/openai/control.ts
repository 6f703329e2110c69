/** The control API other processes drive the fake with (no auth): `/__fake/…`. */
import { isRecord } from "./answers.ts";
import { type CatalogueModel, modelObject } from "./catalogue.ts";
import type { FailKind, FailOptions } from "./errors.ts";
import { send } from "./replies.ts";
import type { FakeState } from "./state.ts";

export function control(state: FakeState, method: string, path: string, text: string): Response {
  if (method === "GET" && path === "/__fake/stats") return send(200, state.stats());
  if (method === "POST" && path === "/__fake/stream") {
    try {
      const body: unknown = JSON.parse(text || "{}");
      if (!isRecord(body) || typeof body.chunkMs !== "number")
        throw new Error('body must be {"chunkMs": <ms>}');
      state.setChunkMs(body.chunkMs);
      return send(200, { chunkMs: state.chunkMs });
    } catch (error) {
      return send(400, { error: (error as Error).message });
    }
  }
  if (method === "POST" && path === "/__fake/flex") {
    const body: unknown = JSON.parse(text || "{}");
    if (!isRecord(body) || typeof body.available !== "boolean")
      return send(400, { error: 'body must be {"available": <boolean>}' });
    state.flexAvailable = body.available;
    return send(200, { available: state.flexAvailable });
  }
  if (method === "POST" && path === "/__fake/reasoning") {
    try {
      const body: unknown = JSON.parse(text || "{}");
      if (!isRecord(body) || typeof body.tokens !== "number" || typeof body.ms !== "number")
        throw new Error('body must be {"tokens": <n>, "ms": <ms>}');
      state.setReasoning({ tokens: body.tokens, ms: body.ms });
      return send(200, state.reasoning);
    } catch (error) {
      return send(400, { error: (error as Error).message });
    }
  }
  if (method === "POST" && path === "/__fake/models") {
    try {
      const body: unknown = JSON.parse(text || "{}");
      if (!isRecord(body) || typeof body.id !== "string" || !("shutdownDate" in body))
        throw new Error('body must be {"id": <model>, "shutdownDate": "YYYY-MM-DD" | null}');
      state.setShutdownDate(body.id, body.shutdownDate as string | null);
      return send(200, modelObject(state.catalogue.get(body.id) as CatalogueModel));
    } catch (error) {
      return send(400, { error: (error as Error).message });
    }
  }
  if (method === "POST" && path === "/__fake/reset") {
    state.reset();
    return send(200, { ok: true });
  }
  if (method === "POST" && path === "/__fake/fail") {
    try {
      const body: unknown = JSON.parse(text || "{}");
      if (!isRecord(body)) throw new Error("body must be a JSON object");
      const number = (value: unknown) => (typeof value === "number" ? value : undefined);
      const opts: FailOptions = {};
      if (number(body.retryAfterSeconds) !== undefined)
        opts.retryAfterSeconds = number(body.retryAfterSeconds);
      if (number(body.delayMs) !== undefined) opts.delayMs = number(body.delayMs);
      if (number(body.afterTokens) !== undefined) opts.afterTokens = number(body.afterTokens);
      if (typeof body.code === "string" || body.code === null) opts.code = body.code;
      state.failNext(body.kind as FailKind, number(body.count) ?? 1, opts);
      return send(200, { queued: state.queue.length });
    } catch (error) {
      return send(400, { error: (error as Error).message });
    }
  }
  return send(404, { error: `no control route ${method} ${path}` });
}
