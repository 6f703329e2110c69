/**
 * The page's copies of its browser libraries (public/vendor/) are the installed packages'
 * own files, at the locked versions: an upgrade that forgot `npm run build` (which copies them),
 * or a hand edit of a copy, fails here.
 */
import { readFileSync } from "node:fs";
import { describe, expect, test } from "vitest";
import { VENDOR, vendorCopy } from "../../dev/build.ts";

const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");

describe("the page's vendored libraries", () => {
  for (const entry of VENDOR) {
    test(`${entry.to} is ${entry.pkg}'s ${entry.file} at the locked version`, () => {
      expect(read(entry.to) === vendorCopy(entry), "run npm run build and commit the copy").toBe(
        true,
      );
      const installed = JSON.parse(read(`node_modules/${entry.pkg}/package.json`)).version;
      const locked = JSON.parse(read("package-lock.json")).packages[`node_modules/${entry.pkg}`]
        .version;
      expect(installed).toBe(locked);
      expect(read(entry.to)).toContain(`${entry.pkg} ${locked}, license`);
    });
  }

  test("the pages import each of them from their own origin", () => {
    const pageModules = ["public/render.js", "public/ops.js"].map(read).join("\n");
    const opsPage = read("public/ops.html");
    for (const entry of VENDOR) {
      const name = entry.to.split("/").pop();
      if (entry.to.endsWith(".css")) expect(opsPage).toContain(`href="/vendor/${name}"`);
      else expect(pageModules).toContain(`from "./vendor/${name}"`);
    }
  });
});
