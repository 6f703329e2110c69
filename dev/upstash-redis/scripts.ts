/**
 * Lua script flags that Upstash accepts and open-source Redis 7.0 does not.
 *
 * @upstash/ratelimit's scripts start with `#!lua flags=allow-key-locking`, an Upstash-only flag:
 * a stock `redis-server` refuses them with "ERR Unexpected flag in script shebang". So the
 * stand-in drops flags Redis does not know before EVAL / SCRIPT LOAD, and remembers which SHA1
 * the client computed (over the original text) for the script Redis stored (the rewritten one),
 * so the client's EVALSHA hits instead of falling back to EVAL on every call.
 */
import { createHash } from "node:crypto";
import type { WireCommand } from "./encoding.ts";

const REDIS_FLAGS = new Set([
  "no-writes",
  "allow-oom",
  "allow-stale",
  "no-cluster",
  "allow-cross-slot-keys",
]);

/** A command to send to Redis and how to map its reply back into the client's terms. */
export interface Translated {
  command: WireCommand;
  reply(value: unknown): unknown;
}

export class ScriptTranslator {
  /** SHA1 of the client's script text → SHA1 of what Redis stored. */
  readonly #redisSha = new Map<string, string>();

  translate(command: WireCommand): Translated {
    const { name, args } = command;
    const same = { command, reply: (value: unknown) => value };
    if ((name === "EVAL" || name === "EVAL_RO") && args[0] !== undefined) {
      return {
        command: { name, args: [this.#rewrite(args[0]), ...args.slice(1)] },
        reply: same.reply,
      };
    }
    if ((name === "EVALSHA" || name === "EVALSHA_RO") && args[0] !== undefined) {
      const sha = this.#redisSha.get(args[0].toLowerCase()) ?? args[0];
      return { command: { name, args: [sha, ...args.slice(1)] }, reply: same.reply };
    }
    const sub = args[0]?.toUpperCase();
    if (name === "SCRIPT" && sub === "LOAD" && args[1] !== undefined) {
      // Redis answers with the SHA1 of the text it stored; the client expects its own.
      const clientSha = sha1(args[1]);
      return {
        command: { name, args: ["LOAD", this.#rewrite(args[1])] },
        reply: () => Buffer.from(clientSha),
      };
    }
    if (name === "SCRIPT" && sub === "EXISTS") {
      const shas = args.slice(1).map((sha) => this.#redisSha.get(sha.toLowerCase()) ?? sha);
      return { command: { name, args: ["EXISTS", ...shas] }, reply: same.reply };
    }
    return same;
  }

  #rewrite(script: string): string {
    const match = /^#!lua[ \t]+flags=([^\r\n]*)/.exec(script);
    if (!match?.[1]) return script;
    const flags = match[1].split(",").map((flag) => flag.trim());
    const known = flags.filter((flag) => REDIS_FLAGS.has(flag));
    if (known.length === flags.length) return script;
    const rewritten = `#!lua${known.length ? ` flags=${known.join(",")}` : ""}${script.slice(match[0].length)}`;
    this.#redisSha.set(sha1(script), sha1(rewritten));
    return rewritten;
  }
}

function sha1(text: string): string {
  return createHash("sha1").update(text, "utf8").digest("hex");
}
