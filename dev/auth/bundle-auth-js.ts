/**
 * `npm run bundle:auth-js`: the official Supabase Auth client (@supabase/auth-js, the locked
 * version) as one ES module the page loads from its own origin (`public/vendor/auth-js.js`; the
 * CSP allows `script-src 'self'` only, and no CDN). The bundle is committed, not made at build
 * time: Vercel deploys `public/` as it is in git (vercel.json has no build command, and
 * dev/build.ts runs only on a developer's machine), so a generated file would be missing from a
 * git deployment. test/dev/gotrue-bundle.test.ts fails when the committed file is not what
 * this script makes from the installed version (after an upgrade, run it again).
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export const BUNDLE = fileURLToPath(new URL("../../public/vendor/auth-js.js", import.meta.url));

/** What the page imports; nothing else is kept (esbuild drops the rest). */
const ENTRY = `export {
  GoTrueClient,
  isAuthApiError,
  isAuthError,
  isAuthImplicitGrantRedirectError,
  isAuthRetryableFetchError,
  isAuthWeakPasswordError,
} from "@supabase/auth-js";
`;

export async function bundleAuthJs(): Promise<string> {
  const out = await build({
    stdin: {
      contents: ENTRY,
      resolveDir: fileURLToPath(new URL(".", import.meta.url)),
      loader: "js",
    },
    bundle: true,
    format: "esm",
    platform: "browser",
    target: "es2022",
    minify: true,
    legalComments: "inline",
    write: false,
    logLevel: "silent",
    banner: {
      js: "// @ts-nocheck\n// @supabase/auth-js (MIT, Supabase), bundled by dev/auth/bundle-auth-js.ts: do not edit.",
    },
  });
  const file = out.outputFiles[0];
  if (!file) throw new Error("esbuild made no output");
  return file.text;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(BUNDLE, await bundleAuthJs());
  console.log(`wrote ${BUNDLE}`);
}
