/** setTimeout caps at ~24.8 days (2^31-1 ms); longer waits (a 1-year delay) are chained. */
const MAX_TIMEOUT = 2 ** 31 - 1;

export interface Timer {
  cancel(): void;
}

export function after(ms: number, fn: () => void): Timer {
  let handle: ReturnType<typeof setTimeout>;
  const arm = (remaining: number) => {
    handle = setTimeout(
      () => (remaining > MAX_TIMEOUT ? arm(remaining - MAX_TIMEOUT) : fn()),
      Math.max(0, Math.min(remaining, MAX_TIMEOUT)),
    );
  };
  arm(ms);
  return { cancel: () => clearTimeout(handle) };
}
