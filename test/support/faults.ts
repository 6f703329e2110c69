/**
 * Fault injection at every boundary the app crosses, by decorating the ports lib/ already takes
 * (no change to lib/): the database `Rpc` (by SQL function name), `queue.publishJob`, the model,
 * the Upstash Redis client under the rate limiter / provider gate / alerter, and the alert
 * webhook's `fetch`.
 *
 * Every boundary call has a name: `rpc:<function>`, `publish`, `model`, `redis:<command>`,
 * `webhook`. A fault names the call it hits and what happens there:
 *
 * - `fail`        the call never reaches the far side; it throws as the real client throws
 *                 (DatabaseError status 0, UpstreamError("qstash"), openai APIConnectionError,
 *                 fetch's TypeError);
 * - `hang`        the far side never answers; the client's own timeout fires (DatabaseError
 *                 status 0 abort, openai APIConnectionTimeoutError, TimeoutError);
 * - `lose`        the far side DID it (the transaction committed, the message was queued, the
 *                 model ran and billed) and the response was lost: the caller sees the `fail`
 *                 error anyway. The case that matters most.
 * - `kill-before` / `kill-after`: the function dies between two awaits. The call at that point
 *                 (before: never made; after: made, committed) never resolves, so nothing after
 *                 it runs; `Faults.run` reports the invocation as killed at
 *                 `"before:<name>"` / `"after:<name>"`.
 *
 * @example
 * const faults = new Faults();
 * const jobs = createJobs(faults.rpc(rpc));
 * const r = await faults.run(() => runJob(deps, jobId), [kill("after:rpc:start_job")]);
 * // r = { kind: "killed", at: "after:rpc:start_job" }: the claim committed, the model was never called
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { APIConnectionError, APIConnectionTimeoutError } from "openai";
import type { Rpc } from "../../lib/db.ts";
import { DatabaseError, UpstreamError } from "../../lib/errors.ts";
import type { GenerateOptions, Model } from "../../lib/model.ts";
import type { PublishInput } from "../../lib/queue.ts";

export type FaultAction = "fail" | "hang" | "lose" | "kill-before" | "kill-after";

/** One armed fault: the `nth` (1-based) call named `at` in its scope, and `times` calls after it. */
export interface Fault {
  at: string;
  action: FaultAction;
  /** @default 1 */
  nth?: number;
  /** @default 1 */
  times?: number;
}

/** `fail("rpc:start_job")`: the call throws without reaching the far side. */
export const fail = (at: string, nth = 1, times = 1): Fault => ({ at, action: "fail", nth, times });
/** `hang("publish")`: the far side never answers; the client's timeout fires. */
export const hang = (at: string, nth = 1): Fault => ({ at, action: "hang", nth });
/** `lose("rpc:complete_job")`: done on the far side, the response lost. */
export const lose = (at: string, nth = 1): Fault => ({ at, action: "lose", nth });
/** `kill("after:rpc:start_job")`, `kill("before:model")`: the function dies at that point. */
export function kill(point: string, nth = 1): Fault {
  const m = /^(before|after):(.+)$/.exec(point);
  if (!m?.[2]) throw new Error(`a kill point is "before:<call>" or "after:<call>", got ${point}`);
  return { at: m[2], action: m[1] === "before" ? "kill-before" : "kill-after", nth };
}

/** How one invocation ended. */
export type Outcome<T> =
  | { kind: "returned"; value: T }
  | { kind: "threw"; error: unknown }
  | { kind: "killed"; at: string };

/** Per-invocation state: its faults, what it called, and anything a port wants to read. */
export interface Scope {
  faults: Fault[];
  /** Boundary calls made, in order (`rpc:start_job`, `model`, ...). */
  trace: string[];
  /** Faults that fired, as `"<action> <name>"`. */
  fired: string[];
  /** Free-form per-invocation data for stand-ins (e.g. the model outcome a schedule chose). */
  data: Record<string, unknown>;
  counts: Map<string, number>;
  onKill: (at: string) => void;
  /** Resolves (with the point) when the invocation is killed: a stand-in can stop waiting then. */
  killed?: Promise<string>;
}

const never = <T>(): Promise<T> => new Promise<T>(() => {});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The errors a boundary's real client throws: unreachable, timed out. */
export interface ClientErrors {
  unreachable(): Error;
  timedOut(): Error;
}

export class Faults {
  private readonly als = new AsyncLocalStorage<Scope>();
  /** Faults for calls made outside `run` (or in every scope when `arm`ed). */
  private readonly root: Scope = newScope([], () => {});
  /** How long a `hang` waits before the client's timeout "fires" (kept short in tests). */
  hangMs = 5;
  /** Every boundary call made in any scope, by name. */
  readonly calls = new Map<string, number>();

  /** Arms faults for calls made outside any `run` scope. */
  arm(...faults: Fault[]): void {
    this.root.faults.push(...faults);
  }

  /** Forgets the root scope's faults, trace and counters. */
  reset(): void {
    this.root.faults.length = 0;
    this.root.trace.length = 0;
    this.root.fired.length = 0;
    this.root.counts.clear();
    this.calls.clear();
  }

  /** The scope of the invocation running now (the root scope outside `run`). */
  scope(): Scope {
    return this.als.getStore() ?? this.root;
  }

