// The types of the page's copy of DOMPurify (public/vendor/purify.es.js), from the installed package.
export type * from "dompurify";
export { default } from "dompurify";
