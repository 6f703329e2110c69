/**
 * `npm run build`: exactly what Vercel deploys, made offline with Vercel's own builder
 * (`vercel build`, the pinned `vercel` devDependency). The builder needs a linked project;
 * the settings it reads are written here (no framework; the build and install commands and the
 * static folder are in `vercel.json`) instead of being fetched, so no login and no token are needed.
 * The output is `.vercel/output/` (git-ignored).
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));

/** The project settings `vercel build` would otherwise pull from the dashboard. */
const project = {
  projectId: "local",
  orgId: "local",
  settings: { framework: null },
};

export function buildArtifact(): void {
  mkdirSync(`${root}/.vercel`, { recursive: true });
  writeFileSync(`${root}/.vercel/project.json`, `${JSON.stringify(project, null, 2)}\n`);
  const started = Date.now();
  const result = spawnSync("vercel", ["build", "--yes"], {
    cwd: root,
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, VERCEL_TELEMETRY_DISABLED: "1" },
  });
  if (result.status !== 0) {
    throw new Error(`vercel build failed (exit ${result.status ?? result.signal})`);
  }
  console.log(`built .vercel/output in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  try {
    buildArtifact();
  } catch (error) {
    console.error((error as Error).message);
    process.exit(1);
  }
}
