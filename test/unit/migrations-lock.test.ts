/**
 * Landed migrations are locked (dev/postgres/lock.ts): a database that applied a migration never
 * sees a later edit of it, so the lock fails the suite when a listed migration's text changes or
 * goes, and when a migration is not listed yet (`npm run db:lock` adds it).
 */
import { execFileSync } from "node:child_process";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import {
  diffLock,
  formatLock,
  hashMigrations,
  LOCK_FILE,
  parseLock,
} from "../../dev/postgres/lock.ts";
import { migrationsDir } from "../../dev/postgres/migrate.ts";

const dirs: string[] = [];
afterAll(async () => {
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
});

/** A copy of the migrations to plant changes in. */
async function copy(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "quota-jobs-lock-"));
  dirs.push(dir);
  await cp(migrationsDir, dir, { recursive: true });
  return dir;
}

describe("supabase/migrations.lock", () => {
  test("lists every migration, each as it landed (a new one: npm run db:lock)", async () => {
    const locked = parseLock(await readFile(LOCK_FILE, "utf8"));
    expect(diffLock(locked, await hashMigrations())).toEqual({
      changed: [],
      removed: [],
      added: [],
    });
    expect(locked.size).toBeGreaterThan(20);
  });

  test("is what coreutils checks: sha256sum -c passes on it", () => {
    const out = execFileSync("sha256sum", ["--strict", "-c", LOCK_FILE], {
      cwd: migrationsDir,
      encoding: "utf8",
    });
    expect(
      out
        .trim()
        .split("\n")
        .every((l) => l.endsWith(": OK")),
    ).toBe(true);
  });

  test("a planted edit of a landed migration, a deleted one and an unlisted one are each named", async () => {
    const locked = parseLock(await readFile(LOCK_FILE, "utf8"));
    const [first, second] = [...locked.keys()];
    const dir = await copy();
    const path = join(dir, first as string);
    await writeFile(path, `${await readFile(path, "utf8")}\n-- one more line\n`);
    await rm(join(dir, second as string));
    await writeFile(join(dir, "29990101000000_new.sql"), "select 1;\n");
    expect(diffLock(locked, await hashMigrations(dir))).toEqual({
      changed: [first],
      removed: [second],
      added: ["29990101000000_new.sql"],
    });
  });

  test("a whitespace-only edit counts: the lock compares bytes", async () => {
    const locked = parseLock(await readFile(LOCK_FILE, "utf8"));
    const name = [...locked.keys()].at(-1) as string;
    const dir = await copy();
    const path = join(dir, name);
    await writeFile(path, (await readFile(path, "utf8")).replace(/\n$/, " \n"));
    expect(diffLock(locked, await hashMigrations(dir)).changed).toEqual([name]);
  });

  test("round-trips, and refuses a malformed or repeated line", () => {
    const lock = new Map([["20260101000000_a.sql", "a".repeat(64)]]);
    expect(parseLock(formatLock(lock))).toEqual(lock);
    expect(() => parseLock("abc  20260101000000_a.sql")).toThrow(/line 1/);
    const line = `${"b".repeat(64)}  20260101000000_a.sql`;
    expect(() => parseLock(`${line}\n${line}\n`)).toThrow(/twice/);
  });
});
