/**
 * The Upstash Redis REST wire format: JSON command arrays in, `{result}` / `{error}` out, with
 * the optional `Upstash-Encoding: base64` result encoding.
 */
import { ReplyError } from "ioredis";

/** A command as sent over the wire, ready for ioredis `callBuffer`. */
export interface WireCommand {
  name: string;
  args: string[];
}

export class WireFormatError extends Error {}

/**
 * Commands that would change the state of the shared connection (or hold it), which Upstash
 * does not offer over REST either.
 */
const UNAVAILABLE = new Set([
  "MULTI",
  "EXEC",
  "DISCARD",
  "WATCH",
  "UNWATCH",
  "SELECT",
  "QUIT",
  "RESET",
  "AUTH",
  "HELLO",
  "CLIENT",
  "MONITOR",
  "SUBSCRIBE",
  "PSUBSCRIBE",
  "SSUBSCRIBE",
  "UNSUBSCRIBE",
  "PUNSUBSCRIBE",
  "SUNSUBSCRIBE",
  "SYNC",
  "PSYNC",
  "SHUTDOWN",
  "REPLICAOF",
  "SLAVEOF",
  "DEBUG",
  // Server administration: it would change the one local redis-server every test shares.
  "CONFIG",
  "MODULE",
  "ACL",
  "SAVE",
  "BGSAVE",
  "BGREWRITEAOF",
  "SWAPDB",
  "FAILOVER",
  "CLUSTER",
  "MIGRATE",
]);

/** Commands that wait for data: on the one shared connection they would stall every request. */
const BLOCKING = new Set([
  "BLPOP",
  "BRPOP",
  "BRPOPLPUSH",
  "BLMOVE",
  "BLMPOP",
  "BZPOPMIN",
  "BZPOPMAX",
  "BZMPOP",
  "WAIT",
  "WAITAOF",
]);

/** XREAD/XREADGROUP block only with a BLOCK option before STREAMS. */
function blocks(args: string[]): boolean {
  for (const arg of args) {
    const word = arg.toUpperCase();
    if (word === "STREAMS") return false;
    if (word === "BLOCK") return true;
  }
  return false;
}

/** Parses one command: a non-empty array of strings, numbers or booleans. */
export function parseCommand(value: unknown): WireCommand {
  if (!Array.isArray(value) || value.length === 0) {
    throw new WireFormatError("ERR a command must be a non-empty JSON array");
  }
  const parts = value.map((part) => {
    if (typeof part === "string") return part;
    if (typeof part === "number" || typeof part === "boolean") return String(part);
    if (part === null) return "";
    return JSON.stringify(part);
  });
  const [first, ...args] = parts as [string, ...string[]];
  // Upper case also keeps ioredis's lower-case reply transformers (hgetall → object) away.
  const name = first.toUpperCase();
  if (UNAVAILABLE.has(name)) {
    throw new WireFormatError(`ERR Command is not available: '${first}'`);
  }
  // Module commands are all `MODULE.COMMAND`: Upstash serves its own (JSON.*, SEARCH.*, VECTOR.*),
  // Debian's redis-server has none. Refused here as Upstash answers an unknown command (400,
  // "ERR unknown command"), saying why, whatever modules a local redis-server happens to load.
  if (name.includes(".")) {
    throw new WireFormatError(
      `ERR unknown command '${first}': Redis module commands (Upstash's JSON.*, SEARCH.*, VECTOR.*) are not served by the local stand-in`,
    );
  }
  if (BLOCKING.has(name) || (/^XREAD(GROUP)?$/.test(name) && blocks(args))) {
    throw new WireFormatError(
      `ERR blocking commands are not served by this stand-in: '${first}' would hold the connection every request shares`,
    );
  }
  return { name, args };
}

/** Parses a pipeline or transaction body: a non-empty array of commands. */
export function parseCommands(value: unknown): WireCommand[] {
  if (!Array.isArray(value) || value.length === 0 || !value.every(Array.isArray)) {
    throw new WireFormatError("ERR a pipeline must be a non-empty JSON array of command arrays");
  }
  return value.map(parseCommand);
}

/**
 * Turns an ioredis `callBuffer` reply into the REST `result`. With base64 every string is
 * base64 except "OK"; numbers and null stay as they are; arrays element-wise, recursively.
 * An error nested in an array (a Lua table holding `redis.error_reply`) becomes its message.
 */
export function encodeResult(value: unknown, base64: boolean): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === "number") return value;
  if (Buffer.isBuffer(value)) return encodeString(value, base64);
  if (typeof value === "string") return encodeString(Buffer.from(value, "utf8"), base64);
  if (Array.isArray(value)) return value.map((item) => encodeResult(item, base64));
  if (value instanceof Error) return encodeString(Buffer.from(value.message, "utf8"), base64);
  if (typeof value === "bigint") return Number(value);
  return value;
}

function encodeString(bytes: Buffer, base64: boolean): string {
  const text = bytes.toString("utf8");
  if (text === "OK") return "OK";
  return base64 ? bytes.toString("base64") : text;
}

/** A reply from Redis itself (wrong type, NOSCRIPT, …), as opposed to a transport failure. */
export function isRedisReplyError(error: unknown): error is Error {
  return error instanceof ReplyError;
}
