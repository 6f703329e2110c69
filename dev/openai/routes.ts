/**
 * The fake's HTTP surface: the model endpoints (authorization, the catalogue, the request's
 * parsing, the failure it is to meet), the model list, and the load the provider saw.
 */
import { isRecord, parseChatRequest, parseResponsesRequest } from "./answers.ts";
import { answerCall } from "./call.ts";
import { modelObject, retired } from "./catalogue.ts";
import { control } from "./control.ts";
import {
  type FailKind,
  failureReply,
  flexNotSupported,
  flexUnavailable,
  httpTwin,
  incorrectKey,
  invalidUrl,
  MID_STREAM_KINDS,
  type MidStreamKind,
  markerFailure,
  missingKey,
  modelNotFound,
  unparsableBody,
} from "./errors.ts";
import { reply, send } from "./replies.ts";
import type { FakeState } from "./state.ts";
import type { MidStream } from "./stream.ts";

export const MODEL_ROUTES = new Set(["/v1/chat/completions", "/v1/responses"]);

export async function handle(state: FakeState, request: Request): Promise<Response> {
  const signal = request.signal; // taken first, so a client that leaves early is seen
  const path = new URL(request.url).pathname.replace(/\/+$/, "");
  const text = await request.text();
  if (path.startsWith("/__fake/")) return control(state, request.method, path, text);
  const listing = request.method === "GET" && /^\/v1\/models(\/[^/]+)?$/.test(path);
  if (!listing && (!MODEL_ROUTES.has(path) || request.method !== "POST"))
    return reply(invalidUrl(request.method, path));
  if (!listing) state.calls += 1;
  if (!/^Bearer \S+/.test(request.headers.get("authorization") ?? "")) return reply(missingKey);
  const apiKey = (request.headers.get("authorization") ?? "").slice("Bearer ".length).trim();
  if (state.revoked.has(apiKey)) return reply(incorrectKey(apiKey));
  if (listing) return models(state, decodeURIComponent(path.slice("/v1/models/".length)));

  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return reply(unparsableBody);
  }
  if (!isRecord(body)) return reply(unparsableBody);
  const prompt =
    path === "/v1/chat/completions" ? parseChatRequest(body) : parseResponsesRequest(body);
  if ("status" in prompt) return reply(prompt);
  const served = state.serving(prompt.model);
  if (!served) return reply(modelNotFound(prompt.model, state.catalogue.has(prompt.model)));
  if (prompt.serviceTier === "flex" && !served.tiers.includes("flex"))
    return reply(flexNotSupported(prompt.model));
  // Flex capacity is OpenAI's, not a failure of this request: it leaves the queue alone.
  if (
    prompt.serviceTier === "flex" &&
    (!state.flexAvailable || prompt.all.includes("[fake:flex_unavailable]"))
  )
    return reply(flexUnavailable());
  const failure = state.queue.shift() ?? markerFailure(prompt.all);
  let midStream: MidStream | null = null;
  if (failure?.kind === "slow") {
    // The client left (or the fake closed): nobody reads this answer.
    if (!(await delay(state, failure.delayMs ?? 10_000, signal))) return new Response(null);
  } else if (failure && isMidStream(failure.kind)) {
    // Inside a stream; a call that does not stream fails as the same error over HTTP would
    // (a quota as its 429, a prompt too long as its 400), else with a 500.
    if (!prompt.stream) return reply(failureReply({ kind: httpTwin(failure.code) }, prompt.model));
    midStream = {
      kind: failure.kind,
      afterTokens: failure.afterTokens ?? 3,
      code:
        failure.code !== undefined
          ? failure.code
          : failure.kind === "stream_error"
            ? null
            : "server_error",
    };
  } else if (failure) {
    const kind = failure.kind as Exclude<FailKind, "slow" | MidStreamKind>;
    return reply(failureReply({ ...failure, kind }, prompt.model, apiKey, prompt.api));
  }
  return answerCall(state, prompt, served, midStream, signal);
}

/** `GET /v1/models` (a list, retired models left out) and `GET /v1/models/{id}`. */
function models(state: FakeState, id: string): Response {
  const today = state.now();
  if (id === "")
    return send(200, {
      object: "list",
      data: [...state.catalogue.values()].filter((m) => !retired(m, today)).map(modelObject),
    });
  const m = state.serving(id);
  return m ? send(200, modelObject(m)) : reply(modelNotFound(id, state.catalogue.has(id)));
}

/** Waits `ms`, resolving false early if the client disconnects or the fake closes. */
function delay(state: FakeState, ms: number, signal: AbortSignal): Promise<boolean> {
  const controller = new AbortController();
  state.inFlight.add(controller);
  const gone = AbortSignal.any([signal, controller.signal]);
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => done(true), ms);
    const onAbort = () => done(false);
    const done = (completed: boolean) => {
      clearTimeout(timer);
      gone.removeEventListener("abort", onAbort);
      state.inFlight.delete(controller);
      resolve(completed && !gone.aborted);
    };
    if (gone.aborted) return done(false);
    gone.addEventListener("abort", onAbort);
  });
}

/**
 * The provider's view of the load: a model request is open from its arrival until its answer
 * is sent (a stream: its last byte, or the client leaving), whatever the answer.
 */
export async function measured(state: FakeState, request: Request): Promise<Response> {
  if (
    request.method !== "POST" ||
    !MODEL_ROUTES.has(new URL(request.url).pathname.replace(/\/+$/, ""))
  )
    return handle(state, request);
  state.concurrent++;
  state.maxConcurrent = Math.max(state.maxConcurrent, state.concurrent);
  state.startedAt.push(Date.now());
  if (state.startedAt.length > 10_000) state.startedAt.shift();
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    state.concurrent--;
  };
  try {
    const response = await handle(state, request);
    if (!response.body) {
      close();
      return response;
    }
    const reader = response.body.getReader();
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            close();
            controller.close();
          } else controller.enqueue(value);
        } catch (error) {
          close();
          controller.error(error);
        }
      },
      cancel(reason) {
        close();
        return reader.cancel(reason);
      },
    });
    return new Response(body, { status: response.status, headers: response.headers });
  } catch (error) {
    close();
    throw error;
  }
}

const isMidStream = (kind: FailKind): kind is MidStreamKind =>
  (MID_STREAM_KINDS as readonly string[]).includes(kind);
