/**
 * Landed migrations are locked: `supabase/migrations.lock` holds each migration's SHA-256 in
 * `sha256sum` format, so a database that applied a migration's text is never left behind by a
 * later edit of it (the CLI applies a migration once, by name, and never again). A change to a
 * landed migration is a new migration. The lock is checked by `test/unit/migrations-lock.test.ts`
 * and by anyone with coreutils: `cd supabase/migrations && sha256sum -c ../migrations.lock`.
 */
import { createHash } from "node:crypto";
import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { migrationsDir, root } from "./migrate.ts";

export const LOCK_FILE = join(root, "supabase", "migrations.lock");

/** File name → SHA-256 (hex) of its bytes. */
export type Lock = Map<string, string>;

export function parseLock(text: string): Lock {
  const lock: Lock = new Map();
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const m = /^([0-9a-f]{64}) {2}(\S+\.sql)$/.exec(line);
    if (!m?.[1] || !m[2])
      throw new Error(`migrations.lock line ${i + 1} is not "<sha256>  <file>"`);
    if (lock.has(m[2])) throw new Error(`migrations.lock lists ${m[2]} twice`);
    lock.set(m[2], m[1]);
  }
  return lock;
}

export function formatLock(lock: Lock): string {
  const names = [...lock.keys()].sort();
  return `${[
    "# The SHA-256 of every landed migration (sha256sum format). A landed migration never changes:",
    "# write a new one. `npm run db:lock` adds new migrations; it refuses a changed one.",
    ...names.map((n) => `${lock.get(n)}  ${n}`),
  ].join("\n")}\n`;
}

export const sha256 = (bytes: Buffer | string) => createHash("sha256").update(bytes).digest("hex");

/** The migrations on disk, hashed. */
export async function hashMigrations(dir = migrationsDir): Promise<Lock> {
  const names = (await readdir(dir)).filter((n) => n.endsWith(".sql")).sort();
  const lock: Lock = new Map();
  for (const n of names) lock.set(n, sha256(await readFile(join(dir, n))));
  return lock;
}

export interface LockDiff {
  /** Listed, and the file's text is not what was locked. */
  changed: string[];
  /** Listed, and the file is gone. */
  removed: string[];
  /** On disk, not yet listed. */
  added: string[];
}

export function diffLock(locked: Lock, onDisk: Lock): LockDiff {
  const changed: string[] = [];
  const removed: string[] = [];
  for (const [name, hash] of locked) {
    const now = onDisk.get(name);
    if (now === undefined) removed.push(name);
    else if (now !== hash) changed.push(name);
  }
  const added = [...onDisk.keys()].filter((n) => !locked.has(n));
  return { changed, removed, added };
}
