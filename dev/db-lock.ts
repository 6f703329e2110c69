/**
 * `npm run db:lock`: adds every new migration's SHA-256 to `supabase/migrations.lock`
 * (dev/postgres/lock.ts). A listed migration whose text changed, or that is gone, is refused:
 * write a new migration instead. `-- --amend <file>` re-locks one changed file on purpose (a
 * migration that has not landed yet, said so in review).
 */
import { readFile, writeFile } from "node:fs/promises";
import { diffLock, formatLock, hashMigrations, LOCK_FILE, parseLock } from "./postgres/lock.ts";

const amend = new Set<string>();
const args = process.argv.slice(2);
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--amend" && args[i + 1]) amend.add(args[++i] as string);
  else {
    console.error("usage: npm run db:lock [-- --amend <migration file>]");
    process.exit(2);
  }
}

const locked = parseLock(await readFile(LOCK_FILE, "utf8").catch(() => ""));
const onDisk = await hashMigrations();
const diff = diffLock(locked, onDisk);
const refused = [...diff.changed.filter((n) => !amend.has(n)), ...diff.removed];
if (refused.length > 0) {
  for (const n of diff.changed.filter((c) => !amend.has(c)))
    console.error(
      `${n} changed since it was locked: a landed migration never changes; write a new one`,
    );
  for (const n of diff.removed) console.error(`${n} is locked but gone`);
  process.exit(1);
}
for (const n of [...diff.added, ...diff.changed]) locked.set(n, onDisk.get(n) as string);
await writeFile(LOCK_FILE, formatLock(locked));
console.log(
  `migrations.lock: ${locked.size} migrations` +
    (diff.added.length > 0 ? `, added ${diff.added.join(", ")}` : "") +
    (diff.changed.length > 0 ? `, amended ${diff.changed.join(", ")}` : ""),
);