  /**
   * Runs one invocation (a delivery, an enqueue, a sweep...) with its own faults. Resolves when
   * it returns, throws, or is killed (its own promise then never settles, like a dead function).
   */
  async run<T>(
    fn: () => Promise<T>,
    faults: Fault[] = [],
    data: Record<string, unknown> = {},
  ): Promise<Outcome<T> & { scope: Scope }> {
    let killed!: (at: string) => void;
    const killedAt = new Promise<string>((resolve) => {
      killed = resolve;
    });
    const scope = newScope(
      faults.map((f) => ({ ...f })),
      (at) => killed(at),
    );
    scope.data = data;
    scope.killed = killedAt;
    const running = this.als.run(scope, fn).then(
      (value): Outcome<T> => ({ kind: "returned", value }),
      (error: unknown): Outcome<T> => ({ kind: "threw", error }),
    );
    const outcome = await Promise.race([
      running,
      killedAt.then((at): Outcome<T> => ({ kind: "killed", at })),
    ]);
    return { ...outcome, scope };
  }

  /** The one place a boundary call goes through. */
  async boundary<T>(name: string, call: () => Promise<T>, errors: ClientErrors): Promise<T> {
    const scope = this.scope();
    scope.trace.push(name);
    this.calls.set(name, (this.calls.get(name) ?? 0) + 1);
    const n = (scope.counts.get(name) ?? 0) + 1;
    scope.counts.set(name, n);
    const fault = scope.faults.find(
      (f) => f.at === name && n >= (f.nth ?? 1) && n < (f.nth ?? 1) + (f.times ?? 1),
    );
    if (!fault) return call();
    scope.fired.push(`${fault.action} ${name}`);
    switch (fault.action) {
      case "fail":
        throw errors.unreachable();
      case "hang":
        await sleep(this.hangMs);
        throw errors.timedOut();
      case "lose":
        await call();
        throw errors.unreachable();
      case "kill-before":
        scope.onKill(`before:${name}`);
        return never<T>();
      case "kill-after":
        await call().catch(() => undefined);
        scope.onKill(`after:${name}`);
        return never<T>();
    }
  }

  /** The database port, faults by SQL function name (`rpc:start_job`). */
  rpc(inner: Rpc): Rpc {
    return (fn, args) =>
      this.boundary(`rpc:${fn}`, () => inner(fn, args), {
        unreachable: () =>
          new DatabaseError(`${fn} failed: TypeError: fetch failed`, { fn, status: 0, code: "" }),
        timedOut: () =>
          new DatabaseError(`${fn} failed: AbortError: The operation was aborted due to timeout`, {
            fn,
            status: 0,
            code: "",
          }),
      });
  }

  /** The queue port (`publish`), throwing what lib/queue.ts throws. */
  queue<Q extends { publishJob(input: PublishInput): Promise<unknown> }>(inner: Q): Q {
    const publishJob = (input: PublishInput) =>
      this.boundary("publish", () => inner.publishJob(input), {
        unreachable: () => new UpstreamError("qstash", "publish failed: fetch failed"),
        timedOut: () =>
          new UpstreamError("qstash", "publish failed: The operation was aborted due to timeout"),
      });
    return { ...inner, publishJob } as Q;
  }

  /** The model port (`model`), throwing the real SDK's connection and timeout errors. */
  model<M extends Model>(inner: M): M {
    return {
      ...inner,
      generate: (prompt: string, o: GenerateOptions) =>
        this.boundary("model", () => inner.generate(prompt, o), {
          unreachable: () => new APIConnectionError({ message: "Connection error." }),
          timedOut: () => new APIConnectionTimeoutError(),
        }),
    };
  }

  /**
   * An Upstash Redis client whose single-request commands are boundaries named
   * `redis:<command>` (`redis:get`, `redis:set`, `redis:evalsha`...).
   */
  redis<R extends object>(inner: R): R {
    return new Proxy(inner, {
      get: (target, prop, receiver) => {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== "function" || typeof prop !== "string" || !REDIS_COMMANDS.has(prop))
          return value;
        return (...args: unknown[]) =>
          this.boundary(
            `redis:${prop.toLowerCase()}`,
            () => Promise.resolve(value.apply(target, args)),
            {
              unreachable: () => new TypeError("fetch failed"),
              timedOut: () =>
                new DOMException("The operation was aborted due to timeout", "TimeoutError"),
            },
          );
      },
    });
  }

  /** A `fetch` (the alert webhook's) whose calls are the boundary `name`. */
  fetch(name = "webhook", inner: typeof fetch = (i, init) => globalThis.fetch(i, init)) {
    return ((input: Parameters<typeof fetch>[0], init?: RequestInit) =>
      this.boundary(name, () => inner(input, init), {
        unreachable: () => new TypeError("fetch failed"),
        timedOut: () =>
          new DOMException("The operation was aborted due to timeout", "TimeoutError"),
      })) as typeof fetch;
  }
}

/** Redis commands that are one request each (pipeline/multi builders pass through untouched). */
const REDIS_COMMANDS = new Set([
  "get",
  "set",
  "hincrby",
  "hgetall",
  "zincrby",
  "zadd",
  "zrange",
  "zrem",
  "zcard",
  "incr",
  "expire",
  "del",
  "eval",
  "evalsha",
  "scriptLoad",
  "ping",
  "exists",
  "pexpireat",
]);

function newScope(faults: Fault[], onKill: (at: string) => void): Scope {
  return { faults, trace: [], fired: [], data: {}, counts: new Map(), onKill };
}
