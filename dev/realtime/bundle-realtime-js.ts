/**
 * `npm run bundle:realtime-js`: the official Supabase Realtime client (@supabase/realtime-js,
 * the locked version, the one supabase-js uses) as one ES module the page loads from its own
 * origin (`public/vendor/realtime-js.js`), for the same reasons as the auth-js bundle
 * (dev/auth/bundle-auth-js.ts): the CSP allows `script-src 'self'` only, and Vercel deploys
 * `public/` as it is in git. test/dev/gotrue-bundle.test.ts fails when the committed file is
 * not what this script makes from the installed version.
 */
import { writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

export const REALTIME_BUNDLE = fileURLToPath(
  new URL("../../public/vendor/realtime-js.js", import.meta.url),
);

/** What the page imports; nothing else is kept. */
const ENTRY = `export { RealtimeClient } from "@supabase/realtime-js";\n`;

export async function bundleRealtimeJs(): Promise<string> {
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
      js: "// @ts-nocheck\n// @supabase/realtime-js (MIT, Supabase), bundled by dev/realtime/bundle-realtime-js.ts: do not edit.",
    },
  });
  const file = out.outputFiles[0];
  if (!file) throw new Error("esbuild made no output");
  return file.text;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(REALTIME_BUNDLE, await bundleRealtimeJs());
  console.log(`wrote ${REALTIME_BUNDLE}`);
}
