/**
 * What never leaves the process in a log line, an alert or an error message: the one
 * definition lib/log.ts, lib/alerts.ts and lib/model.ts share.
 */

/**
 * Field names whose values could be credentials or user content: dropped, whatever the value.
 * A name ending in "tokens" is a count of model tokens (`completionTokens`), not a credential.
 */
export const SENSITIVE_KEY =
  /(token(?!s$)|secret|password|authorization|api_?key|key$|prompt|output|signature|cookie)/i;

/** Values that look like a credential wherever they stand: a JWT, an OpenAI key, a signing key. */
const SECRET_VALUE = /\b(eyJ[\w-]{10,}\.[\w-]+\.[\w-]+|(?:sk|sess)-[\w*-]{6,}|sig_\w{8,})/g;

/** `text` with every credential-shaped value replaced by `[redacted]`. */
export function redactSecrets(text: string): string {
  return text.replace(SECRET_VALUE, "[redacted]");
}
