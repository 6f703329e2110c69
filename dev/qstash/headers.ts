/** Header helpers: QStash shows header names in Go's canonical form and values as lists. */

export type HeaderList = Array<[name: string, value: string]>;
export type HeaderMap = Record<string, string[]>;

/** "content-type" → "Content-Type", as Go's net/http prints it. */
export function canonicalName(name: string): string {
  return name
    .toLowerCase()
    .split("-")
    .map((part) => (part ? part[0]?.toUpperCase() + part.slice(1) : part))
    .join("-");
}

export function toHeaderMap(headers: HeaderList | Headers): HeaderMap {
  const map: HeaderMap = {};
  for (const [name, value] of headers) {
    const key = canonicalName(name);
    const values = map[key] ?? [];
    values.push(value);
    map[key] = values;
  }
  return map;
}

/** Connection-level headers a proxy must not pass on (and fetch refuses to set). */
const hopByHop = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "host",
  "content-length",
  "proxy-connection",
]);

export function isForwardable(name: string): boolean {
  return !hopByHop.has(name.toLowerCase());
}

/** Every header starting with `prefix` (case-insensitive), with the prefix stripped. */
export function stripPrefixed(headers: Headers, prefix: string): HeaderList {
  const out: HeaderList = [];
  const lower = prefix.toLowerCase();
  for (const [name, value] of headers) {
    if (name.startsWith(lower) && name.length > lower.length) {
      const stripped = name.slice(lower.length);
      if (isForwardable(stripped)) out.push([stripped, value]);
    }
  }
  return out;
}
