import { afterEach, beforeEach } from "vitest";
import { type Sink, setLogSink } from "../../lib/log.ts";

/**
 * The log lines each test of the calling file writes: the array is emptied and the sink set
 * before each test, the previous sink put back after it. Call it at the top of a test file.
 */
export function captureLogLines(): string[] {
  const lines: string[] = [];
  let previous: Sink | undefined;
  beforeEach(() => {
    lines.length = 0;
    previous = setLogSink((line) => lines.push(line));
  });
  afterEach(() => {
    if (previous) setLogSink(previous);
  });
  return lines;
}
