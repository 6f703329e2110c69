/**
 * `npm run build`: exactly what Vercel deploys, made offline with Vercel's own builder
 * (`vercel build`, the pinned `vercel` devDependency). The builder needs a linked project;
 * the settings it reads are written here (no framework; the build and install commands and the
 * static folder are in `vercel.json`) instead of being fetched, so no login and no token are needed.
 * The output is `.vercel/output/` (git-ignored).
 *
 * First it copies the browser libraries the page imports (VENDOR) from node_modules into
 * `public/vendor/`, so the build ships the installed versions. The copies are committed: Vercel
 * deploys `public/` as it is in git (vercel.json has no build command), so a file made only at
 * build time would be missing from a git deployment. test/unit/public-vendor.test.ts fails when
 * a committed copy is not what this step makes from the installed version.
 */
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { bundleFunctions } from "./bundle-functions.ts";

const root = fileURLToPath(new URL("..", import.meta.url));
export const OUTPUT_DIR = join(root, ".vercel", "output");
/** Everything `vercel build` reads to make the output. */
const INPUTS = [
  "api",
  "lib",
  "public",
  "vercel.json",
  "package.json",
  "package-lock.json",
  "tsconfig.json",
];
const STAMP = join(root, ".vercel", "build-inputs.sha256");
/** The builder's own handler files, kept when they are bundled (dev/bundle-functions.ts). */
export const TRACED_DIR = join(root, ".vercel", "traced");
/** `QUOTA_JOBS_BUNDLE=0`: leave the output as Vercel's builder made it. */
const bundling = () => process.env.QUOTA_JOBS_BUNDLE !== "0";

function files(path: string): string[] {
  if (!existsSync(path)) return [];
  try {
    return readdirSync(path, { withFileTypes: true }).flatMap((e) => files(join(path, e.name)));
  } catch {
    return [path];
  }
}

/** A digest of the build's inputs: the output is fresh when it was made from these. */
export function inputsDigest(): string {
  const hash = createHash("sha256");
  hash.update(bundling() ? "bundled\0" : "traced\0");
  for (const file of INPUTS.flatMap((p) => files(join(root, p))).sort()) {
    hash.update(relative(root, file)).update("\0").update(readFileSync(file)).update("\0");
  }
  return hash.digest("hex");
}

/**
 * The page's browser libraries: each package's own browser ES module build, served from the
 * page's origin (the CSP allows `script-src 'self'` only, no CDN) and imported by public/*.js.
 */
export const VENDOR = [
  { pkg: "marked", file: "lib/marked.esm.js", to: "public/vendor/marked.esm.js" },
  // saved as .js: static servers know its media type (a module must be served as JavaScript)
  { pkg: "dompurify", file: "dist/purify.es.mjs", to: "public/vendor/purify.es.js" },
  // the operator page's charts (public/ops.js) and their stylesheet (public/ops.html)
  { pkg: "uplot", file: "dist/uPlot.esm.js", to: "public/vendor/uplot.esm.js" },
  { pkg: "uplot", file: "dist/uPlot.min.css", to: "public/vendor/uplot.min.css" },
] as const;

/** What `public/vendor/` holds for one library: a header line, then the package's file as is. */
export function vendorCopy(entry: (typeof VENDOR)[number]): string {
  const dir = join(root, "node_modules", entry.pkg);
  const { version, license } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  const about = `${entry.pkg} ${version}, license ${license}: node_modules/${entry.pkg}/${entry.file}, copied by dev/build.ts: do not edit.`;
  const header = entry.to.endsWith(".css") ? `/* ${about} */\n` : `// @ts-nocheck\n// ${about}\n`;
  return header + readFileSync(join(dir, entry.file), "utf8");
}

/** Writes each VENDOR copy that differs from the installed package's; returns the paths written. */
export function copyVendor(): string[] {
  const written: string[] = [];
  for (const entry of VENDOR) {
    const target = join(root, entry.to);
    const copy = vendorCopy(entry);
    if (existsSync(target) && readFileSync(target, "utf8") === copy) continue;
    writeFileSync(target, copy);
    written.push(entry.to);
  }
  return written;
}

/** Builds unless `.vercel/output` was built from exactly today's sources. */
export function ensureBuild(log: (line: string) => void = console.log): "fresh" | "built" {
  const digest = inputsDigest();
  const fresh =
    existsSync(join(OUTPUT_DIR, "config.json")) &&
    existsSync(STAMP) &&
    readFileSync(STAMP, "utf8").trim() === digest;
  if (fresh) return "fresh";
  log("building with Vercel's builder (npm run build): the sources changed since the last build");
  const started = Date.now();
  buildArtifact({ quiet: true });
  log(`built .vercel/output in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return "built";
}

/** The project settings `vercel build` would otherwise pull from the dashboard. */
const project = {
  projectId: "local",
  orgId: "local",
  settings: { framework: null },
};

export function buildArtifact(options: { quiet?: boolean } = {}): void {
  const digest = inputsDigest();
  mkdirSync(`${root}/.vercel`, { recursive: true });
  writeFileSync(`${root}/.vercel/project.json`, `${JSON.stringify(project, null, 2)}\n`);
  const started = Date.now();
  const result = spawnSync(join(root, "node_modules", ".bin", "vercel"), ["build", "--yes"], {
    cwd: root,
    stdio: ["ignore", options.quiet ? "pipe" : "inherit", options.quiet ? "pipe" : "inherit"],
    encoding: "utf8",
    env: { ...process.env, VERCEL_TELEMETRY_DISABLED: "1" },
  });
  if (result.status !== 0) {
    const said = options.quiet
      ? `:\n${`${result.stdout}${result.stderr}`.trim().slice(-3000)}`
      : "";
    throw new Error(`vercel build failed (exit ${result.status ?? result.signal})${said}`);
  }
  rmSync(TRACED_DIR, { recursive: true, force: true });
  if (bundling()) bundleFunctions(OUTPUT_DIR, TRACED_DIR);
  writeFileSync(STAMP, `${digest}\n`);
  if (!options.quiet)
    console.log(`built .vercel/output in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    for (const path of copyVendor()) console.log(`copied ${path} from node_modules: commit it`);
    buildArtifact();
  } catch (error) {
    console.error((error as Error).message);
    process.exit(1);
  }
}
