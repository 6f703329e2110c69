// @ts-check
/**
 * The page's connect-src, narrowed at run time to the one Supabase project it was configured
 * with. The Content-Security-Policy header (vercel.json, every route) is static: it allows the
 * app itself and `https://*.supabase.co`, because the project's URL is configuration, not code.
 * Once the page has read that URL from /api/public-config, it adds a second policy (a meta
 * element) allowing only the app and that origin; the browser enforces both, so from then on
 * the page can reach no other Supabase project and nothing else.
 */

/**
 * The connect-src directive for a Supabase URL: `'self'` and that URL's origin (no path), or
 * `'self'` alone when there is no usable https URL (the page then talks only to the app).
 *
 * @param {string | null | undefined} supabaseUrl
 * @returns {string}
 */
export function connectPolicy(supabaseUrl) {
  try {
    const url = new URL(supabaseUrl ?? "");
    if (url.protocol === "https:") return `connect-src 'self' ${url.origin}`;
  } catch {
    // not a URL: nothing but the app
  }
  return "connect-src 'self'";
}

/**
 * Adds the narrowed policy to the document's head.
 *
 * @param {Document} doc
 * @param {string | null | undefined} supabaseUrl
 */
export function narrowConnectSrc(doc, supabaseUrl) {
  const meta = doc.createElement("meta");
  meta.httpEquiv = "Content-Security-Policy";
  meta.content = connectPolicy(supabaseUrl);
  doc.head.append(meta);
}
