/**
 * dev/README.md, what the stand-ins serve: the "- Refuses..." item of one stand-in, as a reader
 * reads it, and its code spans. test/dev/qstash.test.ts and test/dev/upstash-redis.test.ts probe
 * every header, path and command the item names, so the list and the stand-ins cannot part.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { root } from "../../dev/postgres/migrate.ts";

/** What the stand-ins serve and refuse, moved out of README.md to sit beside them. */
export const STAND_INS = join(root, "dev", "README.md");

/** The "- Refuses..." item under the `**<service>**` paragraph, unwrapped to one line. */
export function refusesItem(service: string): string {
  const text = readFileSync(STAND_INS, "utf8");
  const start = text.indexOf(`**${service}** (\`dev/`);
  if (start === -1) throw new Error(`dev/README.md has no **${service}** stand-in paragraph`);
  const section = text.slice(start, text.indexOf("\n\n**", start + 1));
  const item = /^- Refuses[\s\S]*?(?=^- |$(?![\s\S]))/m.exec(section)?.[0] ?? "";
  return item.replace(/\s*\n\s*/g, " ");
}

/** Every `code span` of an item. */
export const spans = (item: string): string[] =>
  [...item.matchAll(/`([^`]+)`/g)].map((m) => m[1] ?? "");
