/**
 * A synchronous task with a deadline: it runs under `node:vm`'s `timeout`, so V8 terminates the
 * running JavaScript once the time is up (a watchdog thread, `TerminateExecution`), whatever the
 * task is doing. The task is a function of this realm called from the context's script: the
 * deadline covers everything it runs, and no JavaScript can catch the termination.
 *
 * For pure, synchronous work only (an output's check): a task cut short leaves whatever state it
 * was changing half-changed, so it must change none that outlives it.
 */
import vm from "node:vm";

export type Within<T> = { ok: true; value: T } | { ok: false };

let context: vm.Context | undefined;
let script: vm.Script | undefined;

/**
 * `task()`, or `{ ok: false }` when it ran past `ms` milliseconds (it was stopped there).
 * A throw from the task is rethrown.
 * @example within(50, () => validate(value)) // { ok: true, value: true }
 */
export function within<T>(ms: number, task: () => T): Within<T> {
  context ??= vm.createContext({ task: undefined });
  script ??= new vm.Script("task()", { filename: "lib/kinds/deadline.ts" });
  context.task = task;
  try {
    return { ok: true, value: script.runInContext(context, { timeout: ms }) as T };
  } catch (error) {
    if ((error as { code?: unknown } | null)?.code === "ERR_SCRIPT_EXECUTION_TIMEOUT") {
      return { ok: false };
    }
    throw error;
  } finally {
    context.task = undefined;
  }
}
