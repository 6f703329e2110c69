// @ts-check
/**
 * A document's markdown as DOM nodes the page can insert. marked turns the text into HTML;
 * DOMPurify parses that HTML in an inert document, keeps only plain markup and hands back a
 * DocumentFragment (RETURN_DOM_FRAGMENT), so no string the model wrote is ever assigned to
 * `innerHTML`. Scripts, event attributes, `javascript:` URLs, images (tracking pixels), forms and
 * inline styles are gone; `id`, `name` and `class` too, so an output cannot clobber or restyle the
 * page's own elements. Links open in a new tab with `rel="noopener noreferrer"`. The page's CSP
 * (`script-src 'self'`, no inline handlers) is a second wall behind this one, not the first.
 *
 * What the answer leaves open must not hide what follows it. The HTML parser reads everything
 * after an unclosed `<style>`, `<script>`, `<textarea>`, `<title>`, `<template>`, `<plaintext>`
 * (and their kin) or `<!--` as that element's text, to the end of the input, and DOMPurify then
 * drops the element with all of it; CommonMark likewise runs a `<style>`, `<script>`,
 * `<textarea>`, `<pre>` or `<!--` HTML block to the end of the document when it is not closed.
 * So: such an HTML block that is never closed is only its first line; those tags and `<!`, `<?`
 * in the answer's HTML are written as text (what the model wrote, shown, not run); and each
 * top-level block is sanitized on its own, so whatever else a block leaves open (a quote in an
 * attribute, a `<pre>`) ends with that block.
 */
import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

// A tag or markup the HTML parser would read what follows as text for, or as a comment.
const SWALLOWS =
  /<(?=[!?]|\/?(?:script|style|textarea|title|template|plaintext|xmp|iframe|noembed|noframes|noscript)(?![\w-]))/gi;
// The CommonMark HTML blocks that run to the end of the document when unclosed, and their ends.
/** @type {{ start: RegExp, end: (tag: string) => string }[]} */
const RUNS_TO_END = [
  { start: /^ {0,3}<(script|pre|style|textarea)(?=[\s>]|$)/i, end: (tag) => `</${tag}>` },
  { start: /^ {0,3}<!--/, end: () => "-->" },
  { start: /^ {0,3}<\?/, end: () => "?>" },
  { start: /^ {0,3}<!\[CDATA\[/, end: () => "]]>" },
  { start: /^ {0,3}<![a-z]/i, end: () => ">" },
];

const markdown = new Marked({
  gfm: true,
  async: false,
  tokenizer: {
    html(src) {
      for (const { start, end } of RUNS_TO_END) {
        const open = start.exec(src);
        if (!open) continue;
        if (src.toLowerCase().includes(end(open[1] ?? "").toLowerCase())) return false;
        const line = /^[^\n]*\n?/.exec(src)?.[0] ?? src;
        return { type: "html", block: true, pre: false, raw: line, text: line };
      }
      return false;
    },
  },
  renderer: {
    html({ text }) {
      return text.replace(SWALLOWS, "&lt;");
    },
  },
});

/** @param {import("./vendor/marked.esm.js").Token} token */
function deeperHeading(token) {
  // The card's title is an h3: the document's own headings sit below it (# → h4, capped at h6).
  if (token.type === "heading") token.depth = Math.min(6, token.depth + 3);
}

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
  const tokens = markdown.lexer(text);
  markdown.walkTokens(tokens, deeperHeading);
  const out = document.createDocumentFragment();
  for (const token of tokens) out.append(DOMPurify.sanitize(markdown.parser([token]), KEEP));
  return out;
}
