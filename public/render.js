// @ts-check
/**
 * A document's markdown as DOM nodes the page can insert. marked turns the text into HTML;
 * DOMPurify parses that HTML in an inert document, keeps only plain markup and hands back a
 * DocumentFragment (RETURN_DOM_FRAGMENT), so no string the model wrote is ever assigned to
 * `innerHTML`. Scripts, event attributes, `javascript:` URLs, images (tracking pixels), forms and
 * inline styles are gone; `id`, `name` and `class` too, so an output cannot clobber or restyle the
 * page's own elements. Links open in a new tab with `rel="noopener noreferrer"`. The page's CSP
 * (`script-src 'self'`, no inline handlers) is a second wall behind this one, not the first.
 */
import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

const markdown = new Marked({
  gfm: true,
  async: false,
  // The card's title is an h3: the document's own headings sit below it (# → h4, capped at h6).
  walkTokens(token) {
    if (token.type === "heading") token.depth = Math.min(6, token.depth + 3);
  },
});

/** @type {import("./vendor/purify.es.js").Config & { RETURN_DOM_FRAGMENT: true }} */
const KEEP = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: [
    "img",
    "picture",
    "source",
    "video",
    "audio",
    "style",
    "form",
    "input",
    "button",
    "textarea",
    "select",
    "dialog",
  ],
  FORBID_ATTR: ["id", "name", "class", "style", "target", "srcset"],
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/**
 * The markdown, rendered and sanitized.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function renderMarkdown(text) {
  return DOMPurify.sanitize(markdown.parse(text, { async: false }), KEEP);
}
