import { afterEach, describe, expect, test } from "vitest";
import { log, setLogSink } from "../../lib/log.ts";
import { redactSecrets } from "../../lib/redact.ts";

const jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJlLWJ5dGVz";
const openaiKey = "sk-proj-AbC123_xyz-789";
const sessionKey = "sess-AbCdEf123456";
const signingKey = "sig_7RvLjqfFhXRX8nRP";

describe("one definition of what is never written out", () => {
  test("credential-shaped values are replaced wherever they stand in a text", () => {
    const text = `bearer ${jwt}; key=${openaiKey} (${sessionKey}) signed with ${signingKey}`;
    const out = redactSecrets(text);
    for (const secret of [jwt, openaiKey, sessionKey, signingKey])
      expect(out).not.toContain(secret);
    expect(out).toBe("bearer [redacted]; key=[redacted] ([redacted]) signed with [redacted]");
    expect(redactSecrets("job 3f1c… failed: 500 server_error, skipped 2")).toBe(
      "job 3f1c… failed: 500 server_error, skipped 2",
    );
  });

  let restore: ReturnType<typeof setLogSink> | undefined;
  afterEach(() => {
    if (restore) setLogSink(restore);
  });

  test("a log line carries no secret, also inside an error's message or a nested field", () => {
    const lines: string[] = [];
    restore = setLogSink((line) => lines.push(line));
    log.error("upstream_failed", {
      error: new Error(`401 Incorrect API key provided: ${openaiKey}`),
      detail: { note: `token was ${jwt}` },
      apiKey: "plain-looking-value",
      accessToken: "plain-looking-token",
      completionTokens: 153,
    });
    expect(lines).toHaveLength(1);
    for (const secret of [openaiKey, jwt, "plain-looking-value", "plain-looking-token"])
      expect(lines[0]).not.toContain(secret);
    expect(JSON.parse(lines[0] ?? "{}")).toMatchObject({
      event: "upstream_failed",
      error: { name: "Error", message: "401 Incorrect API key provided: [redacted]" },
      detail: { note: "token was [redacted]" },
      apiKey: "[redacted]",
      accessToken: "[redacted]",
      completionTokens: 153,
    });
  });
});
