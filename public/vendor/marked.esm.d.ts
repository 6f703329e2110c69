// The types of the page's copy of marked (public/vendor/marked.esm.js), from the installed package.
export * from "marked";
