/**
 * What the fake holds between requests: the counts `stats()` reports, the queued failures, the
 * switches the tests and the control API set (chunk pause, flex, reasoning, revoked keys, moved
 * shutdown dates), and the requests open now. `reset` puts it back to the options'.
 */
import {
  type CatalogueModel,
  catalogueWith,
  checkDate,
  parseShutdownDates,
  retired,
  type ShutdownDates,
} from "./catalogue.ts";
import { FAIL_KINDS, type FailKind, type FailOptions, type Failure } from "./errors.ts";

/** A reasoning model's silent start: hidden tokens spent over `ms` before the first visible one. */
export interface FakeReasoning {
  tokens: number;
  ms: number;
}

/** One answered model request, as `stats()` lists it. */
export interface FakeRequest {
  api: "chat" | "responses";
  stream: boolean;
  serviceTier: string | null;
  safetyIdentifier: string | null;
  /** Whether instructions came (Responses `instructions`, a Chat Completions system or developer message). */
  instructions: boolean;
  /** The `json_schema` format's name, `json_object`, or null for text. */
  format: string | null;
  /** The input tokens billed (instructions included). */
  promptTokens: number;
  /** Of the prompt tokens, those billed as cached input (`[fake:cached:N]`). */
  cachedTokens: number;
  maxCompletionTokens: number | null;
  /** Visible completion tokens. */
  completionTokens: number;
  /** Hidden reasoning tokens (billed as output too). */
  reasoningTokens: number;
  /**
   * Every output token billed: visible and reasoning, whether or not the client saw them (a
   * stream cut short reports no usage, yet what was generated is billed).
   */
  outputTokens: number;
  model: string;
  /** The tier that served it (what the response reports), not what was asked (`serviceTier`). */
  servedTier: string;
  finishReason: string;
}

export interface FakeStats {
  calls: number;
  completionTokens: number;
  streamedTokens: number;
  requests: FakeRequest[];
  /** Model requests open now: arrived, and their answer (a whole stream) not yet sent or cut. */
  concurrent: number;
  /** The most model requests open at once. */
  maxConcurrent: number;
  /** When each of the last 10,000 model requests arrived (ms since the epoch), in order. */
  startedAt: number[];
}

export interface FakeStateOptions {
  chunkMs?: number;
  shutdownDates?: ShutdownDates;
  now?: () => Date;
}

export class FakeState {
  calls = 0;
  completionTokens = 0;
  streamedTokens = 0;
  requests: FakeRequest[] = [];
  chunkMs: number;
  queue: Failure[] = [];
  flexAvailable = true;
  reasoning: FakeReasoning | null = null;
  catalogue: Map<string, CatalogueModel>;
  readonly now: () => Date;
  readonly revoked = new Set<string>();
  /** Waits in progress (a `slow` failure), aborted when the fake closes. */
  readonly inFlight = new Set<AbortController>();
  concurrent = 0;
  maxConcurrent = 0;
  startedAt: number[] = [];
  private readonly startDates: ShutdownDates;
  private moved: ShutdownDates;

  constructor(private readonly options: FakeStateOptions) {
    this.chunkMs = options.chunkMs ?? 0;
    this.startDates =
      options.shutdownDates ?? parseShutdownDates(process.env.FAKE_OPENAI_SHUTDOWN_DATES);
    this.moved = { ...this.startDates };
    this.catalogue = catalogueWith(this.moved);
    this.now = options.now ?? (() => new Date());
  }

  failNext(kind: FailKind, count = 1, opts: FailOptions = {}): void {
    if (!FAIL_KINDS.includes(kind)) throw new Error(`unknown fail kind: ${kind}`);
    if (!Number.isInteger(count) || count < 1)
      throw new Error(`count must be a positive integer, got ${count}`);
    for (let i = 0; i < count; i++) this.queue.push({ kind, ...opts });
  }

  reset(): void {
    this.calls = 0;
    this.completionTokens = 0;
    this.streamedTokens = 0;
    this.requests = [];
    this.chunkMs = this.options.chunkMs ?? 0;
    this.queue = [];
    this.revoked.clear();
    this.flexAvailable = true;
    this.reasoning = null;
    this.moved = { ...this.startDates };
    this.catalogue = catalogueWith(this.moved);
    this.maxConcurrent = this.concurrent;
    this.startedAt = [];
  }

  setReasoning(r: FakeReasoning | null): void {
    if (r && !(Number.isInteger(r.tokens) && r.tokens >= 0 && Number.isFinite(r.ms) && r.ms >= 0))
      throw new Error("reasoning must be {tokens: whole number >= 0, ms: >= 0}");
    this.reasoning = r;
  }

  answered(r: FakeRequest): void {
    this.requests.push(r);
    if (this.requests.length > 1000) this.requests.shift();
  }

  stats(): FakeStats {
    return {
      calls: this.calls,
      completionTokens: this.completionTokens,
      streamedTokens: this.streamedTokens,
      requests: [...this.requests],
      concurrent: this.concurrent,
      maxConcurrent: this.maxConcurrent,
      startedAt: [...this.startedAt],
    };
  }

  setShutdownDate(id: string, date: string | null): void {
    this.moved = { ...this.moved, [id]: checkDate(date) };
    this.catalogue = catalogueWith(this.moved);
  }

  /** The model as served today: undefined when unknown or retired. */
  serving(id: string): CatalogueModel | undefined {
    const m = this.catalogue.get(id);
    return m && !retired(m, this.now()) ? m : undefined;
  }

  setChunkMs(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) throw new Error(`chunkMs must be >= 0, got ${ms}`);
    this.chunkMs = ms;
  }
}
