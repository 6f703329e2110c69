/**
 * Wall-clock bounds the tests hold the app to. Each is about three times the worst a loaded
 * 2-core run measured, so a busy machine does not fail it, while the fault it guards against
 * still does: that costs ten times as long, or forever.
 */

/**
 * A cancel cuts a streaming model call: the worker hears of it at its next progress write
 * (PROGRESS_INTERVAL_MS, 1 s) and aborts the call. Measured 63–946 ms cancel → cut on a
 * loaded machine; an uncut call runs to its bound (25 s and more in these tests).
 */
export const CANCEL_CUT_MS = 3_000;

/** Tokens a 50-ms-a-token fake can stream in that time: a cut call's most after its cancel. */
export const TOKENS_BY_CUT_AT_50_MS = CANCEL_CUT_MS / 50;
